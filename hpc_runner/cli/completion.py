"""``hpc-runner completion SHELL``: a tab-completion script for bash, zsh or tcsh, generated from the parsers
themselves (shtab), so it never drifts from the commands and options. On top of shtab's script: profile names
after ``--cluster``, bundle folders and names after ``--bundle``, folders after a command that takes a sweep or
run dir, and (bash, zsh) the bundle's own ids after ``--`` on the commands that take overrides."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import hpc_runner
from hpc_runner.cli import COMMANDS, _load, build_parser
from hpc_runner.scheduler.profiles import BUILTIN_DIR

HELP = "print a shell completion script (bash, zsh, tcsh) made from the commands' own options"
DESCRIPTION = """Print a tab-completion script for SHELL: the commands, their options and the choices of
options such as --tracking, generated from hpc-runner's own argument parsers; profile names after --cluster,
bundles after --bundle, folders for the commands that take a sweep or run dir, and (bash, zsh) the ids of the
bundle named on the line after -- (`hpc-runner run --bundle B --optimizer::<TAB>`, read with `hpc-runner config
--ids`). Nothing is installed: load it in your shell's start-up file."""
EPILOG = """examples:
  hpc-runner completion bash > ~/.local/share/bash-completion/completions/hpc-runner   # once: loaded at TAB
  hpc-runner completion zsh > ~/.zfunc/_hpc-runner   # a folder on zsh's $fpath
  eval "$(hpc-runner completion bash)"          # in ~/.bashrc: works, but starts Python in every new shell"""
SHELLS = ("bash", "zsh", "tcsh")
DIR_COMMANDS = ("status", "resume", "collect", "cancel", "report", "rerun")  # their one positional is a folder

# bash: each function gets the word being completed and prints candidates; zsh: each adds them (compadd)
BASH_PREAMBLE = r"""
# Candidates are never expanded by the shell (no compgen -W on names from folders, files or bundles): they are
# compared as text, those with a control character (a newline, an escape) are dropped, and each is printed
# shell-quoted (printf %q), one per line, for the caller to read line by line into COMPREPLY.
_hpcr_quoted() {  # lines on stdin -> the safe ones, quoted
  local line
  while IFS= read -r line; do
    [[ -z $line || $line == *[[:cntrl:]]* ]] && continue
    printf '%q\n' "$line"
  done
}
_hpcr_matching() {  # $1: the word typed; the rest: candidates -> those starting with it, quoted
  local word=$1 c
  shift
  for c in "$@"; do
    [[ -n $c && $c != *[[:cntrl:]]* && $c == "$word"* ]] && printf '%q\n' "$c"
  done
}
_hpcr_profiles() {  # built-in profiles, those on $HPCR_CLUSTER_PATH and in the user's folder, or a .yaml file
  local -a names=(@BUILTIN@)
  local d f old_ifs=$IFS
  IFS=:
  for d in $HPCR_CLUSTER_PATH "${XDG_CONFIG_HOME:-$HOME/.config}/hpc-runner/clusters"; do
    for f in "$d"/*.yaml "$d"/*.yml; do [[ -f $f ]] && { f=${f##*/}; names+=("${f%.*}"); }; done
  done
  IFS=$old_ifs
  _hpcr_matching "$1" "${names[@]}"
  _hpcr_quoted < <(compgen -f -X '!*.y*ml' -- "$1")
}
_hpcr_bundles() {  # bundle folders, and the names on the bundle search path ($HPCR_BUNDLE_PATH, ./bundles)
  local -a names=()
  local d b old_ifs=$IFS
  IFS=:
  for d in $HPCR_BUNDLE_PATH bundles; do
    for b in "$d"/*/configs; do [[ -d $b ]] && { b=${b%/configs}; names+=("${b##*/}"); }; done
  done
  IFS=$old_ifs
  _hpcr_matching "$1" "${names[@]}"
  _hpcr_quoted < <(compgen -d -- "$1")
}
_hpcr_ids_of_line() {  # the ids of the bundle named on the line, as --ID (hpc-runner config --ids)
  local -a words args
  read -r -a words <<< "$1"
  local i command=""
  for ((i = 1; i < ${#words[@]}; i++)); do
    case " @ID_COMMANDS@ " in *" ${words[i]} "*) [[ -z $command ]] && command=${words[i]};; esac
    case ${words[i]} in
      --bundle|--config_file|--config-file|--meta_file|--meta-file) args+=("${words[i]}" "${words[i+1]}");;
      --bundle=*|--config_file=*|--config-file=*) args+=("${words[i]}");;
    esac
  done
  [[ -n $command && ${#args[@]} -gt 0 ]] || return 0
  @PYTHON@ config "${args[@]}" --ids 2>/dev/null
}
_hpcr_complete() {  # shtab's completer, then the bundle's ids after --
  _shtab_hpc_runner "$@"
  local line=${COMP_LINE:0:COMP_POINT}
  local cur=${line##*[[:space:]]}
  [[ $cur == --* ]] || return 0
  local id
  while IFS= read -r id; do
    [[ -z $id || $id == *[[:cntrl:]]* ]] && continue
    id=--$id
    [[ $id == "$cur"* ]] && COMPREPLY+=("$(printf '%q' "$id")")
  done < <(_hpcr_ids_of_line "${line% *}")
  if [[ $cur == *:* && $COMP_WORDBREAKS == *:* ]]; then  # bash completes the part after the last colon
    local colon_word=${cur%"${cur##*:}"} k
    for k in "${!COMPREPLY[@]}"; do COMPREPLY[k]=${COMPREPLY[k]#"$colon_word"}; done
  fi
}
"""
BASH_REGISTER = "complete -o bashdefault -F _hpcr_complete hpc-runner"
# shtab's own head says to copy the file to ~/.local/share/bash_completion/ and source it from ~/.bashrc: not what
# docs/getting-started.md says, and a Python-free but needless cost at every shell's start
BASH_HEADER = """# hpc-runner's bash completion, made from its parsers by `hpc-runner completion bash` (with shtab).
# Install it once: hpc-runner completion bash > ~/.local/share/bash-completion/completions/hpc-runner
# bash-completion loads it at the first TAB after hpc-runner (nothing is added to a shell's start); without
# bash-completion, `source` this file from ~/.bashrc. Write it again after updating hpc-runner.
"""
# shtab's file and folder completers pass the typed word unquoted (split and globbed) and keep names with a
# newline or an escape sequence: quoted, and such names dropped (bash quotes the rest itself: -o filenames)
_KEEP_SAFE = "| while IFS= read -r l; do [[ $l != *[[:cntrl:]]* ]] && printf '%s\\n' \"$l\"; done"
SHTAB_BASH_FIXES = (("compgen -f -- $1  # files", f'compgen -f -- "$1" {_KEEP_SAFE}  # files'),
                    ("compgen -d -- $1  # recurse into subdirs", f'compgen -d -- "$1" {_KEEP_SAFE}  # folders'))

ZSH_PREAMBLE = r"""
_hpcr_zsh_profiles() {
  local -a names; local d f
  names=(@BUILTIN@)
  for d in ${(s.:.)HPCR_CLUSTER_PATH} ${XDG_CONFIG_HOME:-$HOME/.config}/hpc-runner/clusters; do
    for f in $d/*.y(|a)ml(N); do names+=(${${f:t}%.*}); done
  done
  compadd -- ${names:#*[[:cntrl:]]*}
  _files -g '*.y(|a)ml'
}
_hpcr_zsh_bundles() {
  local -a names; local d b
  for d in ${(s.:.)HPCR_BUNDLE_PATH} bundles; do
    for b in $d/*/configs(N/); do names+=(${b:h:t}); done
  done
  compadd -- ${names:#*[[:cntrl:]]*}
  _files -/
}
_hpcr_zsh_ids() {  # the ids of the bundle named on the line, as --ID (hpc-runner config --ids)
  [[ $PREFIX == --* ]] || return 0
  local i command="" ; local -a args ids known
  known=(@ID_COMMANDS@)
  for ((i = 2; i <= $#words; i++)); do
    (( ${known[(Ie)${words[i]}]} )) && [[ -z $command ]] && command=${words[i]}
    case ${words[i]} in
      --bundle|--config_file|--config-file|--meta_file|--meta-file) args+=(${words[i]} ${words[i+1]});;
      --bundle=*|--config_file=*|--config-file=*) args+=(${words[i]});;
    esac
  done
  [[ -n $command && $#args -gt 0 ]] || return 0
  ids=(${(f)"$(@PYTHON@ config $args --ids 2>/dev/null)"})
  ids=(${ids:#*[[:cntrl:]]*})
  compadd -- ${ids/#/--}  # compadd quotes what it inserts (no -Q)
}
_hpcr_zsh() {
  _shtab_hpc_runner "$@"
  _hpcr_zsh_ids
}
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the shell argument."""
    parser.add_argument("shell", choices=SHELLS, help="the shell the script is for")


def _mark_dynamic(subparsers: dict[str, argparse.ArgumentParser], shtab: object) -> None:
    """Say which arguments shtab completes with our functions: profiles, bundles, folders."""
    profiles = {"bash": "_hpcr_profiles", "zsh": "_hpcr_zsh_profiles", "tcsh": "f"}
    bundles = {"bash": "_hpcr_bundles", "zsh": "_hpcr_zsh_bundles", "tcsh": "d"}
    for name, sub in subparsers.items():
        for action in sub._actions:
            if action.dest == "cluster":
                action.complete = profiles  # type: ignore[attr-defined]
            elif action.dest == "bundle" and (action.option_strings or name in ("verify", "pack")):
                action.complete = bundles  # type: ignore[attr-defined]
            elif not action.option_strings and name in DIR_COMMANDS:
                action.complete = shtab.DIRECTORY  # type: ignore[attr-defined]
            elif not action.option_strings and name == "pipeline":
                action.complete = shtab.FILE  # type: ignore[attr-defined]


def entry_point_command() -> str:
    """The shell words that run hpc-runner's CLI for completion, whatever the current folder holds: this
    installation's Python, isolated (``-I``: no current folder, PYTHON* variables or user site on sys.path),
    with only the folder that holds this hpc_runner put first, so a ``hpc_runner`` or ``yaml`` module in the
    folder where TAB is pressed is never imported."""
    package_parent = str(Path(hpc_runner.__file__).resolve().parents[1])
    code = (f"import sys; sys.path.insert(0, {package_parent!r}); from hpc_runner.cli import entry; "
            "sys.argv[0] = 'hpc-runner'; entry()")
    return " ".join(shlex.quote(w) for w in (sys.executable, "-I", "-c", code))


def script(shell: str) -> str:
    """Return the completion script for ``shell``."""
    import shtab  # a small, pure-Python dependency; imported by this command only

    parser, subparsers = build_parser()
    _mark_dynamic(subparsers, shtab)
    builtin = " ".join(sorted(p.stem for p in BUILTIN_DIR.glob("*.yaml")))
    id_commands = " ".join(n for n in COMMANDS if getattr(_load(n), "ACCEPTS_OVERRIDES", False))
    python = entry_point_command()

    def fill(text: str) -> str:
        return text.replace("@BUILTIN@", builtin).replace("@ID_COMMANDS@", id_commands).replace("@PYTHON@", python)

    if shell == "bash":
        out = shtab.complete(parser, shell="bash", preamble={"bash": fill(BASH_PREAMBLE)})
        register = "complete -o bashdefault -F _shtab_hpc_runner hpc-runner"
        if register not in out:  # a shtab that registers otherwise would leave our ids out silently
            raise RuntimeError("shtab's bash script changed: its `complete` line was not found")
        for old, new in SHTAB_BASH_FIXES:
            if old not in out:
                raise RuntimeError(f"shtab's bash script changed: {old!r} was not found")
            out = out.replace(old, new)
        head, _, body = out.partition("\n\n")  # shtab's comment block, then the script
        out = BASH_HEADER + "\n" + body if all(ln.startswith("#") for ln in head.splitlines()) else out
        return out.replace(register, BASH_REGISTER)
    if shell == "zsh":
        out = shtab.complete(parser, shell="zsh", preamble={"zsh": fill(ZSH_PREAMBLE)})
        for old, new in (("compdef _shtab_hpc_runner -N hpc-runner", "compdef _hpcr_zsh -N hpc-runner"),
                         ('  _shtab_hpc_runner "$@"\nfi', '  _hpcr_zsh "$@"\nfi')):
            if old not in out:
                raise RuntimeError(f"shtab's zsh script changed: {old!r} was not found")
            out = out.replace(old, new)
        return out
    return shtab.complete(parser, shell=shell)


def main(args: argparse.Namespace) -> int:
    """Print the script."""
    print(script(args.shell))
    return 0

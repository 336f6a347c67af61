"""The sbatch script: every value that reaches it is checked for its field, then the script is proven.

A job script is shell code, and most of what goes into it is not ours: the bundle's free-text name
(the job name), ``--slurm`` values, profile lines, the run dir's path. submitit writes each option as
``#SBATCH --key=<shlex-quoted value>``, but a ``#SBATCH`` line is a comment to bash and a newline
inside the quotes ends it: the rest of the value became a command. So:

1. ``check_parameters`` refuses control characters in every value, anywhere (exit 2, naming the
   field), checks each field against the characters SLURM accepts for it, and reduces job names to
   ``[A-Za-z0-9_.+-]``;
2. ``prove_script`` parses the generated script back and checks that its ``#SBATCH`` block holds
   exactly the options intended (sbatch reads that block only up to the first command), and that
   every other line is one of the lines we write: the profile's ``setup`` lines, the srun command
   whose words are the ones intended, and submitit's fixed lines. Nothing else can be in it.

Every script that reaches sbatch (``submit``, ``sweep``, ``tune``, ``resume``, top-ups, ``--test-only``)
and every script ``--dry-run`` prints goes through both.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hpc_runner.control_chars import find_control_character
from hpc_runner.errors import ClusterError
from hpc_runner.scheduler import job_arguments
from hpc_runner.scheduler.batch_script import by_hand_line

_NAME = r"[A-Za-z0-9_.+-]+"
# what SLURM accepts in each field (sbatch(1)); anything else would be refused by sbatch, or worse
FIELD_PATTERNS: dict[str, tuple[str, str]] = {
    "partition": (rf"{_NAME}(,{_NAME})*", "partition names: letters, digits, _ . + - (comma-separated)"),
    "account": (_NAME, "an account name: letters, digits, _ . + -"),
    "qos": (_NAME, "a QOS name: letters, digits, _ . + -"),
    "reservation": (rf"{_NAME}(,{_NAME})*", "a reservation name"),
    "wckey": (_NAME, "a wckey name"),
    "constraint": (r"[A-Za-z0-9_.,&|*()\[\]:!=+-]+", "a node feature expression (features, & | * [ ] ( ))"),
    "exclude": (r"[A-Za-z0-9_.,\[\]-]+", "a node list such as node[01-03],gpu7"),
    "nodelist": (r"[A-Za-z0-9_.,\[\]-]+", "a node list such as node[01-03],gpu7"),
    "gres": (r"[A-Za-z0-9_.,:/-]+", "generic resources such as gpu:1 or gpu:a100:2"),
    "mem": (r"[0-9]+(\.[0-9]+)?[KMGTkmgt]?[Bb]?", "memory such as 16G or 16000M"),
    "mem_per_gpu": (r"[0-9]+(\.[0-9]+)?[KMGTkmgt]?[Bb]?", "memory such as 32G"),
    "mem_per_cpu": (r"[0-9]+(\.[0-9]+)?[KMGTkmgt]?[Bb]?", "memory such as 4G"),
    "dependency": (r"[A-Za-z0-9_:,?+]+", "a dependency list such as afterok:123:124"),
    "mail_type": (r"[A-Za-z0-9_,]+", "mail types such as END,FAIL"),
    "mail_user": (r"[A-Za-z0-9_.+@-]+", "an e-mail address"),
    "job_name": (_NAME, "a job name"),
}
_OPTION_KEY = re.compile(r"[a-z][a-z0-9-]*")
# what may start python in the job: a command and its arguments, no shell syntax
_SHELL_SYNTAX = re.compile(r"[;&|`$<>(){}\\!*?#~]")
# the #SBATCH options submitit writes when its parameters leave them unset (its renderer's defaults, submitit 1.5;
# a submitit that writes others fails the proof, so nothing is submitted, and tests/scheduler's golden script)
SUBMITIT_DEFAULTS: dict[str, Any] = {"job_name": "submitit", "time": 5, "nodes": 1, "wckey": "submitit"}
# submitit's own parameters that are not sbatch options
_NOT_OPTIONS = frozenset({"command", "folder", "map_count", "array_parallelism", "additional_parameters", "setup",
                          "teardown", "signal_delay_s", "stderr_to_stdout", "srun_args", "use_srun"})
_SUBMIT_MODULE = "submitit.core._submit"
# what a command job runs: its arguments are one JSON file (scheduler/slurm/command_job.py)
JOB_CALL_MODULE = job_arguments.JOB_CALL_MODULE  # every backend's job runner (scheduler/job_call.py), the earlier name
JOB_COMMAND = job_arguments.JOB_COMMAND  # what the script runs: python -u -m hpc_runner job FILE (cli/job.py)


def safe_job_name(text: str) -> str:
    """Return ``text`` reduced to the characters a job name may hold (``[A-Za-z0-9_.+-]``, at most 64)."""
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", str(text))[:64] or "hpcr"


def check_text(value: Any, field: str, where: str | None = None) -> str:
    """Return ``value`` as text; ClusterError when it holds a control character (a newline ends a script line)."""
    text = str(value)
    found = find_control_character(text)
    if found:
        raise ClusterError(
            f"{field} {text[:80]!r} holds a control character ({found[1]!r} at position {found[0]}), which would "
            "break the job script's lines",
            where=where,
            expected=f"{field} on one line, without control characters",
        )
    return text


def check_field(name: str, value: Any, where: str | None = None) -> None:
    """ClusterError unless ``value`` is valid for the sbatch option ``name`` (control characters anywhere)."""
    text = check_text(value, name.replace("_", "-"), where)
    rule = FIELD_PATTERNS.get(name.replace("-", "_"))
    if rule is not None and isinstance(value, str) and not re.fullmatch(rule[0], text):
        raise ClusterError(f"{name.replace('_', '-')} {text[:80]!r} is not valid", where=where, expected=rule[1])


def check_path(path: Path | str, what: str, where: str | None = None) -> None:
    """ClusterError for a folder that cannot appear in a job script: control characters, or ``%``
    (SLURM replaces ``%j``, ``%A`` ... in log paths, so the logs would go elsewhere)."""
    text = check_text(path, what, where)
    if "%" in text.replace("%j", "").replace("%A", "").replace("%a", ""):
        raise ClusterError(f"{what} {text!r} holds '%', which SLURM replaces in the job's log paths", where=where,
                           expected=f"{what} without '%'")


def check_python_command(command: str, where: str | None = None) -> list[str]:
    """Return the words of the profile's ``python`` command; ClusterError for shell syntax or control characters."""
    text = check_text(command, "python", where)
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise ClusterError(f"python {text!r} cannot be split into words ({exc})", where=where,
                           expected="a command such as /path/to/venv/bin/python") from None
    if not words or any(_SHELL_SYNTAX.search(w) for w in words):
        raise ClusterError(f"python {text!r} is not a plain command", where=where,
                           expected="a command and its arguments, without shell syntax (; & | ` $ < > and such)")
    return words


def check_parameters(parameters: Mapping[str, Any], where: str | None = None) -> None:
    """ClusterError for any value of submitit parameters that must not reach a job script."""
    for key, value in parameters.items():
        if key == "additional_parameters":
            for opt, v in (value or {}).items():
                if not _OPTION_KEY.fullmatch(str(opt)):
                    raise ClusterError(f"sbatch option name {str(opt)[:60]!r} is not valid", where=where,
                                       expected="an option name such as mail-type (letters, digits and -)")
                if isinstance(v, dict | list | tuple):
                    raise ClusterError(f"sbatch option {opt}: {v!r} is not a single value", where=where,
                                       expected="text, a number, or true")
                if opt == "chdir":
                    check_path(v, "the job's working directory", where)
                else:
                    check_field(str(opt), v, where)
        elif key in ("setup", "teardown", "srun_args"):
            for line in value or []:
                check_text(line, f"{key} line", where)
        elif isinstance(value, str | int | float):
            check_field(key, value, where)
        elif value is not None and not isinstance(value, bool):
            raise ClusterError(f"{key}: {value!r} is not a single value", where=where, expected="text or a number")


def _option(key: str, value: Any) -> tuple[str, str | None]:
    return key.replace("_", "-"), None if value is True else str(value)


def _log_patterns(folder: Path, map_count: int | None) -> tuple[str, str]:
    """Return submitit's stdout and stderr patterns (``%t`` kept: srun fills it per task)."""
    from submitit.core.utils import JobPaths

    paths = JobPaths(folder=folder)
    stdout, stderr = str(paths.stdout), str(paths.stderr)
    if map_count is not None:
        stdout, stderr = stdout.replace("%j", "%A_%a"), stderr.replace("%j", "%A_%a")
    return stdout, stderr


def intended_options(parameters: Mapping[str, Any], folder: Path, map_count: int | None) -> dict[str, str | None]:
    """Return the ``#SBATCH`` options the parameters ask for (key -> value; None for a flag), as submitit
    derives them: its defaults, then ours, then the log paths, the signal and the array."""
    from submitit.slurm.slurm import SlurmJobEnvironment

    options: dict[str, str | None] = dict(_option(name, value) for name, value in SUBMITIT_DEFAULTS.items())
    for name, value in parameters.items():
        if name not in _NOT_OPTIONS and value is not None:
            options.update([_option(name, value)])
        elif name in SUBMITIT_DEFAULTS and value is None:  # None: submitit writes no line for it (--wckey)
            options.pop(_option(name, value)[0], None)
    options["signal"] = f"{SlurmJobEnvironment.USR_SIG}@{parameters.get('signal_delay_s', 90)}"
    stdout, stderr = _log_patterns(folder, map_count)
    if map_count is not None:
        options["array"] = f"0-{map_count - 1}%{min(map_count, parameters.get('array_parallelism', 256))}"
    options["output"] = stdout.replace("%t", "0")
    if not parameters.get("stderr_to_stdout"):
        options["error"] = stderr.replace("%t", "0")
    options["open-mode"] = "append"
    for name, value in (parameters.get("additional_parameters") or {}).items():
        options.update([_option(name, value)])
    return options


def _run_words(folder: Path, args_file: Path | None) -> list[str]:
    """What python runs: submitit's runner of the folder's pickles, or ours of a command job's JSON file."""
    if args_file is not None:
        return [*JOB_COMMAND, str(args_file)]
    return ["-u", "-m", _SUBMIT_MODULE, str(folder)]


def intended_command(parameters: Mapping[str, Any], folder: Path, python: str, map_count: int | None,
                     args_file: Path | None = None) -> list[str]:
    """Return the words of the srun line that runs the job (``srun ... python -u -m ...``)."""
    stdout, stderr = _log_patterns(folder, map_count)
    words = ["srun", "--unbuffered", "--output", stdout]
    if not parameters.get("stderr_to_stdout"):
        words += ["--error", stderr]
    words += [str(a) for a in parameters.get("srun_args") or []]
    return [*words, *shlex.split(python), *_run_words(folder, args_file)]


def _parse_option(line: str) -> tuple[str, str | None]:
    body = line[len("#SBATCH "):]
    key, sep, raw = body.partition("=")
    if not key.startswith("--") or not _OPTION_KEY.fullmatch(key[2:]):
        raise ValueError(f"not an option: {line!r}")
    if not sep:
        return key[2:], None
    words = shlex.split(raw)
    if len(words) != 1 or shlex.quote(words[0]) != raw:
        raise ValueError(f"the value of {key} is not one quoted word: {line!r}")
    return key[2:], words[0]


def prove_script(
    script: str,
    parameters: Mapping[str, Any],
    folder: Path,
    python: str,
    map_count: int | None = None,
    where: str | None = None,
    args_file: Path | None = None,
    describe: str | None = None,
) -> None:
    """ClusterError unless ``script`` is exactly: (``describe``'s comment line,) the ``#SBATCH`` block of the
    intended options, the setup lines, and the srun command with the intended words (see the module doc)."""
    folder = Path(folder).expanduser().absolute()
    lines = script.split("\n")
    header = header_lines(args_file, map_count, describe)
    if header:  # the comments that say what runs and how to run it by hand (generated_script); then submitit's
        if lines[1:1 + len(header)] != header:
            raise ClusterError("the generated job script is not the one intended (its first comments are not what "
                               "runs); nothing was submitted", where=where)
        lines = [lines[0], *lines[1 + len(header):]]

    def fail(why: str) -> ClusterError:
        return ClusterError(f"the generated job script is not the one intended ({why}); nothing was submitted",
                            where=where, expected="values without line breaks or shell syntax in the job's fields")

    if lines[:3] != ["#!/bin/bash", "", "# Parameters"]:
        raise fail("its header changed")
    n = 3
    while n < len(lines) and lines[n].startswith("#SBATCH"):
        n += 1
    # what sbatch reads: every #SBATCH line up to the first line that is neither blank nor a comment
    found: dict[str, str | None] = {}
    for line in lines[3:]:
        if line.strip() and not line.startswith("#"):
            break
        if not line.startswith("#SBATCH"):
            continue
        try:
            key, value = _parse_option(line)
        except ValueError as exc:
            raise fail(str(exc)) from None
        if key in found:
            raise fail(f"option --{key} appears twice")
        found[key] = value
    intended = intended_options(parameters, folder, map_count)
    if found != intended:
        diff = sorted(set(found.items()) ^ set(intended.items()), key=str)[:4]
        raise fail(f"its #SBATCH block differs from the options intended: {diff}")
    rest = lines[n:]
    setup = [str(s) for s in parameters.get("setup") or []]
    skeleton = ["", *(["# setup", *setup, ""] if parameters.get("setup") is not None else []), "# command",
                "export SUBMITIT_EXECUTOR=slurm"]
    if rest[: len(skeleton)] != skeleton:
        raise fail("the lines after the #SBATCH block are not the setup lines intended")
    tail = rest[len(skeleton):]
    teardown = parameters.get("teardown")
    end = ["", *(["", "# teardown", *map(str, teardown)] if teardown is not None else [])]
    if len(tail) != 1 + len(end) or tail[1:] != end:
        raise fail("it has lines that are not the command intended")
    try:
        words = shlex.split(tail[0])
    except ValueError as exc:
        raise fail(f"its command cannot be read back ({exc})") from None
    if words != intended_command(parameters, folder, python, map_count, args_file):
        raise fail(f"its command is not the one intended: {tail[0][:200]!r}")


def description_line(describe: str) -> str:
    """The script's first comment: what runs, in words (one line)."""
    return f"# {' '.join(str(describe).split())}"


def header_lines(args_file: Path | None, map_count: int | None, describe: str | None) -> list[str]:
    """The comments after ``#!/bin/bash``: what runs (``describe``), and for a command job the command that runs
    it by hand (scheduler/batch_script.py ``by_hand_line``, as every backend's script has it)."""
    lines = [description_line(describe)] if describe else []
    if args_file is not None:
        lines.append(by_hand_line(args_file, map_count))
    return lines


def generated_script(parameters: Mapping[str, Any], folder: Path, python: str, map_count: int | None = None,
                     args_file: Path | None = None, describe: str | None = None) -> str:
    """Return the script submitit writes for these parameters (the same function sbatch's file comes from);
    with ``args_file``, the same script whose job (or tasks) runs a command job's JSON file instead of pickles.

    The one use of a private function of a dependency (submitit's ``_make_sbatch_string``), on purpose: submitit
    writes the file sbatch reads with it (an array through a ``SlurmExecutor`` it makes itself, so no subclass of
    ours can render it instead), and the proof must be of that very text, not of our copy of it. Rendering our own
    would mean submitting without submitit (its pickles, folders and job objects) or overriding more of its
    private methods. A submitit that renders differently, or drops the function, fails here or in the proof (an
    ImportError, a ClusterError: nothing is submitted) and in tests/scheduler's golden script, never silently."""
    from submitit.slurm.slurm import _make_sbatch_string

    folder = Path(folder).expanduser().absolute()  # as SlurmExecutor.__init__ does
    command = " ".join([python, *(shlex.quote(w) for w in _run_words(folder, args_file))])
    text = _make_sbatch_string(command=command, folder=folder, map_count=map_count, **parameters)
    header = header_lines(args_file, map_count, describe)
    if not header:
        return text
    first, _, rest = text.partition("\n")  # comments before the #SBATCH block: sbatch reads on past them
    return "\n".join([first, *header, rest])


def checked_script(
    parameters: Mapping[str, Any], folder: Path, python: str, map_count: int | None = None, where: str | None = None,
    args_file: Path | None = None, describe: str | None = None,
) -> str:
    """Check every value, generate the script, prove it, and return it (``describe``: its first comment, what
    runs)."""
    check_parameters(parameters, where)
    if describe:
        check_text(describe, "the job's description", where)
    check_path(Path(folder).expanduser().absolute(), "the job's log folder", where)
    if args_file is not None:
        check_path(Path(args_file), "the job's arguments file", where)
    check_python_command(python, where)
    script = generated_script(parameters, folder, python, map_count, args_file, describe)
    prove_script(script, parameters, folder, python, map_count, where, args_file, describe)
    return script


"""The ``hpc-runner`` command line: one module per command, each thin over the Python API.

Only the standard library is imported here and by the command modules at import time, so
``hpc-runner --help`` stays fast and never imports torch or monai.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import os
import sys
import warnings
from collections.abc import Collection, Sequence
from typing import Any

from hpc_runner import __version__
from hpc_runner.config.argv import clearly_a_typo, option_typos, split_overrides
from hpc_runner.control_chars import PrintableStream, printable
from hpc_runner.errors import UserError
from hpc_runner.process_start import start_process
from hpc_runner.records.environment import check_settings

# name -> module; each module defines HELP, add_arguments(parser), main(args) -> int,
# and ACCEPTS_OVERRIDES (unknown --id value pairs become args.override_tokens)
COMMANDS: dict[str, str] = {
    "run": "hpc_runner.cli.run",
    "config": "hpc_runner.cli.config",
    "cache": "hpc_runner.cli.cache",
    "list": "hpc_runner.cli.listing",  # not cli/list.py: it would shadow list() in this package
    "verify": "hpc_runner.cli.verify",
    "init": "hpc_runner.cli.init",
    "pack": "hpc_runner.cli.pack",
    "install": "hpc_runner.cli.install",
    "submit": "hpc_runner.cli.submit",
    "sweep": "hpc_runner.cli.sweep",
    "status": "hpc_runner.cli.status",
    "resume": "hpc_runner.cli.resume",
    "collect": "hpc_runner.cli.collect",
    "cancel": "hpc_runner.cli.cancel",
    "report": "hpc_runner.cli.report",
    "rerun": "hpc_runner.cli.rerun",
    "tune": "hpc_runner.cli.tune",
    "pipeline": "hpc_runner.cli.pipeline",
    "tracking": "hpc_runner.tracking.command",
    "cluster": "hpc_runner.cli.cluster",
    "job": "hpc_runner.cli.job",  # what a job script runs: hpc-runner job FILE
    "completion": "hpc_runner.cli.completion",
    # MONAI's bundle subcommands, same arguments as `python -m monai.bundle NAME` (hpc_runner/monai_cli/spec.py)
    "run_workflow": "hpc_runner.cli.monai_commands:run_workflow",
    "ckpt_export": "hpc_runner.cli.monai_commands:ckpt_export",
    "onnx_export": "hpc_runner.cli.monai_commands:onnx_export",
    "verify_metadata": "hpc_runner.cli.monai_commands:verify_metadata",
    "verify_net_in_out": "hpc_runner.cli.monai_commands:verify_net_in_out",
    "init_bundle": "hpc_runner.cli.monai_commands:init_bundle",
}

# `hpc-runner --help` lists the commands by task, not in one flat list of 27
COMMAND_GROUPS: dict[str, tuple[str, ...]] = {
    "run a bundle here": ("run", "config", "cache", "verify", "rerun"),
    "on a cluster": ("submit", "sweep", "tune", "pipeline", "status", "resume", "collect", "cancel", "report",
                     "cluster", "job"),
    "bundles": ("init", "list", "pack", "install"),
    "MONAI's bundle commands (as python -m monai.bundle)": ("run_workflow", "ckpt_export", "onnx_export",
                                                             "verify_metadata", "verify_net_in_out", "init_bundle"),
    "more": ("tracking", "completion"),
}


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """argparse's help with the commands grouped by task and each option under one spelling (``--dry-run``; its
    ``--dry_run`` twin is accepted, not listed)."""

    def _format_action_invocation(self, action: argparse.Action) -> str:
        kept: dict[str, str] = {}
        for option in action.option_strings:
            kept.setdefault(option.replace("_", "-"), option)
        if len(kept) < len(action.option_strings):
            action = copy.copy(action)
            action.option_strings = list(kept.values())
        return super()._format_action_invocation(action)

    def _format_action(self, action: argparse.Action) -> str:
        if not isinstance(action, argparse._SubParsersAction):
            return super()._format_action(action)
        helps = {a.dest: a.help or "" for a in action._choices_actions}
        width = max(map(len, helps)) + 2
        lines = []
        for title, names in COMMAND_GROUPS.items():
            lines.append(f"  {title}:")
            lines += [f"    {name:<{width}}{helps.get(name, '')}" for name in names]
        return "\n".join(lines) + "\n"


EPILOG = """examples:
  hpc-runner run training --bundle bundles/synthetic_seg --optimizer::lr 1e-3
  HPCR__trainer__max_epochs=5 hpc-runner run --bundle bundles/synthetic_seg
  hpc-runner config --bundle bundles/synthetic_seg --sources --network_def::channels '[8,16,32,64]'

overrides: --ID VALUE or --ID=VALUE (ids use ::, legacy # accepted), typed as YAML 1.2
(42, 1e-4, true, null, [8,16], {a: 1}; quote to keep a string); --+ID VALUE adds a new id.
environment: HPCR__a__b=VALUE overrides id a::b; ${env:NAME,default} in values is expanded.
options are spelled with - or _ alike (--dry-run, --dry_run); `hpc-runner COMMAND --help` lists a command's.
exit codes: 0 done, 1 a run failed, 2 bad input (also a folder this user may not write or read, a full or
read-only filesystem), 3 stopped by a signal after writing a checkpoint, 130 interrupted (Ctrl-C).
"""


def _load(name: str) -> Any:
    """Return the command's module, or for ``module:name`` the command object that module registers."""
    module, _, attr = COMMANDS[name].partition(":")
    loaded = importlib.import_module(module)
    return loaded.COMMANDS[attr] if attr else loaded


def build_parser(names: Collection[str] | None = None) -> tuple[argparse.ArgumentParser,
                                                                 dict[str, argparse.ArgumentParser]]:
    """Return the top-level parser and the parser of each command, or of the ``names`` only: a command that is
    run imports its own module, not all of them (less CPU at every command's and every job's start)."""
    parser = argparse.ArgumentParser(
        prog="hpc-runner",
        description="Run MONAI-format deep-learning bundles here or on SLURM clusters.",
        epilog=EPILOG,
        formatter_class=HelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"hpc-runner {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    subparsers = {}
    for name in COMMANDS if names is None else [n for n in COMMANDS if n in names]:
        module = _load(name)
        p = sub.add_parser(
            name,
            help=module.HELP,
            description=getattr(module, "DESCRIPTION", module.HELP),
            epilog=getattr(module, "EPILOG", None),
            formatter_class=HelpFormatter,
            allow_abbrev=False,
        )
        p.add_argument("--debug", action="store_true", help="show the full traceback of an error")
        module.add_arguments(p)
        subparsers[name] = p
    return parser, subparsers


def _format_warning(message, category, filename, lineno, line=None) -> str:
    return f"hpc-runner: warning: {printable(str(message))}\n"


def entry() -> None:
    """The ``hpc-runner`` and ``python -m hpc_runner`` entry point: run ``main`` and exit with its code."""
    start_process()  # hpc_runner/process_start.py: heap, deferred modules, exit, progress bars
    sys.exit(main())


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the command; return the exit code (2 for bad input)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    for stream in (sys.stdout, sys.stderr):  # an ASCII terminal (PYTHONIOENCODING=ascii) shows ü as \xfc
        if hasattr(stream, "reconfigure") and getattr(stream, "errors", "") == "strict":
            stream.reconfigure(errors="backslashreplace")
    index = next((i for i, tok in enumerate(argv) if tok in COMMANDS), None)
    refusal = _not_utf8(argv)
    if refusal is not None:
        print(f"hpc-runner{' ' + argv[index] if index is not None else ''}: error: {refusal}", file=sys.stderr)
        return 2
    if index is None:
        parser, _ = build_parser()
        args = parser.parse_args(argv)
        parser.print_help()
        return 0 if not argv else 2
    name = argv[index]
    # the command's own parser, and the one of the command queueing the same work (a typo of its options is named)
    parser, subparsers = build_parser({name, *([QUEUED_BY[name]] if name in QUEUED_BY else [])})
    module = _load(name)
    rest = argv[index + 1 :]
    overrides: list[str] = []
    if getattr(module, "ACCEPTS_OVERRIDES", False):
        try:
            rest, overrides = split_overrides(subparsers[name], rest)
        except UserError as exc:
            print(f"hpc-runner {name}: error: {exc.paragraph()}", file=sys.stderr)
            return exc.exit_code
    typo = mistyped_option(subparsers[name], name, overrides, subparsers)
    if typo is not None:  # before the profile, the controller or the config is read: wherever it sits on the line
        print(f"hpc-runner {name}: error: {typo.paragraph()}", file=sys.stderr)
        return typo.exit_code
    if "--torch-profile" in subparsers[name]._option_string_actions:
        # deferred: cli.common loads the engine and data layers, which --help and the light commands never need
        from hpc_runner.cli.common import cluster_profile_mixup

        mixup = cluster_profile_mixup(subparsers[name], rest)
        if mixup is not None:
            print(f"hpc-runner {name}: error: {mixup.paragraph()}", file=sys.stderr)
            return mixup.exit_code
    args = parser.parse_args([*argv[: index + 1], *rest])
    args.override_tokens = overrides
    args.option_typos = option_typos(subparsers[name], overrides)
    args._argv = argv  # run --safe starts the same command again inside its sandbox (not an option)
    warnings.formatwarning = _format_warning
    # every line the command prints passes the control-character filter, whichever print writes it: text from a
    # record, a log, a bundle or a scheduler never reaches the terminal as an escape sequence
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = PrintableStream(streams[0]), PrintableStream(streams[1], keep_cr=True)
    try:
        return _run(name, module, args)
    finally:
        sys.stdout, sys.stderr = streams


def _not_utf8(argv: Sequence[str]) -> str | None:
    """The one paragraph refusing the first argument that is not UTF-8 text, or None when all are.

    Python holds an argument's bytes that are not UTF-8 as lone surrogates (``\\udcff``); such a string cannot be
    written to a file, a log, a record or a scheduler's script, nor printed on a strict stream, so it is refused
    here, before any command sees it, rather than wherever each command would first write it."""
    for position, token in enumerate(argv, 1):
        try:
            token.encode("utf-8")
        except UnicodeEncodeError as exc:
            raw = _as_bytes(token)
            shown = repr(raw[:80])[1:] + ("..." if len(raw) > 80 else "")
            return (f"argument {position} ({shown}) is not UTF-8 text (byte {exc.start} of it). Expected options, "
                    "values, names and paths as UTF-8 text (rename a file whose name is in another encoding).")
    return None


def _as_bytes(token: str) -> bytes:
    """The bytes an argument stands for: a command line's bytes that are not UTF-8 come back as Python made them
    lone surrogates (``surrogateescape``); a caller of ``main`` may pass any other lone surrogate, shown as its own
    (invalid) UTF-8 form."""
    try:
        return token.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return token.encode("utf-8", "surrogatepass")


# a command whose user may reach for an option of the command that queues the same work on a cluster
# (``run ... --clsuter local``: --cluster is submit's; run runs here)
QUEUED_BY = {"run": "submit"}


def mistyped_option(parser: argparse.ArgumentParser, name: str, overrides: list[str],
                    commands: dict[str, argparse.ArgumentParser] | None = None) -> UserError | None:
    """Return the error for the first override key that is a near-miss of the command's own option (``--dryrun``,
    ``--clsuter jade``), else of an option only the command that queues the same work has (``QUEUED_BY``: run's
    ``submit``, among ``commands``), None without one: refused before anything is read, so the mistake is named
    first."""
    for key, option in option_typos(parser, overrides).items():
        if not clearly_a_typo(key, option):
            continue  # --tracking_uri is MONAI's id, not a typo of --tracking: the config decides, once it is read
        return UserError(
            f"--{key} is not an option of hpc-runner {name} (did you mean {option}?); nothing was run or queued",
            id_path=None, expected=f"{option}, or --+{key} VALUE to set a config id of that name",
        )
    other = QUEUED_BY.get(name)
    queued_by = (commands or {}).get(other or "")
    if queued_by is None:
        return None
    for key, option in option_typos(queued_by, overrides).items():
        # a near-miss only: an option of submit spelled right (--hold, --shards) may be an id of the bundle
        if option in parser._option_string_actions or f"--{key}" in queued_by._option_string_actions \
                or not clearly_a_typo(key, option):
            continue
        return UserError(
            f"--{key} is not an option of hpc-runner {name} (did you mean {option}? it is an option of hpc-runner "
            f"{other}, which queues the run on a cluster; {name} runs here); nothing was run or queued",
            id_path=None, expected=f"hpc-runner {other} ... {option} to queue it, or --+{key} VALUE to set a config "
            "id of that name",
        )
    return None


def _run(name: str, module: Any, args: argparse.Namespace) -> int:
    """Run the command's ``main``: its exit code, or the one its error stands for (printed as one paragraph)."""
    try:
        check_settings()  # a misspelt HPCR_* setting (HPCR_LOCK=flock) is refused before the command writes anything
        return int(module.main(args) or 0)
    except UserError as exc:
        if getattr(args, "debug", False):
            import traceback

            traceback.print_exc()
        print(f"hpc-runner {name}: error: {printable(exc.paragraph())}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"hpc-runner {name}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `hpc-runner config | head`: the reader has what it wanted; no traceback
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush does not fail again
        return 141  # as a shell reports a process ended by SIGPIPE
    except OSError as exc:
        paragraph = filesystem_refusal(exc)
        if paragraph is None:
            raise
        if getattr(args, "debug", False):
            import traceback

            traceback.print_exc()
        print(f"hpc-runner {name}: error: {printable(paragraph)}", file=sys.stderr)
        return 2


def _shown_path(name: object) -> str:
    """A path as an error names it: each folder or file name of over 64 characters by its start and its length
    (``/runs/xxxxxxxx...(300 characters)/b``), so a name of 100,000 characters is a readable line."""
    text = os.fsdecode(name) if isinstance(name, (bytes, os.PathLike)) else str(name)
    parts = [p if len(p) <= 64 else f"{p[:32]}...({len(p)} characters)" for p in text.split("/")]
    shown = "/".join(parts)
    return shown if len(shown) <= 1000 else f"{shown[:600]}...({len(text)} characters in all)"


def filesystem_refusal(exc: OSError) -> str | None:
    """Return the one paragraph (exit 2, bad input) for an OSError that is the filesystem saying no: full, over
    quota, read-only, or not this user's to write or read (PermissionError); a path the filesystem cannot take (a
    name over 255 bytes, a path over PATH_MAX, a loop of symbolic links); None for any other OSError.

    Every command's OSError passes here (``_run``), so a path given on the command line, in a config or in a
    record that is too long or loops is one paragraph naming it, whichever call of whichever command met it."""
    import errno

    where = f"{_shown_path(exc.filename)}: " if exc.filename else ""
    if exc.errno == errno.ENAMETOOLONG:
        return (f"{where}the path is too long for the filesystem ({exc.strerror}). Expected a path whose every "
                "folder or file name is at most 255 bytes (and the whole path at most 4096).")
    if exc.errno == errno.ELOOP:
        return (f"{where}the path cannot be followed: its symbolic links loop ({exc.strerror}). Expected a path "
                "to an existing file or folder, or one whose links end somewhere.")
    if exc.errno in (errno.EACCES, errno.EPERM):
        folder = os.path.dirname(str(exc.filename or ""))
        if exc.filename and not os.path.lexists(exc.filename) and os.path.isdir(folder):
            where = f"{_shown_path(folder)}: "  # a file or folder that could not be made there (an atomic write's temp)
        return (f"{where}this user may not write or read there ({exc.strerror}). Expected a folder this user may "
                "read and write (`collect --out DIR` writes the tables elsewhere).")
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
        return (f"{where}the filesystem refused a write ({exc.strerror}). Expected a folder on a filesystem with "
                "free space that this user may write.")
    return None

"""Command-line options shared by submit, sweep and resume (argparse only: no heavy imports)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from hpc_runner.cli.common import apply_profile_stage
from hpc_runner.errors import UserError
from hpc_runner.records.numbers import INT64_MAX
from hpc_runner.scheduler.profiles import load_profile, parse_setting_overrides
from hpc_runner.scheduler.select import executor_for

DEFAULT_CLUSTER = "slurm"


class SchedulerOptionAction(argparse._AppendAction):
    """``--scheduler-option KEY=VALUE`` (append), whose help ends with every scheduler's keys, made from each
    backend's settings dataclass (scheduler/select.py ``scheduler_option_help``) when the help is shown: building
    the parser imports no scheduler."""

    @property  # type: ignore[override]
    def help(self) -> str:
        # looked up when the help is shown (the backends' settings, one line each), not when the parser is built
        from hpc_runner.scheduler.select import scheduler_option_help

        return f"{self._help}. {scheduler_option_help()}".replace("%", "%%")

    @help.setter
    def help(self, value: str | None) -> None:
        self._help = value or ""


def shipped_profiles() -> list[str]:
    """The names of the profiles shipped with hpc-runner (the ``profiles`` folder of its scheduler package, read
    from disk: the help lists each one, and no package is imported)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("hpc_runner.scheduler")
    folders = [Path(p) / "profiles" for p in (spec.submodule_search_locations or [])] if spec else []
    return sorted({f.stem for folder in folders for f in [*folder.glob("*.yaml"), *folder.glob("*.yml")]})


def add_cluster_arguments(parser: argparse.ArgumentParser, *, default_from_env: bool = True) -> Any:
    """Add --cluster, --scheduler-option KEY=VALUE (alias --slurm), --hold and --dry-run; return their group."""
    g = parser.add_argument_group("cluster")
    # None when neither --cluster nor $HPCR_CLUSTER names one: load_profile_from_args then checks that the
    # default profile can submit from here before anything is loaded (issue 34: no cluster, no wait)
    default = (os.environ.get("HPCR_CLUSTER") or None) if default_from_env else None
    g.add_argument(
        "--cluster",
        metavar="PROFILE",
        default=default,
        help=f"cluster profile: a name ({', '.join(shipped_profiles())}; yours in ~/.config/hpc-runner/clusters) "
        "or a .yaml "
        "file" + (f"; default $HPCR_CLUSTER, else {DEFAULT_CLUSTER} when it answers (local: jobs run here)"
                  if default_from_env else ""),
    )
    g.add_argument(
        "--dry-run",
        "--dry_run",
        dest="dry_run",
        action="store_true",
        help="print the job script (and how to print the resolved config); submit nothing, write nothing",
    )
    g.add_argument(
        "--scheduler-option",
        "--slurm",  # the earlier name, kept as an alias
        dest="slurm",  # (every command reads args.slurm)
        action=SchedulerOptionAction,
        metavar="KEY=VALUE",
        help="change one profile setting for this submission, in the scheduler's own words, e.g. "
             "--scheduler-option partition=gpu --scheduler-option time=02:00:00 (--slurm is the same option)",
    )
    g.add_argument("--hold", action="store_true", help="submit held: the jobs wait in the queue until you release them "
                   "(scontrol release, qrls)")
    return g


def add_json_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--json``: print what was submitted as one JSON object (the folder, job ids, arrays), for scripts."""
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object (dir, job ids per point, arrays, waiting points) instead of prose")


def load_profile_from_args(args: argparse.Namespace, name: str | None = None) -> Any:
    """Return the ClusterProfile that --cluster and --slurm describe. With neither --cluster nor $HPCR_CLUSTER,
    the default profile, once its scheduler answers from here (within 2 s; a dry run does not ask): else a
    UserError naming --cluster local, before any config is read or anything queued."""
    chosen = name or args.cluster
    profile = load_profile(chosen or DEFAULT_CLUSTER, parse_setting_overrides(args.slurm))
    if chosen is None and not getattr(args, "dry_run", False):
        problem = executor_for(profile).unreachable(2.0)
        if problem:
            raise UserError(
                f"no --cluster was given and the default profile '{DEFAULT_CLUSTER}' cannot submit from this "
                f"machine: {problem}; nothing was run or queued",
                expected="--cluster local to run the jobs here, one after another, or --cluster NAME for your "
                "cluster's profile ($HPCR_CLUSTER=NAME makes it the default)")

    apply_profile_stage(profile)  # stage: in the profile -> HPCR_STAGE for its jobs (restored by stage_request)
    return profile


def _whole_number_at_least(minimum: int, what: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} must be {what}")
        if value > INT64_MAX:  # sweep.yaml records it, and refuses a count past 64 bits when read back
            raise argparse.ArgumentTypeError(f"{text} must be at most {INT64_MAX}")
        return value

    return parse


positive_int = _whole_number_at_least(1, "at least 1")  # argparse type: a whole number above zero
nonnegative_int = _whole_number_at_least(0, "0 or more")  # argparse type: a whole number >= 0

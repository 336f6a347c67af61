"""Command-line options shared by submit, sweep and resume (argparse only: no heavy imports)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

DEFAULT_CLUSTER = "slurm"


def add_cluster_arguments(parser: argparse.ArgumentParser, *, default_from_env: bool = True) -> None:
    """Add --cluster, --slurm KEY=VALUE, --hold and --dry-run."""
    g = parser.add_argument_group("cluster")
    default = os.environ.get("HPCR_CLUSTER", DEFAULT_CLUSTER) if default_from_env else None
    g.add_argument(
        "--cluster",
        metavar="PROFILE",
        default=default,
        help="cluster profile: a name (built in: jade, slurm, local; more in ~/.config/hpc-runner/clusters or "
        "$HPCR_CLUSTER_PATH) or a .yaml file" + (f" (default: $HPCR_CLUSTER or {DEFAULT_CLUSTER})" if default else ""),
    )
    g.add_argument(
        "--slurm",
        action="append",
        metavar="KEY=VALUE",
        help="change one profile setting for this submission, e.g. --slurm partition=gpu --slurm time=02:00:00",
    )
    g.add_argument("--hold", action="store_true", help="submit held (sbatch --hold); release with scontrol release")
    g.add_argument(
        "--dry-run",
        "--dry_run",
        dest="dry_run",
        action="store_true",
        help="print the sbatch script and the resolved config; submit nothing, write nothing",
    )


def load_profile_from_args(args: argparse.Namespace, name: str | None = None) -> Any:
    """Return the ClusterProfile that --cluster and --slurm describe."""
    from hpc_runner.scheduler.profiles import load_profile, parse_setting_overrides

    return load_profile(name or args.cluster, parse_setting_overrides(args.slurm))


def _whole_number_at_least(minimum: int, what: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} must be {what}")
        return value

    return parse


positive_int = _whole_number_at_least(1, "at least 1")  # argparse type: a whole number above zero
nonnegative_int = _whole_number_at_least(0, "0 or more")  # argparse type: a whole number >= 0

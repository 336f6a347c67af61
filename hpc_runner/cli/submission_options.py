"""The options of the commands that queue jobs (submit, sweep, tune), built once in one order of named groups.

Each command adds its own group first (what it submits: ``--sweep``, ``--space``), then the groups every one of
them shares: where it goes (``--cluster``, ``--dry-run``), the bundle, the job's resources, the checks, the
sandbox, the container, profiling and data staging. ``sweep --help`` thus shows ``--sweep``, ``--cluster`` and
``--dry-run`` on its first screen, and each option is explained once, in its group.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from hpc_runner.cli.common import (
    add_bundle_arguments,
    add_preflight_argument,
    add_profile_arguments,
    add_stage_arguments,
    add_writable_argument,
)
from hpc_runner.cli.container_run import add_container_arguments
from hpc_runner.cli.cpus_option import add_cpus_argument
from hpc_runner.cli.slurm_options import add_cluster_arguments, add_json_argument

Adder = Callable[[argparse.ArgumentParser], None]
GENERAL = "general"  # the title of argparse's own group (-h, --debug): every option sits in a named group


def add_submission_arguments(parser: argparse.ArgumentParser, *, own: Adder | None = None,
                             after_cluster: Adder | None = None, container: bool = True,
                             usage: str | None = None) -> None:
    """Add the shared groups of submit, sweep and tune around the command's ``own`` group (first) and
    ``after_cluster`` (its groups that follow where the jobs go); ``usage`` replaces argparse's list of every
    option (a screen of its own for sweep) with the shape of the command."""
    parser._optionals.title = GENERAL
    if usage:
        parser.usage = usage
    if own is not None:
        own(parser)
    cluster = add_cluster_arguments(parser)
    add_json_argument(cluster)
    if after_cluster is not None:
        after_cluster(parser)
    add_bundle_arguments(parser)
    resources = parser.add_argument_group("job resources")
    add_cpus_argument(resources, submits=True)
    checks = parser.add_argument_group("checks before queueing")
    add_preflight_argument(checks)
    if container:
        sandbox = parser.add_argument_group("sandbox (--safe, docs/security.md)")
        add_writable_argument(sandbox)
        add_container_arguments(parser)
    profiling = parser.add_argument_group("profiling")
    add_profile_arguments(profiling)
    add_stage_arguments(parser)

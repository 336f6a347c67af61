"""``hpc-runner cancel``: cancel the queued and running jobs of a sweep or of a submitted run."""

from __future__ import annotations

import argparse

from hpc_runner.cli.targets import open_target

HELP = "cancel the queued and running jobs of a sweep (or of one submitted run)"
DESCRIPTION = """Cancel every job of a sweep dir (or of one run dir) that is still queued or running,
with one scancel call. Completed points keep their results; `hpc-runner resume DIR` later
resubmits the cancelled ones."""
EPILOG = """examples:
  hpc-runner cancel runs/synthetic_seg/sweep-2026-11-21_10-00-00"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the cancel options."""
    parser.add_argument("dir", metavar="DIR", help="a sweep dir (or a run dir)")


def main(args: argparse.Namespace) -> int:
    """Run the command."""
    return open_target(args.dir).cancel(args)  # a pipeline dir: every stage still queued or running

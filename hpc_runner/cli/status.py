"""``hpc-runner status``: where every point of a sweep (or one submitted run) stands, from one sacct call."""

from __future__ import annotations

import argparse

from hpc_runner.cli.targets import open_target

HELP = "show the state of a sweep's points or of a submitted run (one sacct call)"
DESCRIPTION = """Show the state of every job of a sweep dir (or of one run dir) with one `sacct` call
(`squeue` when sacct does not answer), the counts per state and per cause, and one line per failed
point: its cause (OUT_OF_MEMORY, TIMEOUT, PREEMPTED, NODE_FAIL, CANCELLED, ERROR, BAD_INPUT), job id
and error (type, message, config id, file:line; from its run.yaml, error.txt or the job's log).
Points WAITING for a free submit slot count as not finished (--wait waits for them), and are
submitted when a slot is free: the sweep's one top-up step, which --watch and resume take too. That
is the only thing status ever writes (no lock is taken when nothing waits); --no-submit makes it
strictly read-only. A tune's trials are listed from the start: PENDING until a worker claims them.
Works from the directory alone."""
EPILOG = """examples:
  hpc-runner status runs/synthetic_seg/sweep-2026-11-21_10-00-00
  hpc-runner status runs/synthetic_seg/sweep-2026-11-21_10-00-00 --all
  hpc-runner status runs/synthetic_seg/2026-11-21_10-00-00 --wait
exit codes: 0 (with --wait: every point completed), 1 some point failed (--wait), 2 not a sweep/run dir,
130 interrupted (Ctrl-C)"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the status options."""
    parser.add_argument("dir", metavar="DIR",
                        help="a sweep dir (sweep.yaml), a run dir (run.yaml) or a pipeline dir (pipeline.yaml)")
    parser.add_argument("--all", action="store_true", help="list every point (default: only up to 40)")
    parser.add_argument("--json", action="store_true", help="print the states as JSON lines")
    parser.add_argument("--wait", action="store_true", help="poll until no point is queued or running")
    parser.add_argument("--interval", type=float, default=10.0, metavar="S", help="seconds between polls (--wait)")
    parser.add_argument("--timeout", type=float, default=None, metavar="S", help="give up waiting after S seconds")
    parser.add_argument(
        "--no-submit", "--no_submit", dest="no_submit", action="store_true",
        help="read only: do not submit the points that wait for a free submit slot",
    )
    parser.add_argument(
        "--watch", action="store_true",
        help="redraw the table and a progress bar every --interval s until every point is final (Ctrl-C stops)",
    )


def main(args: argparse.Namespace) -> int:
    """Run the command."""
    return open_target(args.dir).status(args)  # a pipeline dir: its stages (cli/pipeline.py); else show_points



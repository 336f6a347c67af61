"""``hpc-runner resume``: resubmit only the failed and missing points of a sweep (or a failed run)."""

from __future__ import annotations

import argparse

from hpc_runner.cli.common import add_preflight_argument, add_writable_argument, named_readable_grants
from hpc_runner.cli.slurm_options import add_cluster_arguments, nonnegative_int, positive_int
from hpc_runner.cli.sweep import add_right_size_arguments
from hpc_runner.cli.targets import open_target
from hpc_runner.engine.sandbox import Grants, checked_grant, granted_on_command_line

HELP = "resubmit the failed or missing points of a sweep as a new array (never a completed one)"
DESCRIPTION = """Ask the scheduler once where every point stands, then resubmit the points that failed,
timed out, were cancelled or never got submitted, as new job arrays. Completed points and points
still queued or running are never submitted again. A point resubmitted unchanged continues in its
run dir (from its newest checkpoint). Overrides given here (e.g. --batch_size 1) fix the
resubmitted points: they are checked first, recorded in sweep.yaml as the point's `extra`, and the
old run dir of each such point is moved to attempts/ so the new config starts clean.
The cluster profile recorded at submission is used unless --cluster is given; --slurm changes it.
--cause TIMEOUT (repeatable) resubmits only the failed points with that cause (`hpc-runner status`
shows each point's cause), e.g. with a longer time limit: --cause TIMEOUT --slurm time=04:00:00.
--retry CAUSE:CHANGE records a rule for the sweep's later failures (see `hpc-runner sweep --help`);
--right-size DIR asks for what the finished sweep DIR used. What --slurm, --cluster or --right-size set
here replaces the points' own requests (from earlier --retry changes).
A sweep or run submitted with --safe goes on with the --writable/--readable folders of its submission, when
its record (sweep.yaml, run.yaml) and its folder are your own and writable by you alone; a received record
grants nothing: name the folders again here (--writable DIR, --readable DIR), which then replace the
recorded ones (docs/security.md)."""
EPILOG = """examples:
  hpc-runner resume runs/synthetic_seg/sweep-2026-11-21_10-00-00
  hpc-runner resume runs/synthetic_seg/sweep-2026-11-21_10-00-00 --slurm time=04:00:00
  hpc-runner resume runs/synthetic_seg/sweep-2026-11-21_10-00-00 --cause TIMEOUT --slurm time=04:00:00
  hpc-runner resume runs/synthetic_seg/sweep-2026-11-21_10-00-00 --points 3,7 --batch_size 1"""
ACCEPTS_OVERRIDES = True
# hpc_runner.jobs.causes.CAUSES, spelled out: a command module imports only the standard library
CAUSES = ("OUT_OF_MEMORY", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "CANCELLED", "ERROR", "BAD_INPUT", "RETURNED")


MAX_LISTED = 1_000_000  # point numbers one --points may name (a sweep has at most this many)


def _indices(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        a, _, b = part.strip().partition("-")
        try:
            first, last = int(a), int(b) if b else int(a)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a list of point numbers like 3,7,10-12") from None
        if last - first + 1 + len(out) > MAX_LISTED:  # counted before the list is made
            raise argparse.ArgumentTypeError(f"{part.strip()!r} names more than {MAX_LISTED:,} points")
        out += range(first, last + 1)
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the resume options."""
    parser.add_argument("dir", metavar="DIR", help="a sweep dir (or a run dir submitted with hpc-runner submit)")
    parser.add_argument("--points", type=_indices, metavar="LIST", help="only these failed points, e.g. 3,7,10-12")
    parser.add_argument(
        "--cause",
        action="append",
        choices=CAUSES,
        metavar="CAUSE",
        help=f"only the failed points with this cause (repeatable): {', '.join(CAUSES)}",
    )
    parser.add_argument(
        "--array-parallelism",
        "--array_parallelism",
        dest="array_parallelism",
        type=positive_int,
        metavar="K",
        help="run at most K tasks of each array at once",
    )
    parser.add_argument("--max-retries", "--max_retries", dest="max_retries", type=nonnegative_int, metavar="N",
                        help="raise (or lower) the sweep's bound on resubmissions of one failed point (default 3)")
    parser.add_argument("--max-submit-calls", "--max_submit_calls", dest="max_submit_calls", type=positive_int,
                        metavar="N", help="set the sweep's (or tune's) budget of submit calls in all, refused and "
                        "failed ones included (default: its points x (1 + max_returns + max_retries)); a sweep that "
                        "spent it submits nothing more, and `status` says so")
    add_right_size_arguments(parser)
    add_writable_argument(parser)  # the --safe jobs' grants, instead of the recorded ones
    add_cluster_arguments(parser, default_from_env=False)
    add_preflight_argument(parser)


def main(args: argparse.Namespace) -> int:
    """Run the command."""
    given = None  # the --safe jobs submitted again get these instead of their records' (checked as on submit)
    if getattr(args, "writable", None) or getattr(args, "readable", None):
        given = Grants(tuple(checked_grant(p, "--writable") for p in args.writable or []),
                       tuple(named_readable_grants(args)))
    with granted_on_command_line(given):
        return _resume(args, open_target)


def _resume(args: argparse.Namespace, open_target) -> int:
    # a pipeline dir: its stages that failed or never ran (cli/pipeline.py); a tune dir: its workers; a run dir:
    # the run; a sweep dir: its failed and missing points (the functions below)
    return open_target(args.dir).resume(args)



"""``hpc-runner collect``: one table of a sweep's results (results.csv and results.md)."""

from __future__ import annotations

import argparse

from hpc_runner.cli.targets import open_target

HELP = "write results.csv and results.md: one row per point (params, state, cause, metrics, time, job id)"
DESCRIPTION = """Collect every point of a sweep dir (or one run dir) into results.csv and results.md
(a Markdown table): the swept parameters, the state and, for failed points, the cause (one sacct
call; see `hpc-runner status`), the final metrics from the point's summary.json, wall time, job id,
how many times its job was requeued and, for failed points, the error line; and what each point's
job used (elapsed_s of time_limit_s, cpus and cpu_efficiency, max_rss_mb of mem_request_mb, gpu_util,
gpu_mem_mb: from the same sacct call). At the end of a sweep it prints what the next submission should
ask for (`sweep --right-size DIR` applies it).
For `submit --shards` (inference, evaluation) it also merges the shards' per-case tables into
cases.csv and cases.md, names every shard without one, and prints the mean of each metric."""
EPILOG = """examples:
  hpc-runner collect runs/synthetic_seg/sweep-2026-11-21_10-00-00
  hpc-runner collect runs/synthetic_seg/sweep-2026-11-21_10-00-00 --out reports/ --quiet"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the collect options."""
    parser.add_argument("dir", metavar="DIR", help="a sweep dir (or a run dir)")
    parser.add_argument("--out", metavar="DIR", help="where to write the tables (default: DIR)")
    parser.add_argument("--quiet", action="store_true", help="do not print the table")


def main(args: argparse.Namespace) -> int:
    """Run the command."""
    return open_target(args.dir).collect(args)  # a pipeline dir: its chain (cli/pipeline.py); else collect_points



"""``hpc-runner report``: PNG plots and one self-contained report.html for a run dir or a sweep dir."""

from __future__ import annotations

import argparse

from hpc_runner.cli.targets import open_target
from hpc_runner.report.build import not_a_report_dir

HELP = "plot a run or a sweep (PNGs) and write one self-contained report.html into its dir"
DESCRIPTION = """Write PNG plots into DIR/plots/ and one self-contained page DIR/report.html (plots
embedded, no external assets), for a run dir or a sweep dir.

run dir:   first the loss and metric curves, the key hyper-parameters (with where config.yaml
           sets them) and the summary; then image, label and prediction on a slice of the latest
           validation; then where the time went (data wait against compute, titled with the
           bottleneck verdict, and each transform's time); overrides, package versions, git state, files.
sweep dir: every point's loss curve overlaid; the final metric against each swept id; a heatmap
           when two ids are swept; how many points are in each state and, of the failed ones,
           have each cause (one sacct call, as `hpc-runner status`); each point's time split;
           the results table of `hpc-runner collect` (sortable by clicking a header), each
           point's overrides and a link to its run dir.
Works while a sweep is still running: it shows what is there."""
EPILOG = """examples:
  hpc-runner report runs/synthetic_seg/2026-11-21_10-00-00
  hpc-runner report runs/synthetic_seg/sweep-2026-11-21_10-00-00 --runs
then open DIR/report.html in a browser (DIR/report.html#sort=-val_dice opens it sorted by val_dice)"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the report options."""
    parser.add_argument("dir", metavar="DIR", help="a run dir (with run.yaml) or a sweep dir (with sweep.yaml)")
    parser.add_argument(
        "--runs", action="store_true", help="sweep: also write each point's own plots and report.html (linked)"
    )


def main(args: argparse.Namespace) -> int:
    """Run the command."""
    # a pipeline dir: its chain, the stages' reports linked (cli/pipeline.py); a dir that is none of these
    # is named as report always named it
    return open_target(args.dir, unknown=not_a_report_dir).report(args)

"""``python -m hpc_runner.tracking send RUN_DIR``: send what MLflow could not take during the run.

Written as an hpc-runner command module (HELP, add_arguments, main), so ``hpc-runner tracking send`` is one
line in the COMMANDS table. Imports only the standard library at the top.
"""

from __future__ import annotations

import argparse

from hpc_runner.tracking.mlflow_run import send_unsent
from hpc_runner.tracking.settings import check_mlflow

HELP = "send a run's MLflow records that could not be sent during the run (mlflow-unsent.jsonl)"
ACCEPTS_OVERRIDES = False


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the tracking sub-commands."""
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    send = sub.add_parser("send", help="send RUN_DIR/mlflow-unsent.jsonl to the run's MLflow run now")
    send.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")


def main(args: argparse.Namespace) -> int:
    """Run the command."""
    check_mlflow()
    status = 0
    for run_dir in args.run_dirs:
        sent, left = send_unsent(run_dir)
        print(f"hpc-runner: {run_dir}: sent {sent} record(s)" + (f", {left} still unsent" if left else ""))
        status = status or (1 if left else 0)
    return status

"""``hpc-runner run``: run a bundle entry on this machine, in a recorded run directory."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from hpc_runner.cli.common import add_bundle_arguments, load_config_from_args

HELP = "run a bundle entry here (initialize, ENTRY, finalize) in a recorded run dir"
DESCRIPTION = """Run a bundle entry on this machine.

With no ENTRY the ids `initialize`, `run` and `finalize` run in order (`finalize` always).
`run training` runs the `training` id instead of `run` (MONAI's legacy convention).
Everything is recorded in the run dir (--output_dir, default runs/<bundle>/<timestamp>).
SIGUSR2/SIGTERM make the trainer checkpoint at the end of its step and stop; under SLURM the
job is then requeued and continues from that checkpoint."""
EPILOG = """examples:
  hpc-runner run training --bundle bundles/synthetic_seg
  hpc-runner run --bundle bundles/synthetic_seg --trainer::max_epochs 2 --output_dir runs/try
  hpc-runner run --resume runs/synthetic_seg/2026-11-21_10-00-00
exit codes: 0 done, 1 the run failed (see error.txt), 2 bad input, 3 stopped by a signal (checkpointed)"""
ACCEPTS_OVERRIDES = True
EXIT_FAILED, EXIT_PREEMPTED = 1, 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the run options."""
    parser.add_argument("entry", nargs="?", metavar="ENTRY", help="id to run instead of `run` (e.g. training)")
    add_bundle_arguments(parser)
    parser.add_argument("--output_dir", "--output-dir", metavar="DIR", help="run dir (default runs/<bundle>/<time>)")
    parser.add_argument(
        "--resume", metavar="RUN_DIR", help="continue a recorded run from its newest checkpoint, with its config"
    )
    parser.add_argument(
        "--no-requeue", action="store_true", help="under SLURM, do not requeue the job after a stop signal"
    )


def main(args: argparse.Namespace) -> int:
    """Run the command."""
    if args.resume:
        from hpc_runner.config.overrides import parse_cli_overrides
        from hpc_runner.config.recorded import load_recorded_config

        cfg, record = load_recorded_config(args.resume, parse_cli_overrides(args.override_tokens))
        entry = args.entry or record.get("entry")
        output_dir = args.resume
    else:
        cfg = load_config_from_args(args)
        entry, output_dir = args.entry, args.output_dir

    from hpc_runner.engine.runner import prepare_run

    run_dir, expanded = prepare_run(cfg, entry, output_dir, sys.argv)
    print(f"hpc-runner: run dir {run_dir.path}", flush=True)
    return execute_and_report(cfg, run_dir, expanded, entry, "run", requeue=not args.no_requeue, debug=args.debug)


def execute_and_report(
    cfg: Any, run_dir: Any, expanded: dict, entry: str | None, command: str, *, requeue: bool, debug: bool
) -> int:
    """Execute a prepared run with stop signals handled; print how it ended and return the exit code."""
    from hpc_runner.engine.runner import describe_failure, execute_run
    from hpc_runner.engine.stop import install_stop_handlers

    restore = install_stop_handlers()
    try:
        outcome = execute_run(cfg, run_dir, expanded, entry)
    finally:
        restore()
    if outcome.status == "completed":
        print(f"hpc-runner: done; results in {run_dir.path}", flush=True)
        return 0
    if outcome.status == "preempted":
        from hpc_runner.engine.distributed import launched_world
        from hpc_runner.slurm.requeue import current_job_id, requeue_current_job

        rank = launched_world()[0]
        if rank != 0:  # rank 0 writes the checkpoint and speaks for the job
            print(f"hpc-runner: rank {rank} stopped by {outcome.error.reason}; checkpoint written by rank 0",
                  file=sys.stderr)
            return EXIT_PREEMPTED
        job = requeue_current_job() if requeue else None
        if job:
            then = f"requeued SLURM job {job}; it continues from the checkpoint"
        elif current_job_id() and requeue:
            then = (f"SLURM is ending job {current_job_id()} (cancelled or not requeueable); continue with: "
                    f"hpc-runner run --resume {run_dir.path}")
        else:
            then = f"continue with: hpc-runner run --resume {run_dir.path}"
        print(f"hpc-runner: stopped by {outcome.error.reason}; checkpoint written; {then}", file=sys.stderr)
        return EXIT_PREEMPTED
    if outcome.status == "interrupted":
        print(f"hpc-runner {command}: interrupted; run dir {run_dir.path}", file=sys.stderr)
        return 130
    print(f"hpc-runner {command}: error: {describe_failure(outcome)}", file=sys.stderr)
    if debug and outcome.error is not None:
        import traceback

        traceback.print_exception(outcome.error)
    return EXIT_FAILED

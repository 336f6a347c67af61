"""``hpc-runner run``: run a bundle entry on this machine, in a recorded run directory."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

from hpc_runner.cli.common import (
    add_bundle_arguments,
    add_preflight_argument,
    add_profile_arguments,
    add_stage_arguments,
    add_writable_argument,
    environment_setting,
    load_config_from_args,
    profile_request,
    stage_request,
    tracking_settings,
)
from hpc_runner.cli.container_run import add_container_arguments, container_for, run_in_container
from hpc_runner.cli.cpus_option import add_cpus_argument, apply_run_cpus
from hpc_runner.cli.sandbox_run import run_in_sandbox
from hpc_runner.config.monai_bridge import warn_code_once
from hpc_runner.config.overrides import parse_cli_overrides
from hpc_runner.config.preflight import check_config
from hpc_runner.config.recorded import check_recorded_bundle, load_recorded_config
from hpc_runner.config.sandbox_marks import inside_container, inside_sandbox, scheduler_outside
from hpc_runner.engine.container import check_unchanged
from hpc_runner.engine.distributed import launched_world
from hpc_runner.engine.runner import bad_input_in, describe_failure, execute_run, prepare_run
from hpc_runner.engine.sandbox import FRESH_ENV
from hpc_runner.engine.stop import install_stop_handlers
from hpc_runner.engine.trainer_args import GPU_TRANSFORMS_ENV
from hpc_runner.errors import UserError
from hpc_runner.records.rundir import CHECKPOINT_DIR, RunDir, check_folder_path, default_run_dir
from hpc_runner.records.safe_mark import read_mark
from hpc_runner.scheduler.job_env import own_job_id, requeue_exit_code, requeue_job

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
  hpc-runner run --resume runs/synthetic_seg/2026-11-21_10-00-00 --restart   # no checkpoint loads
  hpc-runner run training --bundle bundles/synthetic_seg --torch-profile   # trace + top ops in RUN_DIR/profile/
  hpc-runner run --bundle bundles/synthetic_seg --gpu_transforms   # random transforms after the copy to the GPU
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
        "--restart",
        action="store_true",
        help="with --resume: start the run over from step 0 (its checkpoints and metrics.jsonl are moved aside)",
    )
    parser.add_argument(
        "--no-requeue", action="store_true", help="under SLURM, do not requeue the job after a stop signal"
    )
    add_writable_argument(parser)
    add_container_arguments(parser)
    add_preflight_argument(parser)
    add_profile_arguments(parser)
    parser.add_argument(
        "--gpu_transforms", "--gpu-transforms", action="store_true",
        help="run the random transforms of the training data on the device, after the copy, with the seeds the "
        "loader threads would use (the same augmentation); sets HPCR_GPU_TRANSFORMS, recorded in run.yaml; "
        "the Trainer's gpu_transforms, when the bundle sets it, decides instead",
    )
    add_cpus_argument(parser, submits=False)
    add_stage_arguments(parser)


def main(args: argparse.Namespace) -> int:
    """Run the command, with SIGUSR2/SIGTERM turned into stop requests from the first moment.

    SLURM's `--signal` can arrive while python still imports torch and loads the config (a short time
    limit, a requeue); USR2's default action would kill the job without a checkpoint or a requeue. Taken
    as a stop request instead, the trainer checkpoints after its first step and the job is requeued.
    """
    if args.resume and not args.safe and not inside_sandbox() and read_mark(args.resume) is not None:
        args.safe = True  # a run made with --safe stays in its sandbox (records/safe_mark.py)
        print("hpc-runner: this run was made with --safe: it goes on inside the sandbox", file=sys.stderr, flush=True)
    if args.resume and not args.container and not inside_container():  # a run made in an image goes on in it
        recorded, runtime = _recorded_image(args.resume)
        if recorded:
            check_unchanged(RunDir(args.resume).record()["container"], os.path.join(args.resume, "run.yaml"))
            args.container, args.container_runtime = recorded, args.container_runtime or runtime
            print(f"hpc-runner: this run was made in the container image {recorded}: it goes on inside it",
                  file=sys.stderr, flush=True)
    if args.container is not None and not inside_container():  # the image runs the bundle ('' is refused there)

        spec = container_for(args)
        if spec is not None:
            with profile_request(args), gpu_transforms_request(args), stage_request(args):
                return run_in_container(args, spec)
    if args.safe and not inside_sandbox():  # the bundle's code runs only inside the sandbox (docs/security.md)

        with profile_request(args), gpu_transforms_request(args), stage_request(args):
            return run_in_sandbox(args)
    if (args.writable or args.readable) and not args.safe:
        raise UserError("--writable and --readable name what the --safe sandbox may write and read; without --safe "
                        "every folder is", expected="--safe --writable DIR, or neither")
    restore = install_stop_handlers()
    try:
        with profile_request(args), gpu_transforms_request(args), stage_request(args):
            return _run(args)
    finally:
        restore()


@contextlib.contextmanager
def gpu_transforms_request(args: argparse.Namespace) -> Iterator[None]:
    """Set HPCR_GPU_TRANSFORMS=1 for the duration when --gpu_transforms was given; restore it after."""
    if not getattr(args, "gpu_transforms", False):
        yield
        return

    with environment_setting(GPU_TRANSFORMS_ENV, "1"):
        yield


def _recorded_image(run_dir: str) -> tuple[str | None, str | None]:
    """The container image and runtime a run dir's record names (None without one, or without a record)."""
    try:
        found = RunDir(run_dir).record().get("container")
    except Exception:  # a damaged record is reported, naming it, where the resume reads it
        return None, None
    if not isinstance(found, dict) or not isinstance(found.get("image"), str):
        return None, None
    return found["image"], found.get("runtime") if isinstance(found.get("runtime"), str) else None


def _run(args: argparse.Namespace) -> int:
    """Load, check and run; the order keeps refused input from changing anything.

    Load the config; on --resume check the recorded bundle (MANIFEST, --safe) before anything imports
    its code; pre-flight the config; only then touch the run dir (check or set aside its checkpoints on
    --resume, make it otherwise).
    """
    apply_run_cpus(args)
    if args.resume:
        cfg, record = load_recorded_config(args.resume, parse_cli_overrides(args.override_tokens))
        entry = args.entry or record.get("entry")
        output_dir = args.resume
        check_recorded_bundle(cfg, record, trust=args.trust, safe=args.safe)

        cfg.tracking = tracking_settings(args)  # --resume DIR --tracking mlflow: track from here on
    else:
        if args.restart:
            raise UserError("--restart starts a recorded run over", expected="--resume RUN_DIR --restart")
        cfg = load_config_from_args(args)
        entry, output_dir = args.entry, args.output_dir
        if output_dir:  # a file in the way is bad input: refuse it before the seconds of importing torch

            check_folder_path(output_dir)

    if not args.no_preflight:  # before the run dir exists: a config that cannot start leaves nothing behind

        check_config(cfg, entry=entry or "run")
    if args.resume:
        prepare_checkpoints(args.resume, restart=args.restart)

    if output_dir is None:
        output_dir = str(default_run_dir(cfg.name))
    fresh = not args.resume and not os.path.exists(output_dir)  # made by this command: removed if input is bad

    if (args.safe or inside_container()) and not args.resume:
        fresh = fresh or os.environ.get(FRESH_ENV) == "1"  # made outside the sandbox, for this run
    run_dir, expanded = prepare_run(cfg, entry, output_dir, sys.argv)
    if not args.resume:  # MONAI's warning that a config runs code: once per run started here, unless --trust

        warn_code_once(cfg, trusted=args.trust)
    print(f"hpc-runner: run dir {run_dir.path}", flush=True)
    return execute_and_report(cfg, run_dir, expanded, entry, "run", requeue=not args.no_requeue, debug=args.debug,
                              fresh=fresh)


def prepare_checkpoints(run_dir: str, *, restart: bool) -> None:
    """Refuse a resume whose checkpoints none load; with ``restart`` move them and metrics.jsonl aside."""
    from pathlib import Path

    from hpc_runner.engine.checkpoint import check_resumable, set_aside_for_restart  # deferred: imports torch
    if not restart:
        check_resumable(Path(run_dir) / CHECKPOINT_DIR)
        return

    if launched_world()[0] != 0:  # rank 0 owns the run dir; the others start from step 0 as well
        return
    aside = set_aside_for_restart(Path(run_dir))
    if aside is not None:
        print(f"hpc-runner: starting over; the old checkpoints and metrics are in {aside}", flush=True)


def execute_and_report(
    cfg: Any, run_dir: Any, expanded: dict, entry: str | None, command: str, *, requeue: bool, debug: bool,
    fresh: bool = False,
) -> int:
    """Execute a prepared run with stop signals handled; print how it ended and return the exit code.

    A run that fails on bad input before it trained anything (a UserError from a component: a refused
    checkpoint, a logging file that does not load, a Trainer argument that makes no sense) is bad input:
    exit 2 with its paragraph, and the run dir goes again when this command made it (``fresh``)."""
    restore = install_stop_handlers()
    try:
        outcome = execute_run(cfg, run_dir, expanded, entry)
    finally:
        restore()
    if outcome.status == "completed":
        print(f"hpc-runner: done; results in {run_dir.path}", flush=True)
        return 0
    if outcome.status == "preempted":
        rank = launched_world()[0]
        if rank != 0:  # rank 0 writes the checkpoint and speaks for the job
            print(f"hpc-runner: rank {rank} stopped by {outcome.error.reason}; checkpoint written by rank 0",
                  file=sys.stderr)
            return EXIT_PREEMPTED

        if requeue and own_job_id() and scheduler_outside():  # no network in the sandbox, no SLURM in an image
            print(f"hpc-runner: stopped by {outcome.error.reason}; checkpoint written; the requeue is asked from "
                  "outside", file=sys.stderr)
            return EXIT_PREEMPTED

        job = requeue_job() if requeue else None
        if job:
            then = f"requeued job {job}; it continues from the checkpoint"
        elif own_job_id() and requeue:
            then = (f"the scheduler is ending job {own_job_id()} (cancelled or not requeueable); continue with: "
                    f"hpc-runner run --resume {run_dir.path}")
        else:
            then = f"continue with: hpc-runner run --resume {run_dir.path}"
        print(f"hpc-runner: stopped by {outcome.error.reason}; checkpoint written; {then}", file=sys.stderr)
        # where the scheduler requeues a job by its exit status (Grid Engine: 99), the job ends with it
        return (requeue_exit_code() or EXIT_PREEMPTED) if job else EXIT_PREEMPTED
    if outcome.status == "pruned":  # only when a validation listener (tune) is installed in this process
        print(f"hpc-runner: {outcome.error}; results in {run_dir.path}", flush=True)
        return 0
    if outcome.status == "interrupted":
        print(f"hpc-runner {command}: interrupted; run dir {run_dir.path}", file=sys.stderr)
        return 130

    bad = bad_input_in(outcome)
    if bad is not None:
        left = _remove_if_untouched(run_dir.path) if fresh else f"; run dir {run_dir.path}"
        at = f" (while building id '{outcome.failing_id}')" if outcome.failing_id else ""
        print(f"hpc-runner {command}: error: {bad.paragraph().rstrip('.')}{at}{left}.", file=sys.stderr)
    else:
        print(f"hpc-runner {command}: error: {describe_failure(outcome)}", file=sys.stderr)
    if debug and outcome.error is not None:
        import traceback

        traceback.print_exception(outcome.error)
    return bad.exit_code if bad is not None else EXIT_FAILED


def _remove_if_untouched(path: Any) -> str:
    """Remove a run dir this command made that holds no result; say what happened to it."""
    import shutil

    if any((path / CHECKPOINT_DIR).glob("*")) or (path / "model.pt").exists():
        return f"; run dir {path} kept (it holds checkpoints)"
    shutil.rmtree(path, ignore_errors=True)
    return "; nothing was kept"

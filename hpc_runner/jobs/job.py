"""What a submitted job runs: ``run_recorded`` on its run dir (a sweep point's is written first).

These functions are named by reference (module + name) in the job's arguments, so the job's Python must be
able to import hpc_runner; they import the runner lazily so the submitting side stays light.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hpc_runner.config.overrides import point_override
from hpc_runner.config.recorded import load_recorded_config
from hpc_runner.config.sandbox_marks import inside_container, inside_sandbox
from hpc_runner.engine.runner import describe_failure, prepare_run, run_recorded
from hpc_runner.engine.sandbox_job import job_grants, run_recorded_in_container, run_recorded_in_sandbox
from hpc_runner.engine.stop import clear_stop, install_stop_handlers
from hpc_runner.jobs.ledger import BASE_DIR, JOB_FOLDERS
from hpc_runner.progress_bars import no_bars_without_a_terminal
from hpc_runner.quick_exit import freeze_at_exit
from hpc_runner.records.atomic import write_text_atomic
from hpc_runner.records.logtee import Tee
from hpc_runner.records.read import read_record_text
from hpc_runner.records.rundir import CONFIG_FILE, LOG_FILE, OVERRIDES_FILE, RunDir
from hpc_runner.resources.gpu_sampler import sampling
from hpc_runner.resources.shares import device_binding
from hpc_runner.resources.threads import use_cpu_budget
from hpc_runner.scheduler.executor import LOCAL_JOB_ID, job_entry
from hpc_runner.scheduler.job_env import log_files, own_job_id, requeue_job


class RunFailed(RuntimeError):
    """The run ended without completing; the message says why and where the traceback is."""


def run_keeping_overrides(run_dir: Path, entry: str | None, job_record: dict[str, Any] | None = None) -> Any:
    """run_recorded, then put back overrides.yaml: prepare_run rewrites it from the reloaded config.yaml,
    which knows no overrides (only output_dir/bundle_root), so the submitted overrides would be lost.
    Whether it runs in the --safe sandbox, and what it may write there, is the job's own submission
    (``job_record["sandbox"]``, engine/sandbox_job.py ``job_grants``), never a file of the run dir."""
    path = Path(run_dir) / OVERRIDES_FILE
    before = read_record_text(path, "overrides") if path.is_file() and not path.is_symlink() else None
    grants = None if inside_sandbox() else job_grants(job_record, run_dir)
    try:
        with sampling(run_dir):  # GPU use at a low rate, when nvidia-ml-py and a GPU are there (else nothing)
            record = RunDir(run_dir).record()
            if grants is not None:  # submitted with --safe: the bundle's code runs only inside
                inside = functools.partial(run_recorded_in_sandbox, run_dir, entry, grants, protect=JOB_FOLDERS)
            elif record.get("container") and not inside_container():  # the image runs the bundle; SLURM stays here
                inside = functools.partial(run_recorded_in_container, run_dir, entry, record)
            else:
                return run_recorded(run_dir, entry)
            restore = install_stop_handlers()  # a stop request here is passed on to the run inside
            try:
                return inside()
            finally:
                restore()
    finally:
        if before is not None and _text_or_none(path) != before:  # the run dir is the run's: never follow a link
            write_text_atomic(path, before)


def _text_or_none(path: Path) -> str | None:
    """The text of a regular file at ``path`` (bounded), None for a link, a pipe or anything else."""
    if path.is_symlink() or not path.is_file():
        return None
    try:
        return read_record_text(path, "overrides")
    except Exception:  # damaged by the run: put back
        return None


def _log_paths() -> dict[str, str]:
    """This job's stdout/stderr files, where its scheduler's backend knows them (an in-process local run: none)."""
    return log_files()


@contextlib.contextmanager
def stderr_into_log(log_file: Path) -> Iterator[None]:
    """Copy stderr (tracebacks, warnings) into the run's log.txt too: the runner tees only stdout, and in
    a packed task the job's stderr file mixes the points."""
    import os
    import stat

    log_file.parent.mkdir(parents=True, exist_ok=True)
    # the point's folder is writable inside the --safe sandbox: a link or a pipe planted there is never followed
    fd = os.open(log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise RunFailed(f"{log_file} is not a regular file (a pipe or a device was planted there); not written")
    with open(fd, "a", encoding="utf-8", buffering=1) as log:
        old = sys.stderr
        sys.stderr = Tee(old, log)  # type: ignore[assignment]
        try:
            yield
        finally:
            sys.stderr = old


def finish_job(outcome: Any, extra_record: dict[str, Any], requeue: bool = True) -> dict[str, Any]:
    """Put the job fields back on run.yaml and turn the outcome into a result, a requeue or RunFailed."""
    rd = RunDir(outcome.run_dir)
    # run_recorded rewrote run.yaml when it started, so the job and sweep fields go back on now
    job = {**extra_record.get("job", {}), "id": own_job_id() or LOCAL_JOB_ID, **_log_paths()}
    fields = {**extra_record, "job": job}
    rd.update_record(**fields)
    if outcome.status == "completed":
        return {"status": "completed", "run_dir": str(outcome.run_dir)}
    if outcome.status == "pruned":  # stopped early by tune's pruner: a result, not a failure
        return {"status": "pruned", "run_dir": str(outcome.run_dir), "epoch": outcome.error.epoch + 1}
    if outcome.status == "preempted":
        if not requeue:  # a packed task requeues once, after all its running points have checkpointed
            return {"status": "preempted", "run_dir": str(outcome.run_dir), "checkpoint": outcome.error.checkpoint}
        job = requeue_job()
        if job:
            return {"status": "preempted", "requeued": job, "run_dir": str(outcome.run_dir)}
        raise RunFailed(f"stopped by {outcome.error.reason} and not requeued; checkpoint kept in {outcome.run_dir}")
    if outcome.status == "interrupted":
        raise RunFailed(f"interrupted; run dir {outcome.run_dir}")
    # a run inside the sandbox described its own failure (its traceback is in its run dir)
    raise RunFailed(getattr(outcome.error, "described", None) or describe_failure(outcome))


@job_entry
def run_submitted(run_dir: str, entry: str | None = None, job_record: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run the prepared run dir of ``hpc-runner submit``; raise RunFailed unless it completes."""
    freeze_at_exit()
    no_bars_without_a_terminal()
    use_cpu_budget()
    print(f"hpc-runner: job runs {run_dir}", flush=True)
    outcome = run_keeping_overrides(Path(run_dir), entry, job_record)
    return finish_job(outcome, {"job": job_record or {}})


def materialize_point(
    sweep_dir: str | Path, point_dir: str | Path, overrides: dict[str, Any], entry: str | None
) -> Path:
    """Write a point's run dir (config.yaml = the sweep's base + the point's overrides) unless it exists."""
    point_dir = Path(point_dir)
    if (point_dir / CONFIG_FILE).is_file():
        return point_dir

    cfg, _ = load_recorded_config(Path(sweep_dir) / BASE_DIR, [point_override(k, v) for k, v in overrides.items()])
    prepare_run(cfg, entry, point_dir)
    return point_dir


def run_sweep_point(
    sweep_dir: str,
    index: int,
    point_dir: str,
    overrides: dict[str, Any],
    entry: str | None = None,
    job_record: dict[str, Any] | None = None,
    pack: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run point ``index`` of a sweep in ``point_dir``; raise RunFailed unless it completes (or is preempted).

    ``pack`` (a packed task's point: its task, slot and share) keeps a pending stop request (the task
    stops), records the point's place in the task, and leaves the requeue to the task.
    """
    freeze_at_exit()
    no_bars_without_a_terminal()
    use_cpu_budget()
    path = materialize_point(sweep_dir, point_dir, overrides, entry)
    print(f"hpc-runner: sweep point {index} runs in {path}", flush=True)
    if pack is None:
        clear_stop()  # a stop request meant for the previous point of an in-process sweep is not for this one
    # which point this is, and which GPUs and CPUs it ran on, before it runs: what the point's own code
    # (tracking, TensorBoard names) reads, so nothing at a point's start reads the sweep's whole record
    record = {"sweep": {"dir": str(Path(sweep_dir).resolve()), "index": index, "overrides": overrides}}
    RunDir(path).update_record(binding=device_binding(), **record, **({"pack": pack} if pack else {}))
    with stderr_into_log(path / LOG_FILE):
        outcome = run_keeping_overrides(path, entry, job_record)
    return finish_job(outcome, {**record, "job": job_record or {}}, requeue=pack is None)

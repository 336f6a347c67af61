"""Requeue the current SLURM job after a stop signal, so it continues from its checkpoint."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping

from hpc_runner.records.command_output import run_command
from hpc_runner.scheduler.slurm.variables import (
    MAX_REQUEUES_ENV,
    launched_world,
    max_requeues,
    own_job_id,
    restart_count,
)


def current_job_id(environ: Mapping[str, str] | None = None) -> str | None:
    """Return the id SLURM knows this job (or array task) by, or None outside SLURM."""
    return own_job_id(environ)


def job_to_requeue(environ: Mapping[str, str] | None = None) -> str | None:
    """Return the id of this job when it may ask to be requeued: inside a job, on rank 0 (it asks once its
    checkpoint is written), fewer than ``max_requeues`` requeues so far; else None (said when bounded)."""
    job = current_job_id(environ)
    if not job or launched_world(environ)[0] != 0:
        return None
    if restart_count(environ) >= max_requeues(environ):
        print(f"hpc-runner: job {job} was requeued {restart_count(environ)} times already ({MAX_REQUEUES_ENV}="
              f"{max_requeues(environ)}); not requeued again", flush=True)
        return None
    return job


def requeue_current_job(environ: Mapping[str, str] | None = None) -> str | None:
    """Ask SLURM to requeue this job; return its id when SLURM accepted, else None.

    Bounded: a job already requeued ``max_requeues`` times (``HPCR_MAX_REQUEUES``, default 5) is not
    requeued again (a time limit that leaves no room would otherwise requeue it forever); the caller
    then ends it as failed, and its checkpoint stays for ``resume``."""
    job = job_to_requeue(environ)
    if job is None or not _still_running(job):
        return None
    try:
        run_command(["scontrol", "requeue", job], check=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        # SLURM may requeue the job and signal every process of it, this scontrol included, before scontrol
        # exits (seen on the local cluster under load: the job came back, we said it would not): ask SLURM
        return job if _requeued_since(job, restart_count(environ)) else None
    return job


def _requeued_since(job: str, restarts: int) -> bool:
    """Whether SLURM counts more restarts of ``job`` than this attempt's ``restarts`` (it was requeued)."""
    try:
        res = run_command(["scontrol", "show", "job", "-o", job], timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    found = re.search(r"\bRestarts=([0-9]{1,18})", res.stdout)
    return found is not None and int(found.group(1)) > restarts


def _still_running(job: str) -> bool:
    """False when SLURM is already ending the job (COMPLETING): requeueing then would undo a scancel."""
    try:
        res = run_command(["squeue", "-h", "-j", job, "-o", "%T"], timeout=30)
    except (OSError, subprocess.SubprocessError):
        return True
    return res.returncode != 0 or res.stdout.strip() in ("", "RUNNING")

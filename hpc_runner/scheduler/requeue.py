"""Requeue the current SLURM job after a stop signal, so it continues from its checkpoint."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping

from hpc_runner.engine.distributed import launched_world


def current_job_id(environ: Mapping[str, str] | None = None) -> str | None:
    """Return the id SLURM knows this job (or array task) by, or None outside SLURM."""
    environ = os.environ if environ is None else environ
    if "SLURM_ARRAY_JOB_ID" in environ and "SLURM_ARRAY_TASK_ID" in environ:
        return f"{environ['SLURM_ARRAY_JOB_ID']}_{environ['SLURM_ARRAY_TASK_ID']}"
    return environ.get("SLURM_JOB_ID")


def requeue_current_job(environ: Mapping[str, str] | None = None) -> str | None:
    """Ask SLURM to requeue this job; return its id when SLURM accepted, else None."""
    job = current_job_id(environ)
    if not job or launched_world(environ)[0] != 0:  # rank 0 only: it asks once its checkpoint is written
        return None
    if not _still_running(job):
        return None
    try:
        subprocess.run(["scontrol", "requeue", job], check=True, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return job


def _still_running(job: str) -> bool:
    """False when SLURM is already ending the job (COMPLETING): requeueing then would undo a scancel."""
    try:
        res = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return True
    return res.returncode != 0 or res.stdout.strip() in ("", "RUNNING")

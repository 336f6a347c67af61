"""What SLURM tells a job about itself, read in one place (as submitit's ``JobEnvironment`` does).

Every function takes an optional ``environ`` mapping so the decisions are tested without a job.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

MAX_REQUEUES_ENV = "HPCR_MAX_REQUEUES"
MAX_REQUEUES = 5  # a job that asked to be requeued this often is stopped instead: bounded by construction


def _env(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def own_job_id(environ: Mapping[str, str] | None = None) -> str | None:
    """Return this job's id as squeue and sacct print it (``123_4`` for an array task), None outside SLURM."""
    env = _env(environ)
    if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
        return f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
    return env.get("SLURM_JOB_ID") or None


def in_job(environ: Mapping[str, str] | None = None) -> bool:
    """Return True inside a SLURM job (batch script or step)."""
    return bool(_env(environ).get("SLURM_JOB_ID"))


def restart_count(environ: Mapping[str, str] | None = None) -> int:
    """Return how many times SLURM requeued this job (``SLURM_RESTART_COUNT``, 0 when absent or garbled)."""
    raw = _env(environ).get("SLURM_RESTART_COUNT", "").strip()
    return int(raw) if raw.isdigit() else 0


def max_requeues(environ: Mapping[str, str] | None = None) -> int:
    """Return how many requeues a job may ask for (``HPCR_MAX_REQUEUES``, default 5)."""
    raw = _env(environ).get(MAX_REQUEUES_ENV, "").strip()
    return int(raw) if raw.isdigit() else MAX_REQUEUES


def end_time(environ: Mapping[str, str] | None = None) -> float | None:
    """Return the job's end as epoch seconds when SLURM says it (``SLURM_JOB_END_TIME``, SLURM >= 23.02)."""
    raw = _env(environ).get("SLURM_JOB_END_TIME", "").strip()
    return float(raw) if raw.isdigit() and int(raw) > 0 else None


def slurm_variables(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return every ``SLURM_*`` variable (what run.yaml records of the job)."""
    return {k: v for k, v in sorted(_env(environ).items()) if k.startswith("SLURM_")}

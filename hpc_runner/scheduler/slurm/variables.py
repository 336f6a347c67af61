"""SLURM's variables that its own commands (requeue, the job clock) and its job side (job_environment.py) read.

Every function takes an optional ``environ`` mapping, read when called (never at import). The neutral job side
everything above the scheduler asks is scheduler/job_env.py, which picks scheduler/slurm/job_environment.py when
these variables are present; this module is below both, so the SLURM commands can read the job's variables.
"""

from __future__ import annotations

from collections.abc import Mapping

from hpc_runner.records.numbers import outside_int
from hpc_runner.scheduler.job_environment import (  # noqa: F401 - the SLURM commands import them from here
    MAX_REQUEUES,
    MAX_REQUEUES_ENV,
    checked_world,
    env_int,
    env_of,
    max_requeues,
)


def own_job_id(environ: Mapping[str, str] | None = None) -> str | None:
    """Return this job's id as squeue and sacct print it (``123_4`` for an array task), None outside SLURM."""
    env = env_of(environ)
    if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
        return f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
    return env.get("SLURM_JOB_ID") or None


def in_job(environ: Mapping[str, str] | None = None) -> bool:
    """Return True inside a SLURM job (batch script or step)."""
    return bool(env_of(environ).get("SLURM_JOB_ID"))


def restart_count(environ: Mapping[str, str] | None = None) -> int:
    """Return how many times SLURM requeued this job (``SLURM_RESTART_COUNT``, 0 when absent or garbled)."""
    value = outside_int(env_of(environ).get("SLURM_RESTART_COUNT", ""))
    return 0 if value is None else value


def end_time(environ: Mapping[str, str] | None = None) -> float | None:
    """Return the job's end as epoch seconds when SLURM says it (``SLURM_JOB_END_TIME``, SLURM >= 23.02)."""
    value = outside_int(env_of(environ).get("SLURM_JOB_END_TIME", ""), low=1)
    return None if value is None else float(value)


def launched_world(environ: Mapping[str, str] | None = None) -> tuple[int, int]:
    """Return ``(rank, world_size)`` this process was launched as (torchrun's RANK, or srun's tasks)."""
    environ = env_of(environ)
    if "WORLD_SIZE" in environ and "RANK" in environ:
        rank, world = env_int(environ, "RANK", 0), env_int(environ, "WORLD_SIZE", 1)
        return checked_world(rank, world, "RANK", "WORLD_SIZE", environ)
    ntasks_name = "SLURM_NTASKS" if "SLURM_NTASKS" in environ else "SLURM_NPROCS"
    ntasks = env_int(environ, ntasks_name, 1) or 1
    if ntasks > 1 and "SLURM_PROCID" in environ and "SLURM_STEP_ID" in environ:
        return checked_world(env_int(environ, "SLURM_PROCID", 0), ntasks, "SLURM_PROCID", ntasks_name, environ)
    return 0, 1

"""SLURM's variables that its own commands (requeue, the job clock) and the job side (scheduler/job_env.py) read.

Every function takes an optional ``environ`` mapping, read when called (never at import). scheduler/job_env.py is
the neutral job side everything above the scheduler asks; this module is below it, so scheduler/slurm/'s
commands can read the job's variables without importing the job side that calls them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from hpc_runner.errors import ClusterError
from hpc_runner.records.numbers import outside_int

MAX_REQUEUES_ENV = "HPCR_MAX_REQUEUES"
MAX_REQUEUES = 5  # a job that asked to be requeued this often is stopped instead: bounded by construction


def env_of(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


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


def max_requeues(environ: Mapping[str, str] | None = None) -> int:
    """Return how many requeues a job may ask for (``HPCR_MAX_REQUEUES``, default 5)."""
    value = outside_int(env_of(environ).get(MAX_REQUEUES_ENV, ""))
    return MAX_REQUEUES if value is None else value


def end_time(environ: Mapping[str, str] | None = None) -> float | None:
    """Return the job's end as epoch seconds when SLURM says it (``SLURM_JOB_END_TIME``, SLURM >= 23.02)."""
    value = outside_int(env_of(environ).get("SLURM_JOB_END_TIME", ""), low=1)
    return None if value is None else float(value)


def env_int(environ: Mapping[str, str], name: str, default: int | None = None) -> int | None:
    """Return the integer in ``environ[name]`` (``default`` when unset or empty); ClusterError when it is not one."""
    raw = environ.get(name)
    if raw is None or not raw.strip():
        return default
    value = outside_int(raw)
    if value is None:  # ASCII digits only: int() also takes '١', '1_000' and '-1'
        raise ClusterError(
            f"the environment variable {name}={raw!r} is not an integer; hpc-runner reads it to know how many "
            "processes this run has and which one this is",
            expected=f"{name} as SLURM or torchrun set it (a whole number), or {name} unset",
        )
    return value


def launched_world(environ: Mapping[str, str] | None = None) -> tuple[int, int]:
    """Return ``(rank, world_size)`` this process was launched as (torchrun's RANK, or srun's tasks)."""
    environ = env_of(environ)
    if "WORLD_SIZE" in environ and "RANK" in environ:
        rank, world = env_int(environ, "RANK", 0), env_int(environ, "WORLD_SIZE", 1)
        return _checked(rank, world, "RANK", "WORLD_SIZE", environ)
    ntasks_name = "SLURM_NTASKS" if "SLURM_NTASKS" in environ else "SLURM_NPROCS"
    ntasks = env_int(environ, ntasks_name, 1) or 1
    if ntasks > 1 and "SLURM_PROCID" in environ and "SLURM_STEP_ID" in environ:
        return _checked(env_int(environ, "SLURM_PROCID", 0), ntasks, "SLURM_PROCID", ntasks_name, environ)
    return 0, 1


def _checked(rank: int | None, world: int | None, rank_name: str, world_name: str,
             environ: Mapping[str, str]) -> tuple[int, int]:
    rank, world = int(rank or 0), int(world or 1)
    if world < 1 or not 0 <= rank < world:
        raise ClusterError(
            f"{rank_name}={environ.get(rank_name)!r} and {world_name}={environ.get(world_name)!r} do not describe "
            "a process of a run: the rank must be at least 0 and below the number of processes",
            expected=f"0 <= {rank_name} < {world_name}",
        )
    return rank, world

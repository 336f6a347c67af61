"""What the launcher (torchrun, or srun without it) says about this process: rank, world size, local rank.

Every number is read with :func:`env_int`, so a variable that is not an integer (``SLURM_NTASKS=abc``)
is one paragraph naming it, not a traceback from deep inside torch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from hpc_runner.errors import ClusterError


def env_int(environ: Mapping[str, str], name: str, default: int | None = None) -> int | None:
    """Return the integer in ``environ[name]`` (``default`` when unset or empty); ClusterError when it is not one."""
    raw = environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        return int(raw.strip())
    except ValueError:
        raise ClusterError(
            f"the environment variable {name}={raw!r} is not an integer; hpc-runner reads it to know how many "
            "processes this run has and which one this is",
            expected=f"{name} as SLURM or torchrun set it (a whole number), or {name} unset",
        ) from None


def launched_world(environ: Mapping[str, str] | None = None) -> tuple[int, int]:
    """Return ``(rank, world_size)`` this process was launched as (torchrun's RANK, or srun's tasks)."""
    environ = os.environ if environ is None else environ
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


def srun_without_torchrun(environ: Mapping[str, str] | None = None) -> bool:
    """Return True for a task of a multi-task srun step that no launcher (torchrun) gave a RANK."""
    environ = os.environ if environ is None else environ
    if "RANK" in environ and "WORLD_SIZE" in environ:
        return False
    return launched_world(environ)[1] > 1 and "SLURM_PROCID" in environ


def local_rank(environ: Mapping[str, str] | None = None) -> int:
    """Return this process's rank on its node: torchrun's LOCAL_RANK, else srun's SLURM_LOCALID, else 0."""
    environ = os.environ if environ is None else environ
    if "LOCAL_RANK" in environ:
        return int(env_int(environ, "LOCAL_RANK", 0) or 0)
    if srun_without_torchrun(environ) and "SLURM_LOCALID" in environ:
        return int(env_int(environ, "SLURM_LOCALID", 0) or 0)
    return 0


def node_rank(environ: Mapping[str, str] | None = None) -> int:
    """Return the index of this process's node in the job: torchrun's GROUP_RANK, else SLURM_NODEID, else 0."""
    environ = os.environ if environ is None else environ
    for name in ("GROUP_RANK", "SLURM_NODEID"):
        if name in environ:
            return int(env_int(environ, name, 0) or 0)
    return 0


def visible_gpu_count(environ: Mapping[str, str] | None = None) -> int:
    """Return how many GPUs CUDA_VISIBLE_DEVICES names (what ``torch.cuda.device_count()`` is on a GPU node)."""
    environ = os.environ if environ is None else environ
    value = environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    if not value or value.lower() in ("none", "nodevfiles"):  # SLURM writes NoDevFiles without GPUs
        return 0
    return len([v for v in value.split(",") if v.strip()])


def check_launch_env(environ: Mapping[str, str] | None = None) -> tuple[int, int]:
    """Read every launcher variable this run will use now, so a garbled one is refused before anything starts.

    Return ``(rank, world_size)``. The Trainer reads LOCAL_RANK only once the bundle is built, and the
    rendezvous the node's index: a bad value there would surface as a failed run, not as bad input.
    """
    environ = os.environ if environ is None else environ
    rank, world = launched_world(environ)
    local_rank(environ)
    if world > 1:
        node_rank(environ)
    return rank, world

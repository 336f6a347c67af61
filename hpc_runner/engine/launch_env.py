"""What the launcher (torchrun, or srun without it) says about this process: rank, world size, local rank.

The variables are read by the scheduler's job side (scheduler/job_env.py), every number with
:func:`env_int`, so a variable that is not an integer (``SLURM_NTASKS=abc``)
is one paragraph naming it, not a traceback from deep inside torch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

# the launcher's variables are read by the scheduler's job side; imported from here by the engine and older callers
from hpc_runner.scheduler.job_env import (  # noqa: F401
    env_int,
    launched_world,
    local_rank,
    node_rank,
    srun_without_torchrun,
)


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

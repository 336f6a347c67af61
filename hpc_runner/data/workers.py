"""How many data worker threads fit this job: SLURM's CPU grant or the affinity mask, less one."""

from __future__ import annotations

import os
import warnings


def available_cpus() -> int:
    """Return the CPUs this process may use: min(SLURM_CPUS_PER_TASK, affinity mask)."""
    # macOS and Windows have no affinity call.
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    raw = os.environ.get("SLURM_CPUS_PER_TASK", "").strip()
    if raw:
        try:
            slurm = int(raw)
        except ValueError:
            warnings.warn(f"SLURM_CPUS_PER_TASK={raw!r} is not an integer; using the affinity mask", stacklevel=2)
        else:
            if slurm > 0:
                # SLURM may grant fewer CPUs than the mask shows (no cgroup confinement) or the mask
                # may be narrower than the grant (taskset, srun --cpu-bind); either way take the smaller.
                cpus = min(cpus, slurm)
    return max(1, cpus)


def default_num_workers(reserve: int = 1) -> int:
    """Return worker threads for data loading: available_cpus() less `reserve` for the training loop, >= 1."""
    return max(1, available_cpus() - max(0, reserve))

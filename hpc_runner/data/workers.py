"""How many data worker threads fit this job: derived from the process's CPU budget (hpc_runner.resources)."""

from __future__ import annotations

from hpc_runner.resources.cpus import decide_cpus


def available_cpus() -> int:
    """Return the CPUs this process may use (``decide_cpus().count``: --cpus, SLURM's grant, affinity mask)."""
    return decide_cpus().count


def default_num_workers(reserve: int = 1) -> int:
    """Return worker threads for data loading: available_cpus() less `reserve` for the training loop, >= 1."""
    return max(1, available_cpus() - max(0, reserve))


def cache_fill_workers(num_workers: int | None) -> int:
    """Return the threads that fill a cache: ``num_workers``, else (None/0) all available CPUs."""
    # filling happens while the dataset is built, before training: nothing else needs the CPUs yet
    return max(1, int(num_workers)) if num_workers else available_cpus()

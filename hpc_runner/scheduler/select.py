"""The executor a cluster profile asks for (``executor: slurm``, ``local``, or ``memory``: the in-memory cluster
the tests drive)."""

from __future__ import annotations

from hpc_runner.scheduler.executor import Executor
from hpc_runner.scheduler.local_executor import LocalExecutor
from hpc_runner.scheduler.memory_executor import MemoryExecutor
from hpc_runner.scheduler.profiles import ClusterProfile
from hpc_runner.scheduler.slurm_executor import SlurmExecutor

EXECUTORS: dict[str, type[Executor]] = {SlurmExecutor.kind: SlurmExecutor, LocalExecutor.kind: LocalExecutor,
                                        MemoryExecutor.kind: MemoryExecutor}


def executor_for(profile: ClusterProfile) -> Executor:
    """Return the executor of ``profile`` (profiles.py has checked its ``executor:`` is one of EXECUTORS)."""
    return EXECUTORS[profile.executor](profile)

"""The one registry of schedulers: the submit side (``EXECUTORS``: the name a cluster profile gives, ``executor:
NAME`` -> the executor class) and the job side (``JOB_ENVIRONMENTS``: each backend's ``JobEnvironment``, the one
whose variables are present chosen at run time by scheduler/job_env.py, else ``NoScheduler``).

Each executor lives in its own folder (``scheduler/slurm/``, ``scheduler/gridengine/``, ``scheduler/local/``,
``scheduler/memory/``: the in-memory cluster the tests drive) and declares what it needs of a profile: ``kind``
(its name here), ``profile_keys`` (the keys it understands beyond ``profiles.COMMON_KEYS``: the fields of its
settings dataclass, which also make ``--scheduler-option``'s help) and ``check_profile`` (their values).
Adding a scheduler (Grid Engine, PBS, LSF, Flux) is one new folder and one entry in each tuple below; profiles.py,
the commands, the job side and the sweep's logic ask this module, never an executor's name.
"""

from __future__ import annotations

from hpc_runner.scheduler.executor import Executor
from hpc_runner.scheduler.gridengine.executor import GridEngineExecutor
from hpc_runner.scheduler.gridengine.job_side import GridEngineJobEnvironment
from hpc_runner.scheduler.job_environment import JobEnvironment
from hpc_runner.scheduler.local.executor import LocalExecutor
from hpc_runner.scheduler.memory.executor import MemoryExecutor
from hpc_runner.scheduler.profile import COMMON_KEYS, ClusterProfile, KeySpec
from hpc_runner.scheduler.slurm.executor import SlurmExecutor
from hpc_runner.scheduler.slurm.job_environment import SlurmJobEnvironment

EXECUTORS: dict[str, type[Executor]] = {cls.kind: cls for cls in (SlurmExecutor, GridEngineExecutor, LocalExecutor,
                                                              MemoryExecutor)}
# the job sides, asked in this order which one's variables are present (the in-memory cluster's jobs get SLURM's)
JOB_ENVIRONMENTS: tuple[type[JobEnvironment], ...] = (SlurmJobEnvironment, GridEngineJobEnvironment)


def profile_keys() -> dict[str, KeySpec]:
    """Return every key a profile may hold: the common ones, then each executor's own, in registry order."""
    keys = dict(COMMON_KEYS)
    for executor in EXECUTORS.values():
        for key, spec in executor.profile_keys.items():
            keys.setdefault(key, spec)
    return keys


def scheduler_option_help() -> str:
    """The keys ``--scheduler-option`` takes, each executor's from its settings dataclass (``profile_keys``)."""
    parts = [f"Keys of every profile: {', '.join(COMMON_KEYS)}"]
    parts += [f"{kind}: {', '.join(cls.profile_keys)}" for kind, cls in EXECUTORS.items() if cls.profile_keys]
    return "; ".join(parts) + " (docs/schedulers.md)"


def executor_for(profile: ClusterProfile) -> Executor:
    """Return the executor of ``profile`` (profiles.py has checked its ``executor:`` is one of EXECUTORS)."""
    return EXECUTORS[profile.executor](profile)

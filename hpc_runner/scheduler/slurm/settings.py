"""What a SLURM profile may ask for, in SLURM's own words: one dataclass, ``SlurmSettings``.

Each field is a profile key (``setting``: its accepted types and its help text); ``PROFILE_KEYS``, the keys the
SLURM executor understands beyond the common ones (scheduler/profile.py ``COMMON_KEYS``), and the help of
``--scheduler-option`` are made from these fields, so a key is declared once. The values are checked where they
are read (executor.py ``check_profile_values``, job_script.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hpc_runner.scheduler.profile import KeySpec, keys_of, setting

_N = type(None)
# setting() is dataclasses.field with metadata (RUF009 cannot tell for the list and mapping keys' fields)


@dataclass(frozen=True)
class SlurmSettings:
    """A SLURM profile's own keys (sbatch's words), with their types and help."""

    partition: str | None = setting((str, _N), "a partition name (null: the cluster's default)")
    partitions: Any = setting((list,), "a list of the partition names this cluster has")  # noqa: RUF009
    nodes: int | None = setting((int,), "a whole number of nodes")
    ntasks_per_node: int | None = setting((int, _N), "a whole number of tasks per node")
    cpus_per_gpu: int | None = setting((int, _N), "a whole number of CPUs")
    gpus_per_node: int | None = setting((int, _N), "a whole number of GPUs")
    gpus_per_task: int | None = setting((int, _N), "a whole number of GPUs")
    gres: str | None = setting((str, _N), "a generic resource like gpu:1")
    mem_gb: float | None = setting((int, float, _N), "memory per node in GB (a number)")
    mem: str | None = setting((str, _N), "memory per node as SLURM writes it, e.g. 16G")
    mem_per_gpu: str | None = setting((str, _N), "memory per GPU as SLURM writes it, e.g. 32G")
    account: str | None = setting((str, _N), "an account name")
    qos: str | None = setting((str, _N), "a QOS name")
    constraint: str | None = setting((str, _N), "a node feature expression")
    exclude: str | None = setting((str, _N), "a node list")
    job_name: str | None = setting((str, _N), "a job name")
    wckey: str | None = setting((str, _N), "a WCKey (sbatch --wckey; none unless set)")
    setup: Any = setting((list,), "a list of shell lines run before the job (module load ...)")  # noqa: RUF009
    export: str | None = setting((str,), "ALL, NONE or NIL (the base of sbatch --export)")
    env: Any = setting((dict,), "a mapping NAME: value added to sbatch --export")  # noqa: RUF009
    signal_delay_s: int | None = setting((int,), "seconds before the time limit at which USR2 is sent")
    array_parallelism: int | None = setting((int, _N), "how many tasks of an array may run at once")
    max_array_size: int | None = setting((int, _N), "MaxArraySize when scontrol cannot tell")
    max_submit_jobs: int | None = setting((int, _N), "how many jobs (array tasks) this user may have queued at once")
    python: str | None = setting((str, _N), "the command that starts python in the job")
    srun_args: Any = setting((list,), "extra srun arguments")  # noqa: RUF009
    sbatch: Any = setting((dict,), "extra sbatch options, e.g. {reservation: r1, mail-type: END}")  # noqa: RUF009


PROFILE_KEYS: dict[str, KeySpec] = keys_of(SlurmSettings)

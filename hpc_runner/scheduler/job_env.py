"""What the scheduler tells a job about itself, asked in neutral words: the module-level face of the job side.

The engine, resources, sweep tasks, reports and tracking call these functions; each asks the ``JobEnvironment``
(scheduler/job_environment.py) of the scheduler whose variables are present, chosen at run time from the registry
(scheduler/select.py ``JOB_ENVIRONMENTS``: SLURM's in scheduler/slurm/job_environment.py), else ``NoScheduler``
(a local run). No scheduler's variable is named here. Every function takes an optional ``environ`` mapping, read
when called (never at import), so the decisions are tested without a job.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import Any

from hpc_runner.scheduler.job_environment import (  # noqa: F401 - the job side's names, asked here
    JobEnvironment,
    NoScheduler,
    RecordedJob,
    env_int,
    env_of,
    in_process_job,
)
from hpc_runner.scheduler.select import JOB_ENVIRONMENTS


def current(environ: Mapping[str, str] | None = None) -> JobEnvironment:
    """Return the job side of the scheduler whose variables ``environ`` holds (``NoScheduler`` when none's)."""
    env = env_of(environ)
    for cls in JOB_ENVIRONMENTS:
        if cls.activated(env):
            return cls(environ)
    return NoScheduler(environ)


def scheduler_variables(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return every variable of the job's scheduler (what run.yaml keeps for people)."""
    return current(environ).variables()


def job_record(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Return what run.yaml records of the job that runs it (``scheduler: {name, job_id, ...}``)."""
    return current(environ).record()


def recorded_job(record: Mapping[str, Any] | None) -> RecordedJob:
    """Return what a run record says of the job that wrote it: its ``scheduler:``, else an earlier version's
    ``slurm:`` (every variable of the job), read by the backend whose variables they are."""
    record = record if isinstance(record, Mapping) else {}
    if isinstance(record.get("scheduler"), Mapping):
        return RecordedJob.from_record(record["scheduler"])
    for key, variables in record.items():  # an earlier version's key: the backend's name, its variables
        if not isinstance(variables, Mapping):
            continue
        for cls in JOB_ENVIRONMENTS:
            if cls.name == key:
                return cls.recorded(variables)
    return RecordedJob()


def log_files(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return this job's own log files (``stdout``, ``stderr``) where its scheduler's backend knows them."""
    return current(environ).log_files()


def job_variables(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return the variables that make a process part of a job, of every scheduler listed (kept out: a cluster's
    own config). A job submitted from inside a job must not inherit them (its node list, task counts, ids)."""
    out: dict[str, str] = {}
    for cls in JOB_ENVIRONMENTS:
        out.update(cls(environ).job_variables())
    return out


@contextlib.contextmanager
def scrubbed_environment(also: Mapping[str, str] | None = None) -> Iterator[None]:
    """Hide this job's variables (:func:`job_variables`, and ``also``) from ``os.environ`` for the block, then
    restore them: what a job submitted from inside this one must not inherit."""
    saved = {**job_variables(), **(also or {})}
    for k in saved:
        os.environ.pop(k, None)
    try:
        yield
    finally:
        os.environ.update(saved)


def in_job(environ: Mapping[str, str] | None = None) -> bool:
    """Return True inside a scheduler's job."""
    return current(environ).in_job()


# ---------------------------------------------------------------- ids, as the run record keeps them


def own_job_id(environ: Mapping[str, str] | None = None) -> str | None:
    """Return the id the scheduler's queue knows this job by (``123_4`` for an array task), None outside a job."""
    return current(environ).job_id


def job_id(environ: Mapping[str, str] | None = None) -> str | None:
    """Return the job's own id (an array task's job id, not ``123_4``), None outside a job."""
    return current(environ).own_number


def array_job_id(environ: Mapping[str, str] | None = None) -> str | None:
    """Return the array's job id of an array task, else None."""
    return current(environ).array_job_id


def array_task_id(environ: Mapping[str, str] | None = None) -> str | None:
    """Return the index of an array task in its array, else None."""
    return current(environ).array_task_id


def restart_count(environ: Mapping[str, str] | None = None) -> int:
    """Return how many times the scheduler requeued this job."""
    return current(environ).restarts


# ---------------------------------------------------------------- ranks: what the launcher says of this process


def srun_without_torchrun(environ: Mapping[str, str] | None = None) -> bool:
    """Return True for a task the scheduler's launcher started as one of several with no RANK from torchrun."""
    return current(environ).launcher_without_torchrun()


def launched_world(environ: Mapping[str, str] | None = None) -> tuple[int, int]:
    """Return ``(rank, world_size)`` this process was launched as (torchrun's, else the scheduler launcher's)."""
    return current(environ).launched_world()


def local_rank(environ: Mapping[str, str] | None = None) -> int:
    """Return this process's rank on its node."""
    return current(environ).local_rank


def node_rank(environ: Mapping[str, str] | None = None) -> int:
    """Return the index of this process's node in the job."""
    return current(environ).node_rank


def node_count(environ: Mapping[str, str] | None = None) -> int:
    """Return how many nodes the run spans."""
    return current(environ).num_nodes


def step_id(environ: Mapping[str, str] | None = None) -> str | None:
    """Return the id of the job step this process runs in, None outside a step."""
    return current(environ).step_id


def world_claim_names(environ: Mapping[str, str] | None = None) -> list[str]:
    """Return the names of the variables set that say this run has several processes (what to ``unset``)."""
    env = current(environ)
    return [n for n in env.claim_names() if n in env.environ]


def world_claims(environ: Mapping[str, str] | None = None) -> str:
    """Return the variables that say this run has several processes, as ``NAME=value`` words."""
    env = current(environ)
    return " ".join(f"{n}={env.environ[n]}" for n in env.claim_names() if n in env.environ)


def step_daemon(environ: Mapping[str, str] | None = None) -> str | None:
    """Return the name of the scheduler's process that starts every task of a step, None without one."""
    return current(environ).step_daemon


def parent_commands(pid: int | None = None, limit: int = 64) -> list[str] | None:
    """Return the command names (``comm``) of the parents of process ``pid`` (this one), nearest first, up to the
    first process; None where the whole chain cannot be read (no /proc, a parent hidden by ``hidepid``, too long)."""
    names: list[str] = []
    current_pid = os.getpid() if pid is None else pid
    for _ in range(limit):
        try:
            with open(f"/proc/{current_pid}/stat", encoding="utf-8", errors="replace") as f:
                _, _, rest = f.read(4096).rpartition(")")  # the name in parentheses may hold anything
            fields = rest.split()
            current_pid = int(fields[1])  # the parent's pid
            if current_pid == 0:
                return names
            with open(f"/proc/{current_pid}/comm", encoding="utf-8", errors="replace") as f:
                names.append(f.read(256).strip())
        except (OSError, IndexError, ValueError):
            return None
    return None


def stale_world_claim(
    environ: Mapping[str, str] | None = None, parents: Callable[[], list[str] | None] = parent_commands
) -> str | None:
    """Return why the scheduler's variables that claim several tasks (its launcher's step without torchrun) describe
    no step this process belongs to, or None when they may (or when it cannot be told).

    Every task of a step is started by the step's daemon (``step_daemon``), so it is among the task's parents,
    however many shells or wrappers stand between them. Without it the variables were left in a shell (copied,
    exported, an allocation's shell) and the step's other tasks will never come. A process whose parents cannot be
    read (no /proc) is given the benefit of the doubt. Cheap: a few small reads of /proc, no scheduler command.
    """
    env = current(environ)
    daemon = env.step_daemon
    if daemon is None or not env.launcher_without_torchrun():
        return None
    seen = parents()
    if seen is None or daemon in seen:
        return None
    chain = " < ".join(seen[:6]) + (" < ..." if len(seen) > 6 else "")
    return f"none of its parent processes ({chain or 'none'}) is {daemon}, which starts every task of a step"


# ---------------------------------------------------------------- nodes: where the job runs, how to reach rank 0


def launch_address_name(environ: Mapping[str, str] | None = None) -> str:
    """Return the variable the launch address comes from (named in the rendezvous' notes), empty without one."""
    return current(environ).launch_address_name


def job_number(environ: Mapping[str, str] | None = None) -> tuple[int, str] | None:
    """Return the job's id as a number and the variable that gave it (every rank reads the same), else None."""
    return current(environ).job_number()


def node_list(environ: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """Return the step's node list (else the job's) and the variable it came from, None outside a job."""
    return current(environ).node_list()


def first_node(environ: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """Return the first host of the node list (where rank 0 runs) and the list's variable, None outside a job."""
    return current(environ).first_node()


def nodes(environ: Mapping[str, str] | None = None) -> list[str]:
    """Return the host names of the node list, expanded (bounded: ClusterError for a list the scheduler would not
    give)."""
    return current(environ).nodes


def node_name(environ: Mapping[str, str] | None = None) -> str | None:
    """Return this node's name as the scheduler knows it, None outside a job."""
    return current(environ).node_name()


def node_address(host: str, environ: Mapping[str, str] | None = None) -> str | None:
    """Return the address the scheduler reaches ``host`` at, None where it cannot say."""
    return current(environ).node_address(host)


def launch_address(environ: Mapping[str, str] | None = None) -> str | None:
    """Return the address of the host the job step was launched from (the batch host), else None."""
    return current(environ).launch_address


def scratch_dir(environ: Mapping[str, str] | None = None) -> str | None:
    """Return the job's node-local scratch folder, None without one."""
    return current(environ).scratch_dir


# ---------------------------------------------------------------- what the job was granted


def cpu_grant(environ: Mapping[str, str] | None = None) -> tuple[int, str, str] | None:
    """Return the CPUs granted to this task as ``(count, the variable, detail)``, from the most specific one set."""
    return current(environ).cpu_grant()


def grant_cpus(count: int, environ: MutableMapping[str, str] | None = None) -> None:
    """Make ``count`` this process's CPU grant (a packed slot's share), as :func:`cpu_grant` reads it."""
    env = os.environ if environ is None else environ
    current(env).grant_cpus(count, env)


def gpu_grant(environ: Mapping[str, str] | None = None) -> tuple[list[str], str] | None:
    """Return the GPU ids granted to this step (else to the job) as the node numbers them, and the variable."""
    return current(environ).gpu_grant()


def memory_grant_mb(environ: Mapping[str, str] | None = None) -> int | None:
    """Return the memory granted on this node in MB, else None."""
    return current(environ).memory_mb


def requeue_job(environ: Mapping[str, str] | None = None) -> str | None:
    """Ask the scheduler to requeue this job so it continues from its checkpoint; return its id when accepted.

    None outside a job, on a rank other than 0, past ``HPCR_MAX_REQUEUES``, or when the scheduler refuses.
    """
    return current(environ).requeue()


def requeue_exit_code(environ: Mapping[str, str] | None = None) -> int | None:
    """The exit status that asks this job's scheduler to run it again once ``requeue_job`` said yes (Grid Engine:
    99), None where the requeue was a command (SLURM's ``scontrol requeue``) and the job ends as it would."""
    return current(environ).requeue_exit_code


def job_end_time(job_id: str | None = None, environ: Mapping[str, str] | None = None) -> float | None:
    """Return when the scheduler ends the job ``job_id`` (this job when None), as epoch seconds: the environment's
    word, else one scheduler call; None outside a job, without a limit or an answer."""
    return current(environ).ask_end_time(job_id)


def stop_margin_s(signal_delay_s: float | None, environ: Mapping[str, str] | None = None) -> float:
    """Return how long before the job's end its work must be done: the profile's ``signal_delay_s`` (when the
    stop signal is due) plus how much earlier the scheduler may send it."""
    return current(environ).stop_margin_s(signal_delay_s)

"""What the scheduler tells a job about itself, read in one place (as submitit's ``JobEnvironment`` does).

The job side of the scheduler: its ids, requeues, end time, what it was granted (CPUs, GPUs, memory),
its nodes and this process's ranks, asked in neutral words by the engine, resources, sweep tasks,
reports and tracking; only this module (and scheduler/slurm/) knows SLURM's variable names.
Every function takes an optional ``environ`` mapping, read when called (never at import), so the
decisions are tested without a job; :class:`JobEnvironment` gathers them as one object.
"""

from __future__ import annotations

import contextlib
import os
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, MutableMapping

from hpc_runner.errors import ClusterError
from hpc_runner.records.numbers import outside_int
from hpc_runner.scheduler.slurm.requeue import job_to_requeue, requeue_current_job
from hpc_runner.scheduler.slurm.variables import (
    end_time,
    env_int,
    env_of,
    in_job,
    launched_world,
    own_job_id,
    restart_count,
)


def slurm_variables(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return every ``SLURM_*`` variable (what run.yaml records of the job)."""
    return {k: v for k, v in sorted(env_of(environ).items()) if k.startswith("SLURM_")}


def job_variables(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return the variables that make a process part of this job (kept out: the cluster's config, SLURM_CONF).

    A job submitted from inside a job must not inherit them (its node list, task counts, ids).
    """
    return {k: v for k, v in env_of(environ).items() if k.startswith(("SLURM_", "SLURMD_")) and k != "SLURM_CONF"}


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


# ---------------------------------------------------------------- ids, as the run record keeps them


def job_id(environ: Mapping[str, str] | None = None) -> str | None:
    """Return the job's own id (an array task's job id, not ``123_4``), None outside a job."""
    return env_of(environ).get("SLURM_JOB_ID") or None


def array_job_id(environ: Mapping[str, str] | None = None) -> str | None:
    """Return the array's job id of an array task, else None."""
    return env_of(environ).get("SLURM_ARRAY_JOB_ID") or None


def array_task_id(environ: Mapping[str, str] | None = None) -> str | None:
    """Return the index of an array task in its array, else None."""
    return env_of(environ).get("SLURM_ARRAY_TASK_ID") or None


def job_summary(variables: Mapping[str, str]) -> list[tuple[str, str]]:
    """Return the job's ids, nodes and CPUs from recorded variables (:func:`slurm_variables`), empty outside a job."""
    if not variables.get("SLURM_JOB_ID"):
        return []
    keys = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_JOB_NODELIST", "SLURM_CPUS_ON_NODE")
    return [(k, variables[k]) for k in keys if k in variables]


def recorded_restarts(variables: Mapping[str, object]) -> int:
    """Return the requeue counter in recorded variables (:func:`slurm_variables`): 0 when absent or garbled."""
    try:
        return int(variables.get("SLURM_RESTART_COUNT") or 0)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return 0


# ---------------------------------------------------------------- ranks: what the launcher says of this process


def srun_without_torchrun(environ: Mapping[str, str] | None = None) -> bool:
    """Return True for a task of a multi-task srun step that no launcher (torchrun) gave a RANK."""
    environ = env_of(environ)
    if "RANK" in environ and "WORLD_SIZE" in environ:
        return False
    return launched_world(environ)[1] > 1 and "SLURM_PROCID" in environ


def local_rank(environ: Mapping[str, str] | None = None) -> int:
    """Return this process's rank on its node: torchrun's LOCAL_RANK, else srun's SLURM_LOCALID, else 0."""
    environ = env_of(environ)
    if "LOCAL_RANK" in environ:
        return int(env_int(environ, "LOCAL_RANK", 0) or 0)
    if srun_without_torchrun(environ) and "SLURM_LOCALID" in environ:
        return int(env_int(environ, "SLURM_LOCALID", 0) or 0)
    return 0


def node_rank(environ: Mapping[str, str] | None = None) -> int:
    """Return the index of this process's node in the job: torchrun's GROUP_RANK, else SLURM_NODEID, else 0."""
    environ = env_of(environ)
    for name in ("GROUP_RANK", "SLURM_NODEID"):
        if name in environ:
            return int(env_int(environ, name, 0) or 0)
    return 0


def node_count(environ: Mapping[str, str] | None = None) -> int:
    """Return how many nodes the run spans (SLURM's step or job node count; torchrun's WORLD/LOCAL_WORLD)."""
    environ = env_of(environ)
    for name in ("SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES", "SLURM_NNODES"):
        if environ.get(name):
            return max(1, int(env_int(environ, name, 1) or 1))
    world, local = env_int(environ, "WORLD_SIZE"), env_int(environ, "LOCAL_WORLD_SIZE")
    if world and local:
        return max(1, -(-world // local))
    return 1


def step_id(environ: Mapping[str, str] | None = None) -> str | None:
    """Return the id of the job step this process runs in (``0``, ``batch``), None outside a step."""
    return env_of(environ).get("SLURM_STEP_ID") or None


def world_claims(environ: Mapping[str, str] | None = None) -> str:
    """Return the variables that say this run has several processes, as ``NAME=value`` words."""
    environ = env_of(environ)
    return " ".join(f"{n}={environ[n]}" for n in _CLAIM_NAMES if n in environ)


_CLAIM_NAMES = ("RANK", "WORLD_SIZE", "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_PROCID", "SLURM_STEP_ID")
STEP_DAEMON = "slurmstepd"  # the scheduler's process that starts every task of a step, a parent of each task


def world_claim_names(environ: Mapping[str, str] | None = None) -> list[str]:
    """Return the names of the variables set that say this run has several processes (what to ``unset``)."""
    environ = env_of(environ)
    return [n for n in _CLAIM_NAMES if n in environ]


def parent_commands(pid: int | None = None, limit: int = 64) -> list[str] | None:
    """Return the command names (``comm``) of the parents of process ``pid`` (this one), nearest first, up to the
    first process; None where the whole chain cannot be read (no /proc, a parent hidden by ``hidepid``, too long)."""
    names: list[str] = []
    current = os.getpid() if pid is None else pid
    for _ in range(limit):
        try:
            with open(f"/proc/{current}/stat", encoding="utf-8", errors="replace") as f:
                _, _, rest = f.read(4096).rpartition(")")  # the name in parentheses may hold anything
            fields = rest.split()
            current = int(fields[1])  # the parent's pid
            if current == 0:
                return names
            with open(f"/proc/{current}/comm", encoding="utf-8", errors="replace") as f:
                names.append(f.read(256).strip())
        except (OSError, IndexError, ValueError):
            return None
    return None


def stale_world_claim(
    environ: Mapping[str, str] | None = None, parents: Callable[[], list[str] | None] = parent_commands
) -> str | None:
    """Return why the scheduler's variables that claim several tasks (an srun step without torchrun) describe no
    step this process belongs to, or None when they may (or when it cannot be told).

    Every task of a step is started by the step's daemon (slurmstepd), so it is among the task's parents, however
    many shells or wrappers stand between them. Without it the variables were left in a shell (copied, exported,
    an ``salloc`` shell) and the step's other tasks will never come. A process whose parents cannot be read (no
    /proc) is given the benefit of the doubt. Cheap: a few small reads of /proc, no scheduler command.
    """
    environ = env_of(environ)
    if not srun_without_torchrun(environ):
        return None
    seen = parents()
    if seen is None or STEP_DAEMON in seen:
        return None
    chain = " < ".join(seen[:6]) + (" < ..." if len(seen) > 6 else "")
    return f"none of its parent processes ({chain or 'none'}) is {STEP_DAEMON}, which starts every task of a step"


# ---------------------------------------------------------------- nodes: where the job runs, how to reach rank 0

LAUNCH_ADDRESS = "SLURM_LAUNCH_NODE_IPADDR"  # named in the rendezvous' notes when its address is used


def job_number(environ: Mapping[str, str] | None = None) -> tuple[int, str] | None:
    """Return the job's id as a number and the variable that gave it (every rank reads the same), else None."""
    environ = env_of(environ)
    name = "SLURM_JOB_ID" if environ.get("SLURM_JOB_ID") else "SLURM_JOBID"
    number = env_int(environ, name)
    return None if number is None else (number, name)


def node_list(environ: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """Return the step's node list (else the job's) and the variable it came from, None outside a job."""
    environ = env_of(environ)
    name = next((v for v in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST") if environ.get(v)), None)
    return None if name is None else (environ[name], name)


def first_node(environ: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """Return the first host of the node list (where rank 0 runs) and the list's variable, None outside a job."""
    from hpc_runner.scheduler.slurm.hostlist import first_host

    found = node_list(environ)
    return None if found is None else (first_host(found[0], found[1]), found[1])


def nodes(environ: Mapping[str, str] | None = None) -> list[str]:
    """Return the host names of the node list, expanded (bounded: ClusterError for a list SLURM would not give)."""
    from hpc_runner.scheduler.slurm.hostlist import expand_hostlist

    found = node_list(environ)
    if found is None:
        return []
    try:
        return expand_hostlist(found[0])
    except ValueError as exc:
        raise ClusterError(f"{found[1]}={found[0]!r} is not a SLURM host list: {exc}",
                           expected="a list such as gpu[01-03,07],cpu5, as SLURM sets it") from None


def node_name(environ: Mapping[str, str] | None = None) -> str | None:
    """Return this node's name as the scheduler knows it, None outside a job."""
    return env_of(environ).get("SLURMD_NODENAME") or None


def node_address(host: str) -> str | None:
    """Return the address the scheduler reaches ``host`` at (its NodeAddr), None where it cannot say."""
    from hpc_runner.scheduler.slurm.hostlist import node_address as ask

    return ask(host)


def launch_address(environ: Mapping[str, str] | None = None) -> str | None:
    """Return the address of the host the job step was launched from (the batch host), else None."""
    return env_of(environ).get(LAUNCH_ADDRESS) or None


# ---------------------------------------------------------------- what the job was granted


def _positive(name: str, raw: str) -> int | None:
    """``raw`` as a whole number >= 1, or None (with a warning) when a scheduler variable is malformed."""
    value = outside_int(raw, low=1)
    if value is not None:
        return value
    warnings.warn(f"{name}={raw!r} is not a whole number of CPUs; ignoring it", stacklevel=4)
    return None


def cpu_grant(environ: Mapping[str, str] | None = None) -> tuple[int, str, str] | None:
    """Return the CPUs granted to this task as ``(count, the variable, detail)``, from the most specific one set."""
    env = env_of(environ)
    raw = env.get("SLURM_CPUS_PER_TASK", "").strip()
    if raw and (value := _positive("SLURM_CPUS_PER_TASK", raw)):
        return value, "SLURM_CPUS_PER_TASK", f"SLURM_CPUS_PER_TASK={value}"
    tres = env.get("SLURM_TRES_PER_TASK", "")  # newer SLURM: "cpu=4" or "cpu:4,gres/gpu:1"
    for item in tres.split(","):
        key, _, raw = item.replace(":", "=", 1).partition("=")
        if key.strip() == "cpu" and (value := _positive("SLURM_TRES_PER_TASK", raw)):
            return value, "SLURM_TRES_PER_TASK", f"SLURM_TRES_PER_TASK={tres}"
    # sbatch without --cpus-per-task sets no per-task variable: the job's CPUs on this node, per task
    raw = env.get("SLURM_CPUS_ON_NODE", "").strip()
    if env.get("SLURM_JOB_ID") and raw and (value := _positive("SLURM_CPUS_ON_NODE", raw)):
        per_node = env.get("SLURM_NTASKS_PER_NODE", "").split("(")[0].strip()
        tasks = outside_int(per_node, low=1) or 1
        share = f" / {tasks} tasks per node" if tasks > 1 else ""
        return max(1, value // tasks), "SLURM_CPUS_ON_NODE", f"SLURM_CPUS_ON_NODE={value}{share}"
    return None


def grant_cpus(count: int, environ: MutableMapping[str, str] | None = None) -> None:
    """Make ``count`` this process's CPU grant (a packed slot's share), as :func:`cpu_grant` reads it."""
    env = os.environ if environ is None else environ
    env["SLURM_CPUS_PER_TASK"] = str(int(count))
    env.pop("SLURM_TRES_PER_TASK", None)  # the more general grant would not be the slot's


def gpu_grant(environ: Mapping[str, str] | None = None) -> tuple[list[str], str] | None:
    """Return the GPU ids granted to this step (else to the job) as the node numbers them, and the variable."""
    env = env_of(environ)
    for name in ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS"):
        granted = [g.strip() for g in env.get(name, "").split(",") if g.strip()]
        if granted:
            return granted, name
    return None


def memory_grant_mb(environ: Mapping[str, str] | None = None) -> int | None:
    """Return the memory granted on this node in MB (per node, or per CPU times the CPUs on it), else None."""
    env = env_of(environ)
    per_node = outside_int(env.get("SLURM_MEM_PER_NODE", ""))
    if per_node is not None:
        return per_node
    per_cpu, cpus = outside_int(env.get("SLURM_MEM_PER_CPU", "")), outside_int(env.get("SLURM_CPUS_ON_NODE", ""))
    if per_cpu is not None and cpus is not None:
        return per_cpu * cpus
    return None


# The scheduler whose job runs in this very process (the in-memory cluster's ``run``): its job's requeue goes to
# it, not to the scheduler's command. Empty in a real job.
_IN_PROCESS: list[Callable[[str], bool]] = []


@contextlib.contextmanager
def in_process_job(variables: Mapping[str, str], requeue: Callable[[str], bool]) -> Iterator[None]:
    """Run the block as a job of a scheduler that runs it in this process: the job's ``variables`` (the ones its
    scheduler sets in a job) in ``os.environ``, put back after, and ``requeue(job_id)`` asked instead of the
    scheduler's requeue command."""
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    _IN_PROCESS.append(requeue)
    try:
        yield
    finally:
        _IN_PROCESS.pop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def requeue_job(environ: Mapping[str, str] | None = None) -> str | None:
    """Ask the scheduler to requeue this job so it continues from its checkpoint; return its id when accepted.

    None outside a job, on a rank other than 0, past ``HPCR_MAX_REQUEUES``, or when the scheduler refuses.
    """
    if _IN_PROCESS:
        job = job_to_requeue(environ)
        return job if job is not None and _IN_PROCESS[-1](job) else None
    return requeue_current_job(environ)


def job_end_time(job_id: str | None = None, environ: Mapping[str, str] | None = None) -> float | None:
    """Return when the scheduler ends the job ``job_id`` (this job when None), as epoch seconds: :func:`end_time`
    when the environment says it, else one scheduler call; None outside a job, without a limit or an answer."""
    from hpc_runner.scheduler.slurm.job_clock import job_end_time as ask

    return ask(job_id or own_job_id(environ), environ)


def stop_margin_s(signal_delay_s: float | None) -> float:
    """Return how long before the job's end its work must be done: the profile's ``signal_delay_s`` (when the
    stop signal is due) plus how much earlier the scheduler may send it (job_clock.JobClock's margin)."""
    from hpc_runner.scheduler.slurm.job_clock import stop_margin_s as margin

    return margin(signal_delay_s)


# ---------------------------------------------------------------- the whole view, as submitit's JobEnvironment


class JobEnvironment:
    """What the scheduler tells this process about its job, read from ``environ`` (``os.environ`` when asked)."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = environ

    @property
    def environ(self) -> Mapping[str, str]:
        """The mapping read: ``os.environ`` at the time of the question unless one was given."""
        return env_of(self._environ)

    def in_job(self) -> bool:
        """Return True inside a scheduler's job."""
        return in_job(self.environ)

    @property
    def job_id(self) -> str | None:
        """The id the scheduler knows this job by (``123_4`` for an array task), None outside a job."""
        return own_job_id(self.environ)

    @property
    def array_job_id(self) -> str | None:
        """The array's job id of an array task, else None."""
        return array_job_id(self.environ)

    @property
    def array_task_id(self) -> str | None:
        """The index of an array task, else None."""
        return array_task_id(self.environ)

    @property
    def restarts(self) -> int:
        """How many times the scheduler requeued this job."""
        return restart_count(self.environ)

    @property
    def end_time(self) -> float | None:
        """The job's end as epoch seconds when the scheduler says it, else None."""
        return end_time(self.environ)

    def time_left(self, now: float | None = None) -> float | None:
        """Return the seconds left before the job's end (never below 0), None when the end is not known."""
        end = self.end_time
        return None if end is None else max(0.0, end - (time.time() if now is None else now))

    @property
    def cpus(self) -> int | None:
        """The CPUs granted to this task, None when the scheduler says nothing."""
        grant = cpu_grant(self.environ)
        return None if grant is None else grant[0]

    @property
    def gpus(self) -> list[str]:
        """The GPU ids granted (the node's numbering), empty without a grant."""
        grant = gpu_grant(self.environ)
        return [] if grant is None else grant[0]

    @property
    def memory_mb(self) -> int | None:
        """The memory granted on this node in MB, None when the scheduler says nothing."""
        return memory_grant_mb(self.environ)

    @property
    def nodes(self) -> list[str]:
        """The host names of the job's (or step's) nodes, expanded when asked."""
        return nodes(self.environ)

    @property
    def num_nodes(self) -> int:
        """How many nodes the run spans."""
        return node_count(self.environ)

    @property
    def global_rank(self) -> int:
        """This process's rank among all of the run's processes."""
        return launched_world(self.environ)[0]

    @property
    def world_size(self) -> int:
        """How many processes the run has."""
        return launched_world(self.environ)[1]

    @property
    def local_rank(self) -> int:
        """This process's rank on its node."""
        return local_rank(self.environ)

    @property
    def node_rank(self) -> int:
        """The index of this process's node in the job."""
        return node_rank(self.environ)

    @property
    def step_id(self) -> str | None:
        """The id of the job step this process runs in, None outside a step."""
        return step_id(self.environ)

    @property
    def launch_address(self) -> str | None:
        """The address of the host the step was launched from, None where not said."""
        return launch_address(self.environ)

    def requeue(self) -> str | None:
        """Ask the scheduler to requeue this job; return its id when accepted, else None."""
        return requeue_job(self._environ)

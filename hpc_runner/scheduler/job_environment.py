"""The job side of a scheduler, in our own words: ``JobEnvironment`` (as submitit's, one per backend).

What a scheduler tells a job about itself (its ids, array task, restarts, time left, the CPUs, GPUs and memory it
was granted, its nodes, this process's ranks, where rank 0 is, how to be requeued, its node-local scratch folder)
is read from the variables the scheduler sets. Each backend implements this class in its own folder
(``scheduler/slurm/job_environment.py``); the one whose variables are present is chosen at run time
(``activated``, the registry is ``scheduler/select.py`` ``JOB_ENVIRONMENTS``), and this base class, as
``NoScheduler``, is the job side of a local run: no ids, no grant, ranks from torchrun only.

Every object reads the ``environ`` mapping it was given (``os.environ`` at the time of each question when none),
never at import, so the decisions are tested without a job. ``scheduler/job_env.py`` is the module-level face
everything above the scheduler calls.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from hpc_runner.errors import ClusterError
from hpc_runner.records.numbers import outside_int
from hpc_runner.records.read import read_record_text

MAX_REQUEUES_ENV = "HPCR_MAX_REQUEUES"
MAX_REQUEUES = 5  # a job that asked to be requeued this often is stopped instead: bounded by construction
SIGNAL_EARLY_S = 60.0  # how much earlier than asked a scheduler may send the stop signal (SLURM: up to 60 s)
CPUS_GRANTED_ENV = "HPCR_CPUS_GRANTED"  # a packed slot's share where no scheduler says one (local runs)
# set by a submission whose profile's cluster check found the scheduler refuses requeue (scheduler/site_findings.py):
# the job does not ask to be requeued; it ends with its checkpoint, and `resume` (or a sweep's --retry) resubmits
REQUEUE_ENV = "HPCR_REQUEUE"
RESUBMIT = "resubmit"
MAX_HOST_FILE_BYTES = 16 << 20  # a scheduler's host file: one line per slot or process


def env_of(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    """Return ``environ``, or ``os.environ`` when None."""
    return os.environ if environ is None else environ


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
            expected=f"{name} as the scheduler or torchrun set it (a whole number), or {name} unset",
        )
    return value


def scheduler_int(environ: Mapping[str, str], name: str, scheduler: str, low: int = 0,
                  unset: tuple[str, ...] = ()) -> int | None:
    """Return the whole number a scheduler set in ``environ[name]`` (None when unset, empty or one of ``unset``, the
    words it writes for none); ClusterError naming the variable when it holds anything else."""
    raw = environ.get(name)
    if raw is None or not raw.strip() or raw.strip() in unset:
        return None
    value = outside_int(raw, low=low)
    if value is None:
        raise ClusterError(f"the environment variable {name}={raw[:40]!r} is not a whole number",
                           expected=f"{name} as {scheduler} sets it (ASCII digits), or unset")
    return value


def host_file_lines(path: str | None, what: str) -> list[str]:
    """Return the non-empty lines of a host file a scheduler wrote for the job (None or "": none), stripped;
    ClusterError for a file that cannot be read as one (too large, not text, not a regular file)."""
    if not path:
        return []
    text = read_record_text(path, what, MAX_HOST_FILE_BYTES, error=ClusterError)
    return [line.strip() for line in (text or "").splitlines() if line.strip()]


def checked_world(rank: int | None, world: int | None, rank_name: str, world_name: str,
                  environ: Mapping[str, str]) -> tuple[int, int]:
    """Return ``(rank, world)``; ClusterError when they describe no process of a run."""
    rank, world = int(rank or 0), int(world or 1)
    if world < 1 or not 0 <= rank < world:
        raise ClusterError(
            f"{rank_name}={environ.get(rank_name)!r} and {world_name}={environ.get(world_name)!r} do not describe "
            "a process of a run: the rank must be at least 0 and below the number of processes",
            expected=f"0 <= {rank_name} < {world_name}",
        )
    return rank, world


def max_requeues(environ: Mapping[str, str] | None = None) -> int:
    """Return how many requeues a job may ask for (``HPCR_MAX_REQUEUES``, default 5)."""
    value = outside_int(env_of(environ).get(MAX_REQUEUES_ENV, ""))
    return MAX_REQUEUES if value is None else value


def positive(name: str, raw: str) -> int | None:
    """``raw`` as a whole number >= 1, or None (with a warning) when a scheduler variable is malformed."""
    import warnings

    value = outside_int(raw, low=1)
    if value is not None:
        return value
    warnings.warn(f"{name}={raw!r} is not a whole number of CPUs; ignoring it", stacklevel=4)
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


@dataclass(frozen=True)
class RecordedJob:
    """What a run record says of the job that wrote it (run.yaml's ``scheduler:``), in our own words."""

    name: str = "none"  # the scheduler's name (``slurm``), ``none`` outside a job
    job_id: str | None = None  # as the scheduler's queue names it (``123_4`` for an array task)
    restarts: int = 0
    summary: list[tuple[str, str]] = field(default_factory=list)  # the ids, nodes and CPUs, as the scheduler named them

    @classmethod
    def from_record(cls, recorded: Mapping[str, Any] | None) -> RecordedJob:
        """Return run.yaml's ``scheduler:`` mapping (written by ``JobEnvironment.record``) as a RecordedJob."""
        rec = recorded if isinstance(recorded, Mapping) else {}
        restarts = outside_int(str(rec.get("restarts") or 0))
        summary = rec.get("summary") if isinstance(rec.get("summary"), Mapping) else {}
        return cls(str(rec.get("name") or "none"), str(rec["job_id"]) if rec.get("job_id") else None,
                   restarts or 0, [(str(k), str(v)) for k, v in summary.items()])


class JobEnvironment:
    """What the scheduler tells this process about its job; this class itself is the answer of no scheduler."""

    name: ClassVar[str] = "none"
    # the name of the scheduler's process that starts every task of a step (a parent of each task), None: none
    step_daemon: ClassVar[str | None] = None
    # the variable the launch address comes from (named in the rendezvous' notes)
    launch_address_name: ClassVar[str] = ""
    # the exit code that asks the scheduler to run the job again (Grid Engine: 99), None where requeue is a command
    requeue_exit_code: ClassVar[int | None] = None

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = environ

    @classmethod
    def activated(cls, environ: Mapping[str, str]) -> bool:
        """True when ``environ`` holds this scheduler's job variables (the base class: never, it is the fallback)."""
        return False

    @classmethod
    def recorded(cls, variables: Mapping[str, Any]) -> RecordedJob:
        """Return what an earlier version's record of this scheduler's variables says (run.yaml's old key)."""
        return RecordedJob(cls.name)

    @property
    def environ(self) -> Mapping[str, str]:
        """The mapping read: ``os.environ`` at the time of the question unless one was given."""
        return env_of(self._environ)

    # ---------------------------------------------------------------- ids

    def in_job(self) -> bool:
        """Return True inside a scheduler's job."""
        return False

    @property
    def job_id(self) -> str | None:
        """The id the scheduler's queue knows this job by (``123_4`` for an array task), None outside a job."""
        return None

    @property
    def own_number(self) -> str | None:
        """The job's own id (an array task's own job id, not ``123_4``), None outside a job."""
        return None

    def job_number(self) -> tuple[int, str] | None:
        """The job's id as a number and the variable that gave it (every rank reads the same), else None."""
        return None

    @property
    def array_job_id(self) -> str | None:
        """The array's job id of an array task, else None."""
        return None

    @property
    def array_task_id(self) -> str | None:
        """The index of an array task in its array, else None."""
        return None

    @property
    def restarts(self) -> int:
        """How many times the scheduler requeued (or rescheduled) this job."""
        return 0

    @property
    def end_time(self) -> float | None:
        """The job's end as epoch seconds when the environment says it, else None."""
        return None

    def time_left(self, now: float | None = None) -> float | None:
        """Return the seconds left before the job's end (never below 0), None when the end is not known."""
        end = self.end_time
        return None if end is None else max(0.0, end - (time.time() if now is None else now))

    def ask_end_time(self, job_id: str | None = None) -> float | None:
        """Return when the scheduler ends ``job_id`` (this job when None): the environment's word, else one call to
        the scheduler; None outside a job, without a limit or an answer."""
        return None

    def stop_margin_s(self, signal_delay_s: float | None) -> float:
        """Return how long before the job's end its work must be done: ``signal_delay_s`` plus how much earlier a
        scheduler may send its stop signal (a minute, unless a backend knows its own; also what the submitting
        side, outside any job, plans with)."""
        return max(0.0, float(signal_delay_s or 0)) + SIGNAL_EARLY_S

    # ---------------------------------------------------------------- what the job was granted

    def cpu_grant(self) -> tuple[int, str, str] | None:
        """The CPUs granted to this task as ``(count, the variable, detail)``, None when nobody says."""
        raw = self.environ.get(CPUS_GRANTED_ENV, "").strip()
        if raw and (value := positive(CPUS_GRANTED_ENV, raw)):
            return value, CPUS_GRANTED_ENV, f"{CPUS_GRANTED_ENV}={value}"
        return None

    def grant_cpus(self, count: int, environ: MutableMapping[str, str]) -> None:
        """Make ``count`` this process's CPU grant (a packed slot's share), as ``cpu_grant`` reads it."""
        environ[CPUS_GRANTED_ENV] = str(int(count))

    def gpu_grant(self) -> tuple[list[str], str] | None:
        """The GPU ids granted (the node's numbering) and the variable, None without a grant."""
        return None

    @property
    def memory_mb(self) -> int | None:
        """The memory granted on this node in MB, None when the scheduler says nothing."""
        return None

    @property
    def cpus(self) -> int | None:
        """The CPUs granted to this task, None when nobody says."""
        grant = self.cpu_grant()
        return None if grant is None else grant[0]

    @property
    def gpus(self) -> list[str]:
        """The GPU ids granted (the node's numbering), empty without a grant."""
        grant = self.gpu_grant()
        return [] if grant is None else grant[0]

    @property
    def global_rank(self) -> int:
        """This process's rank among all of the run's processes."""
        return self.launched_world()[0]

    @property
    def world_size(self) -> int:
        """How many processes the run has."""
        return self.launched_world()[1]

    @property
    def scratch_dir(self) -> str | None:
        """The job's node-local scratch folder the scheduler made (removed after the job), None without one."""
        return None

    # ---------------------------------------------------------------- nodes and ranks

    def node_list(self) -> tuple[str, str] | None:
        """The job's (or step's) node list as the scheduler writes it and the variable, None outside a job."""
        return None

    @property
    def nodes(self) -> list[str]:
        """The host names of the node list, expanded."""
        return []

    def first_node(self) -> tuple[str, str] | None:
        """The first host of the node list (where rank 0 runs) and the list's variable, None outside a job."""
        return None

    def node_name(self) -> str | None:
        """This node's name as the scheduler knows it, None outside a job."""
        return None

    def node_address(self, host: str) -> str | None:
        """The address the scheduler reaches ``host`` at, None where it cannot say."""
        return None

    @property
    def num_nodes(self) -> int:
        """How many nodes the run spans (torchrun's WORLD_SIZE / LOCAL_WORLD_SIZE here)."""
        world, local = env_int(self.environ, "WORLD_SIZE"), env_int(self.environ, "LOCAL_WORLD_SIZE")
        if world and local:
            return max(1, -(-world // local))
        return 1

    def launched_world(self) -> tuple[int, int]:
        """``(rank, world_size)`` this process was launched as (torchrun's RANK and WORLD_SIZE)."""
        environ = self.environ
        if "WORLD_SIZE" in environ and "RANK" in environ:
            rank, world = env_int(environ, "RANK", 0), env_int(environ, "WORLD_SIZE", 1)
            return checked_world(rank, world, "RANK", "WORLD_SIZE", environ)
        return 0, 1

    def launcher_without_torchrun(self) -> bool:
        """True for a task the scheduler's own launcher started as one of several, with no RANK from torchrun."""
        return False

    @property
    def local_rank(self) -> int:
        """This process's rank on its node: torchrun's LOCAL_RANK, else 0."""
        return int(env_int(self.environ, "LOCAL_RANK", 0) or 0)

    @property
    def node_rank(self) -> int:
        """The index of this process's node in the job: torchrun's GROUP_RANK, else 0."""
        return int(env_int(self.environ, "GROUP_RANK", 0) or 0)

    @property
    def step_id(self) -> str | None:
        """The id of the job step this process runs in, None outside a step."""
        return None

    def claim_names(self) -> tuple[str, ...]:
        """The variables that, set, say a run has several processes."""
        return ("RANK", "WORLD_SIZE")

    @property
    def launch_address(self) -> str | None:
        """The address of the host the job (step) was launched from, None where not said."""
        return None

    # ---------------------------------------------------------------- requeue

    def job_to_requeue(self) -> str | None:
        """The id of this job when it may ask to be requeued (inside a job, rank 0, under the bound), else None."""
        return None

    def requeue(self) -> str | None:
        """Ask the scheduler to requeue this job so it continues from its checkpoint; return its id when accepted.
        None outside a job, on a rank other than 0, past ``HPCR_MAX_REQUEUES``, when the scheduler refuses, or when
        the submission said this site refuses requeue (``HPCR_REQUEUE=resubmit``: the job is not asked again)."""
        if self.environ.get(REQUEUE_ENV) == RESUBMIT:
            print("hpc-runner: not requeued: the cluster check found this site refuses requeue; the job ends with its "
                  "checkpoint and is resubmitted (hpc-runner resume, or a sweep's --retry)", flush=True)
            return None
        if _IN_PROCESS:
            job = self.job_to_requeue()
            return job if job is not None and _IN_PROCESS[-1](job) else None
        return self._requeue()

    def _requeue(self) -> str | None:
        """The scheduler's own requeue of this job (its command), as ``requeue`` says."""
        return None

    # ---------------------------------------------------------------- the job's call (scheduler/job_call.py)

    def around_call(self, args_file: Path) -> contextlib.AbstractContextManager[None]:
        """What this backend does around the call a job runs (scheduler/job_call.py): nothing here."""
        return contextlib.nullcontext()

    def site_probes(self) -> dict[str, dict[str, Any]]:
        """What this scheduler's own job settings say, probed on the node for ``cluster check``
        (scheduler/site_check.py): name -> ``{"ok", "detail", ...}``; none by default."""
        return {}

    # ---------------------------------------------------------------- what a record keeps, what a child must not see

    def variables(self) -> dict[str, str]:
        """Every variable of this scheduler in the environment (what run.yaml keeps for people)."""
        return {}

    def job_variables(self) -> dict[str, str]:
        """The variables that make a process part of this job: a job submitted from inside must not inherit them."""
        return {}

    def summary(self) -> dict[str, str]:
        """The job's ids, nodes and CPUs, as the scheduler named them (the run page's table)."""
        return {}

    def log_files(self) -> dict[str, str]:
        """This job's own log files (``stdout``, ``stderr``) where the backend knows them, else empty."""
        return {}

    def record(self) -> dict[str, Any]:
        """What run.yaml records of the job (``scheduler:``): its scheduler, ids, restarts, nodes and variables."""
        nodes = self.node_list()
        grant = self.cpu_grant()
        return {"name": self.name, "job_id": self.job_id, "array_job_id": self.array_job_id,
                "array_task_id": self.array_task_id, "restarts": self.restarts,
                "nodes": nodes[0] if nodes else None, "cpus": grant[0] if grant else None,
                "summary": self.summary(), "variables": self.variables()}


NoScheduler = JobEnvironment  # the job side of a local run (no scheduler's variables present)

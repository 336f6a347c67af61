"""Where a submission's jobs run: one interface, a SLURM executor and a local one, chosen by the profile.

The sweep's logic (sweep/) and the commands ask an ``Executor`` to check resources, submit a group
of tasks, say what the scheduler knows, and cancel; they never ask which kind it is. The SLURM
executor submits through submitit (``scheduler/slurm/executor.py``); the local one
(``scheduler/local/executor.py``) runs the tasks here, in the foreground, after the caller has
recorded them (``run_pending``), so the same records and the same code paths serve both. Each
executor lives in its own folder and is listed once, in ``scheduler/select.py`` (``EXECUTORS``).

Besides the interface, this module holds what every executor answers in: ``SchedulerAnswer`` (each job's
``JobStatus`` and ``Usage``, in our own words: scheduler/job_status.py), ``SubmitLimits`` (how many more jobs may be
queued). A backend parses its own outputs into these; nothing above the scheduler reads a backend's fields.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from hpc_runner.errors import ClusterError
from hpc_runner.records.numbers import starts_with_digit
from hpc_runner.scheduler.job_logs import JobLogs
from hpc_runner.scheduler.job_status import Attempt, JobStatus, Usage
from hpc_runner.scheduler.profile import ClusterProfile, KeySpec
from hpc_runner.scheduler.site_findings import say_before_queueing

Log = Callable[[str], None]
LOCAL_JOB_ID = "local"  # the job id recorded for work the local executor runs


@dataclass
class SchedulerAnswer:
    """What the scheduler says about a set of jobs, read in one call (its accounting, else its queue).

    ``statuses`` is keyed by job id (array tasks ``123_4``), each a ``JobStatus`` in our own words; ``usage`` what
    each job used and was given; ``attempts`` each requeued job's runs, oldest first. ``words`` names, for people,
    what the backend asked for each source (``{"accounting": "sacct", "queue": "squeue"}``)."""

    statuses: dict[str, JobStatus]
    source: str  # job_state.FROM_ACCOUNTING, FROM_QUEUE or FROM_NOWHERE
    calls: int = 0
    error: str | None = None
    usage: dict[str, Usage] = field(default_factory=dict)
    attempts: dict[str, list[Attempt]] = field(default_factory=dict)  # per job id, oldest first
    at: str | None = None  # when the answer was read (local time, ISO)
    words: dict[str, str] = field(default_factory=dict)  # source -> what the backend calls it, for people

    def status(self, job_id: str | None) -> JobStatus | None:
        """Return the job's status, None when the scheduler said nothing of it."""
        return self.statuses.get(job_id) if job_id else None

    def requeues(self, job_id: str | None) -> int:
        """Return how many times the job was requeued (its attempts before the current one)."""
        status = self.status(job_id)
        return status.requeues if status is not None else 0

    def said(self, source: str | None = None) -> str:
        """Return what the backend calls ``source`` (this answer's when None), for people."""
        source = self.source if source is None else source
        return self.words.get(source, source)


@dataclass
class Limit:
    """One limit: its value, where it came from, and how many of the user's queued jobs it counts."""

    name: str  # e.g. MaxSubmitJobsPerUser
    source: str  # e.g. "QOS hpcr-limited (sacctmgr)"
    value: int
    queued: int = 0
    limits_submission: bool = True  # False for MaxJobs: jobs past it wait, sbatch accepts them
    # what it counts: each array task (SLURM's limits), or an array as ONE job (Grid Engine's max_u_jobs)
    counts_arrays: bool = False

    @property
    def free(self) -> int:
        """Return how many more jobs this limit lets the user submit."""
        return max(0, self.value - self.queued)

    def describe(self) -> str:
        """Return ``MaxSubmitJobsPerUser=50 of QOS hpcr-limited (sacctmgr), 50 queued``."""
        return f"{self.name}={self.value} of {self.source}, {self.queued} queued"


@dataclass
class SubmitLimits:
    """Every limit that applies to the user's next sbatch, and the free submit slots they leave."""

    user: str
    account: str | None = None
    qos: str | None = None
    limits: list[Limit] = field(default_factory=list)
    max_array_size: int = 1001
    max_array_source: str = "SLURM's default"
    notes: list[str] = field(default_factory=list)
    jobs: list[tuple[str, str, str]] = field(default_factory=list)  # the user's queued jobs: (id, account, qos)

    def recount(self, exclude: Collection[str] = ()) -> None:
        """Count, for each limit, the user's queued jobs it counts (leaving out ``exclude``)."""
        jobs = [j for j in self.jobs if j[0] not in exclude]
        for lim in self.limits:
            if lim.source.startswith("QOS"):
                lim.queued = sum(1 for _, _, q in jobs if q == self.qos)
            elif lim.source.startswith("association"):
                lim.queued = sum(1 for _, a, _ in jobs if a == self.account)
            else:
                lim.queued = len(jobs)

    def consume(self, n: int) -> None:
        """Count one array of ``n`` tasks just submitted (with this account and QOS) against every limit: ``n``
        where a limit counts tasks, 1 where it counts an array as one job."""
        for lim in self.limits:
            lim.queued += 1 if lim.counts_arrays else n

    @property
    def binding(self) -> Limit | None:
        """Return the submit limit with the fewest free slots (None: no submit limit is known)."""
        submit = [lim for lim in self.limits if lim.limits_submission]
        return min(submit, key=lambda lim: lim.free) if submit else None

    @property
    def free_slots(self) -> int | None:
        """Return how many jobs (array tasks) the user may still submit; None means no known limit. A limit that
        counts an array as one job bounds no task count while it has a free slot (the next array may be as large
        as ``max_array_size``), and is 0 once it has none."""
        bounds = [lim.free for lim in self.limits if lim.limits_submission and not (lim.counts_arrays and lim.free)]
        if bounds:
            return min(bounds)
        return None

    @property
    def known(self) -> bool:
        """True when at least one submit limit was read (else a refusal cannot be foreseen)."""
        return self.binding is not None

    def describe(self) -> str:
        """Return one line: the binding limit and its free slots, or why none is known."""
        b = self.binding
        if b is None:
            return "no submit limit known" + (f" ({'; '.join(self.notes)})" if self.notes else "")
        return f"{b.free} free submit slot(s): {b.describe()}"




@dataclass
class Job:
    """One submitted job (or array task): its id and log files; the local executor also keeps its outcome."""

    job_id: str
    stdout: Path | None = None
    stderr: Path | None = None
    logs: dict[str, str] = field(default_factory=dict)


@dataclass
class JobRequest:
    """What a group of jobs asks for, beyond the profile: a name, a log folder, a working dir and options."""

    job_name: str
    folder: Path
    chdir: str | None = None
    hold: bool = False
    array_parallelism: int | None = None
    exclude: str | None = None  # nodes these jobs must avoid (sbatch --exclude), besides the profile's own
    # SLURM's --dependency (``afterok:123``, ``afterany:123:124``; an array's id stands for all its tasks): the
    # jobs wait until it is met; one that can never be met is ended by the scheduler (kill-on-invalid-dep)
    dependency: str | None = None
    # what the job runs, in words a user reads in the script (it names the job's arguments file, or a pickle)
    describe: str | None = None


JOB_ENTRY = "hpcr_job_entry"  # the attribute that marks a function a job may run by name
# Every function a job may run by name, as ``module:function``: the job runner (scheduler/job_call.py)
# looks the name of an arguments file up here BEFORE importing anything, so a file in a shared folder can make
# it import none of hpc-runner's other modules, nor anyone else's; ``job_entry`` refuses a function not listed.
JOB_ENTRIES = frozenset({
    "hpc_runner.monai_cli.job:run_monai_command",
    "hpc_runner.pipeline.export_job:run_export_stage",
    "hpc_runner.pipeline.select_job:run_select_stage",
    "hpc_runner.scheduler.site_check:run_site_check",
    "hpc_runner.jobs.job:run_submitted",
    "hpc_runner.jobs.task:run_sweep_task",
    "hpc_runner.tune.worker:run_tune_worker",
})

F = TypeVar("F", bound=Callable[..., Any])


def job_entry_name(fn: Callable[..., Any]) -> str:
    """Return ``module:function`` of ``fn``, the name an arguments file gives it."""
    return f"{getattr(fn, '__module__', '')}:{getattr(fn, '__qualname__', '')}"


def job_entry(fn: F) -> F:
    """Mark ``fn`` as what a job (or an array's tasks) may run, named in a file of arguments
    (scheduler/job_arguments.py): a file in a shared folder can name only such a function, never other code.
    ``fn`` must be listed in ``JOB_ENTRIES`` (the job runner reads only that table before it imports)."""
    if job_entry_name(fn) not in JOB_ENTRIES:
        raise TypeError(f"{job_entry_name(fn)} is not listed in JOB_ENTRIES (scheduler/executor.py)")
    setattr(fn, JOB_ENTRY, True)
    return fn


def is_local_job(job_id: str | None) -> bool:
    """Return True for the job id of work the local executor ran (no scheduler knows it)."""
    return job_id == LOCAL_JOB_ID


def is_scheduler_job(job_id: str | None) -> bool:
    """Return True for a job id a scheduler gave (``123`` or an array task ``123_4``)."""
    return bool(job_id) and starts_with_digit(str(job_id))


def array_ids(job_ids: Iterable[str | None]) -> list[str]:
    """Return the distinct job ids to ask about (array tasks ``123_4`` -> ``123``), local runs left out."""
    return list(dict.fromkeys(j.split("_")[0] for j in job_ids if j and starts_with_digit(j)))


class Executor(ABC):
    """Submits groups of tasks, reports on them and cancels them, for one cluster profile."""

    kind: str = ""  # the profile's ``executor:`` value that selects this class (scheduler/select.py)
    runs_here: bool = False  # the tasks run in this process (the caller waits for them)
    # the scheduler's answers (limits, accounting) wait on its services: worth asking early, in a thread
    answers_wait: bool = False
    # the profile keys this executor understands besides profiles.COMMON_KEYS: key -> (types, what to say)
    profile_keys: ClassVar[Mapping[str, KeySpec]] = {}

    @classmethod
    def check_profile(cls, settings: Mapping[str, Any], where: str) -> None:
        """ClusterError for a value of one of ``profile_keys`` this executor could not use (types are checked
        already, by profiles.check_settings, which calls this for every executor listed)."""
        return None

    def __init__(self, profile: ClusterProfile) -> None:
        self.profile = profile

    @property
    def name(self) -> str:
        """Return the profile's name."""
        return self.profile.name

    def unreachable(self, timeout: float = 2.0) -> str | None:
        """Why this executor's scheduler cannot take a job from this machine now, said in its own words, within
        ``timeout`` seconds (None: it can, or there is nothing to ask)."""
        return None

    def no_gpu_hint(self) -> str | None:
        """When the jobs would get no GPU: how to ask for one, in this scheduler's words (None: they get GPUs, or
        the executor has none to give)."""
        return None

    def requested_gpus(self) -> int:
        """How many GPUs one task of this profile asks for on its node (0: none; what ``cluster check`` compares
        with the GPUs a job sees)."""
        return 0

    def check_site(self, say: Log | None = None) -> None:
        """Say, before queueing, each failed ``cluster check`` finding of this profile a submission depends on and
        the workaround it uses (one line each, on stderr); ClusterError where the job cannot work there."""
        import sys

        container = isinstance(self.profile.get("container"), Mapping) and bool(self.profile.get("container"))
        say_before_queueing(self.profile.settings, say or (lambda line: print(line, file=sys.stderr, flush=True)),
                            gpus=self.requested_gpus(), container=container, partition=self.profile.get("partition"))

    def submission_notes(self, settings: Mapping[str, Any] | None = None) -> list[str]:
        """Lines a dry run prints about what the jobs of ``settings`` (the profile's, with the command line's
        options, when None) would meet at this scheduler before they run, e.g. an account it requires that
        they do not name; by default none."""
        return []

    def describe_cluster(self, partition: str | None = None) -> list[tuple[str, Any, str]]:
        """Return the lines of a profile written from what the scheduler says (key, value, where it came from)."""
        raise ClusterError(f"the {self.kind} executor has no scheduler to ask for a profile",
                           expected="hpc-runner cluster init on a machine with a SLURM controller (a login node)")

    @abstractmethod
    def limits(self, fresh: bool = False) -> SubmitLimits:
        """Return the submit limits that apply now (and how many of the user's jobs count against them;
        ``fresh``: asked of the scheduler now, nothing it said a while ago)."""

    @abstractmethod
    def is_limit_refusal(self, message: str) -> bool:
        """True when a refused submission's ``message`` says a submit limit (or a busy scheduler) refused it: try
        again when a slot is free, the jobs are not wrong."""

    def queued_jobs(self, user: str) -> list[tuple[str, str, str]]:
        """Return ``user``'s jobs in the queue, one per array task: (job id, account, qos) (by default those
        ``limits`` counts: the current user's)."""
        return self.limits().jobs

    @abstractmethod
    def check_time(self) -> None:
        """UserError when the time limit leaves no room to run anything before the stop signal."""

    @abstractmethod
    def check_resources(self, request: JobRequest, count: int, what: str) -> None:
        """UserError when the scheduler could never start ``count`` such tasks (nothing is submitted)."""

    @abstractmethod
    def script(self, request: JobRequest, count: int) -> str | None:
        """Return the job script that would be submitted (``--dry-run``), None when there is none."""

    @abstractmethod
    def submit(self, fn: Callable[..., Any], argument_lists: Sequence[Sequence[Any]], request: JobRequest) -> list[Job]:
        """Submit ``len(argument_lists[0])`` tasks of ``fn`` as one group (an array); return their jobs."""

    @abstractmethod
    def query(self, job_ids: Sequence[str | None], since: str | None = None) -> SchedulerAnswer:
        """Return what the scheduler knows about the jobs (one call)."""

    @abstractmethod
    def still_queued(self, job_ids: Sequence[str]) -> set[str]:
        """Return the jobs still pending or running (all of them when the scheduler cannot tell)."""

    @abstractmethod
    def cancel(self, job_ids: Sequence[str]) -> list[str]:
        """Cancel the jobs (those this executor knows); return the ids asked to stop."""

    def run_pending(self, log: Log = print) -> int:
        """Run what ``submit`` queued here (local executor); return how many tasks failed."""
        return 0

    def set_dependency(self, job_ids: Sequence[str], dependency: str) -> list[str]:
        """Make queued jobs wait on ``dependency`` instead (a pending job only); return the ids changed."""
        return []

    def queue_states(self, job_ids: Sequence[str], timeout: float = 30) -> dict[str, str] | None:
        """Return the queue's state of each job still queued or running (array tasks one by one), None when the
        queue does not answer: the second look at jobs the accounting says ended but the scheduler may requeue."""
        return None

    def pending_reasons(self, job_ids: Sequence[str]) -> dict[str, str]:
        """Return why each of the jobs still pending waits (``Dependency``, ``DependencyNeverSatisfied``)."""
        return {}

    def job_logs(self, folder: Path) -> JobLogs:
        """Return where this executor's jobs under ``folder`` write their logs, and what its own daemons write there
        when they end a job (by default: no log files known, no verdicts)."""
        return JobLogs(folder)

    def follow(self, job_id: str, stdout: Path, stderr: Path, *, since: str | None = None) -> str:
        """Print the job's ``stdout``/``stderr`` as they grow until it ends (``submit --wait``); return its final
        state. ClusterError for an executor that cannot (its jobs run here, or nothing runs by itself)."""
        raise ClusterError(f"the {self.kind or type(self).__name__} executor cannot follow job {job_id}")


"""Where a submission's jobs run: one interface, a SLURM executor and a local one, chosen by the profile.

The sweep's logic (sweep/) and the commands ask an ``Executor`` to check resources, submit a group
of tasks, say what the scheduler knows, and cancel; they never ask which kind it is. The SLURM
executor submits through submitit (``scheduler/slurm_executor.py``); the local one
(``scheduler/local_executor.py``) runs the tasks here, in the foreground, after the caller has
recorded them (``run_pending``), so the same records and the same code paths serve both.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpc_runner.scheduler.accounting import SchedulerAnswer
from hpc_runner.scheduler.limits import SubmitLimits
from hpc_runner.scheduler.profiles import ClusterProfile

Log = Callable[[str], None]
LOCAL_JOB_ID = "local"  # the job id recorded for work the local executor runs


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


def is_local_job(job_id: str | None) -> bool:
    """Return True for the job id of work the local executor ran (no scheduler knows it)."""
    return job_id == LOCAL_JOB_ID


def is_scheduler_job(job_id: str | None) -> bool:
    """Return True for a job id a scheduler gave (``123`` or an array task ``123_4``)."""
    return bool(job_id) and str(job_id)[0].isdigit()


class Executor(ABC):
    """Submits groups of tasks, reports on them and cancels them, for one cluster profile."""

    kind: str = ""  # the profile's ``executor:`` value that selects this class (scheduler/select.py)
    runs_here: bool = False  # the tasks run in this process (the caller waits for them)

    def __init__(self, profile: ClusterProfile) -> None:
        self.profile = profile

    @property
    def name(self) -> str:
        """Return the profile's name."""
        return self.profile.name

    @abstractmethod
    def limits(self) -> SubmitLimits:
        """Return the submit limits that apply now (and how many of the user's jobs count against them)."""

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

    def pending_reasons(self, job_ids: Sequence[str]) -> dict[str, str]:
        """Return why each of the jobs still pending waits (``Dependency``, ``DependencyNeverSatisfied``)."""
        return {}


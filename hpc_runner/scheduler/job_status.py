"""What a scheduler says about a job, in our own words: ``JobState``, ``JobStatus`` and ``Usage``.

Each backend (``scheduler/<backend>/``) parses its own outputs (SLURM's sacct and squeue, Grid Engine's
``qstat -xml`` and ``qacct``, PBS's ``qstat -f``, LSF's ``bjobs``) into these types; nothing above the scheduler
layer reads a backend's field names, state words, log lines or files. A backend's raw words are kept in
``JobStatus.raw`` for display only: no decision is made from them.

The state names are the words hpc-runner's records, status tables and ``--retry``/``--cause`` rules already use
(``OUT_OF_MEMORY:mem*2``, ``NODE_FAIL``): our vocabulary, which SLURM happens to share for most of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from hpc_runner.errors import ClusterError
from hpc_runner.records.command_output import decode_output

MAX_ANSWER_CHARS = 64 << 20  # the most text one scheduler answer may hold (far above sacct of 100,000 jobs)


class JobState(str, Enum):
    """A job's state, the same for every backend."""

    PENDING = "PENDING"  # queued, held, or requeued and waiting again
    RUNNING = "RUNNING"  # started (or ending: completing, suspended, transferring)
    COMPLETED = "COMPLETED"  # ended with exit code 0
    FAILED = "FAILED"  # ended with a non-zero exit code, or could not start
    TIMEOUT = "TIMEOUT"  # killed at its time limit
    OUT_OF_MEMORY = "OUT_OF_MEMORY"  # killed over its memory request
    PREEMPTED = "PREEMPTED"  # stopped for another job
    NODE_FAIL = "NODE_FAIL"  # its node died under it
    CANCELLED = "CANCELLED"  # cancelled by a user or an administrator
    UNKNOWN = "UNKNOWN"  # the scheduler answered a word no backend table knows
    # an earlier attempt of a job that was requeued (``Attempt.state`` only: the job itself is PENDING again)
    REQUEUED = "REQUEUED"

    @property
    def final(self) -> bool:
        """True for a state after which the job never runs again."""
        return self not in (JobState.PENDING, JobState.RUNNING, JobState.UNKNOWN, JobState.REQUEUED)

    @property
    def failed(self) -> bool:
        """True for a final state whose work must be run again."""
        return self.final and self is not JobState.COMPLETED

    def __str__(self) -> str:
        return self.value


# the final states whose work must be run again (status, resume, --retry)
FAILED_STATES = frozenset(s.value for s in JobState if s.failed)


@dataclass(frozen=True)
class JobStatus:
    """One job's (or array task's) state as its scheduler reported it, parsed by the backend."""

    job_id: str  # array tasks as ``<array>_<task>``, for every backend
    state: JobState
    raw: str = ""  # the backend's own words, for display only ("CANCELLED by 0", "Eqw", "F")
    exit_code: int | None = None
    node: str | None = None  # where it ran last, None before it had a node
    elapsed_s: float | None = None
    requeues: int = 0  # how many times it was requeued (its earlier attempts)
    reason: str | None = None  # why it waits or why it ended, in the backend's words, for display
    signal: int | None = None  # the signal that ended it, where the scheduler says (None: it exited by itself)
    cancelled_by: str | None = None  # who cancelled it (a user name or a uid), where the scheduler says

    @property
    def exit_text(self) -> str | None:
        """The exit code for people: ``2``, ``0 (signal 15)``; None when the scheduler said none."""
        if self.exit_code is None:
            return None
        return f"{self.exit_code}" + (f" (signal {self.signal})" if self.signal else "")


@dataclass(frozen=True)
class Attempt:
    """One run of a job (a requeued job has several, oldest first): how it ended and where it ran."""

    state: str  # a JobState value (REQUEUED for an attempt that was requeued)
    node: str | None  # where it ran (the backend's host list, ``vm[1-2]``), None before it had nodes


@dataclass(frozen=True)
class Usage:
    """What one job used and was given; None where the scheduler did not record it."""

    elapsed_s: float | None = None
    time_limit_s: float | None = None
    cpu_time_s: float | None = None
    peak_memory_bytes: int | None = None
    memory_request_bytes: int | None = None
    cpus: int | None = None
    gpus: int | None = None
    # the GPUs' use where the scheduler's accounting gathers it (else the run dir's own samples tell)
    gpu_util: float | None = None  # mean utilisation, %
    gpu_util_max: float | None = None  # peak utilisation, %
    gpu_memory_bytes: float | None = None  # peak GPU memory

    @property
    def gpu_hours(self) -> float | None:
        """GPUs allocated x hours elapsed (None when either is unknown)."""
        if self.gpus is None or self.elapsed_s is None:
            return None
        return self.gpus * self.elapsed_s / 3600.0


@dataclass(frozen=True)
class Report:
    """One job's (or array task's) state and usage, as one answer of its scheduler gave them."""

    status: JobStatus
    usage: Usage = field(default_factory=Usage)
    attempts: tuple[Attempt, ...] = ()  # every run, oldest first, where the answer lists them (a requeued job)


def answer_text(answer: str | bytes, what: str, scheduler: str) -> str:
    """Return a scheduler's answer as text (bytes decoded with bad bytes replaced); ClusterError naming ``what``
    (``qstat's answer``) when it is no text or larger than ``MAX_ANSWER_CHARS``."""
    text = decode_output(answer) if isinstance(answer, bytes) else answer
    if not isinstance(text, str):
        raise ClusterError(f"{what} is not text", expected=f"{what} of {scheduler}")
    if len(text) > MAX_ANSWER_CHARS:
        raise ClusterError(f"{what} is larger than {MAX_ANSWER_CHARS >> 20} MiB", expected=f"{what} of {scheduler}")
    return text

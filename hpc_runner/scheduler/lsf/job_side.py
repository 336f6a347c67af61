"""What LSF tells a job about itself (its ``LSB_*`` variables), read in one place, and how a job asks to be
run again.

Active when ``LSB_JOBID`` is set. Read: ``LSB_JOBID``, ``LSB_JOBINDEX`` (the element's index, 0 outside an
array; our task is the index - 1), ``LSB_DJOB_HOSTFILE`` (a file, one line per slot) or else ``LSB_HOSTS`` (the
same list, space-separated; LSF leaves it out for very large jobs), ``LSB_DJOB_NUMPROC`` (slots), ``TMPDIR``
(the job's scratch folder LSF makes), ``LSB_JOBNAME``, ``LSB_QUEUE``.

Requeue: the job exits with ``REQUEUE_EXIT`` (99), which its ``-Q "99"`` line makes LSF requeue (job-level
REQUEUE_EXIT_VALUES; IBM: "Configuring job-level automatic re-queuing"). ``brequeue <id>`` does the same from
outside; from inside the job it would kill the process asking, so the exit value is the job side's way.
LSF sets no variable with the number of earlier runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from hpc_runner.errors import ClusterError
from hpc_runner.scheduler.job_environment import host_file_lines, scheduler_int
from hpc_runner.scheduler.lsf.answers import our_job_id
from hpc_runner.scheduler.lsf.settings import REQUEUE_EXIT


def activated(environ: Mapping[str, str]) -> bool:
    """True inside an LSF job."""
    return bool(environ.get("LSB_JOBID"))


@dataclass(frozen=True)
class LsfJob:
    """This job as LSF describes it, in our words."""

    job_id: str  # ours: 1234, or 1234_0 for element [1]
    native_id: str  # 1234 or 1234[1], what brequeue and bjobs take
    array_task: int | None
    slots: int | None
    nodes: tuple[str, ...]  # each host once, in order
    scratch: Path | None
    name: str | None
    queue: str | None


def _int(environ: Mapping[str, str], name: str) -> int | None:
    return scheduler_int(environ, name, "LSF")


def _hosts(environ: Mapping[str, str]) -> list[str]:
    """The slots' hosts: ``LSB_DJOB_HOSTFILE``'s lines, else ``LSB_HOSTS``' words."""
    return host_file_lines(environ.get("LSB_DJOB_HOSTFILE"), "LSF host file") or environ.get("LSB_HOSTS", "").split()


def this_job(environ: Mapping[str, str]) -> LsfJob | None:
    """Return this job from its variables (None outside LSF); ClusterError for a garbled id or number."""
    if not activated(environ):
        return None
    index = _int(environ, "LSB_JOBINDEX") or 0
    ours = our_job_id(environ["LSB_JOBID"], str(index))
    if ours is None:
        raise ClusterError(f"LSB_JOBID={environ['LSB_JOBID'][:60]!r} is not an LSF job id", expected="ASCII digits")
    number = ours.partition("_")[0]
    scratch = environ.get("TMPDIR")
    return LsfJob(job_id=ours, native_id=f"{number}[{index}]" if index else number,
                  array_task=index - 1 if index else None, slots=_int(environ, "LSB_DJOB_NUMPROC"),
                  nodes=tuple(dict.fromkeys(_hosts(environ))), scratch=Path(scratch) if scratch else None,
                  name=environ.get("LSB_JOBNAME") or None, queue=environ.get("LSB_QUEUE") or None)


def requeue_exit_status() -> int:
    """The exit status that asks LSF to requeue this job (its script's ``-Q`` line)."""
    return REQUEUE_EXIT


def requeue_argv(job: LsfJob) -> list[str]:
    """``brequeue`` of this job, for a caller outside it (it kills and requeues a running job)."""
    return ["brequeue", job.native_id]

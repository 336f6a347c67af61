"""What PBS tells a job about itself (its ``PBS_*`` variables), read in one place, and how a job asks to be
run again.

Active when ``PBS_JOBID`` is set (as submitit's ``activated()`` chooses a job environment). Read:
``PBS_JOBID`` (``1234.server``, ``1234[3].server`` for a subjob), ``PBS_ARRAY_INDEX`` (the subjob's index: our
task), ``PBS_NODEFILE`` (a file, one line per MPI process: the hosts), ``NCPUS`` (the first chunk's ncpus),
``TMPDIR`` (the job's own scratch folder, which PBS makes and removes), ``PBS_JOBNAME``, ``PBS_QUEUE``.

Requeue: ``qrerun <id>`` puts a rerunnable (``-r y``) job back in the queue. Altair's guide gives qrerun to
operators and managers only; where a site has not granted it to users, qrerun refuses, ``requeue_current_job``
says False and the job ends as failed: its checkpoint stays for ``resume``. PBS has no exit code that asks for
a rerun (Grid Engine's 99, LSF's ``-Q``), and no variable for the run count (qstat's ``run_count``).
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from hpc_runner.errors import ClusterError
from hpc_runner.records.command_output import run_command
from hpc_runner.scheduler.job_environment import host_file_lines, scheduler_int
from hpc_runner.scheduler.pbs.answers import our_job_id


def activated(environ: Mapping[str, str]) -> bool:
    """True inside a PBS job (its batch script or a process it started)."""
    return bool(environ.get("PBS_JOBID"))


@dataclass(frozen=True)
class PbsJob:
    """This job as PBS describes it, in our words."""

    job_id: str  # ours: 1234, or 1234_3 for subjob 3
    native_id: str  # PBS_JOBID, what qrerun and qstat take
    array_task: int | None
    cpus: int | None
    nodes: tuple[str, ...]  # each host once, in the node file's order
    processes: int | None  # lines of the node file (MPI processes)
    scratch: Path | None
    name: str | None
    queue: str | None


def _int(environ: Mapping[str, str], name: str) -> int | None:
    return scheduler_int(environ, name, "PBS")


def this_job(environ: Mapping[str, str]) -> PbsJob | None:
    """Return this job from its variables (None outside PBS); ClusterError for a garbled id or number."""
    if not activated(environ):
        return None
    native = environ["PBS_JOBID"].strip()
    ours = our_job_id(native)
    if ours is None:
        raise ClusterError(f"PBS_JOBID={native[:60]!r} is not a PBS job id", expected="1234.server or 1234[3].server")
    hosts = host_file_lines(environ.get("PBS_NODEFILE"), "PBS node file")
    scratch = environ.get("TMPDIR")
    return PbsJob(job_id=ours, native_id=native, array_task=_int(environ, "PBS_ARRAY_INDEX"),
                  cpus=_int(environ, "NCPUS"), nodes=tuple(dict.fromkeys(hosts)), processes=len(hosts) or None,
                  scratch=Path(scratch) if scratch else None, name=environ.get("PBS_JOBNAME") or None,
                  queue=environ.get("PBS_QUEUE") or None)


def requeue_argv(job: PbsJob) -> list[str]:
    return ["qrerun", job.native_id]


def requeue_current_job(environ: Mapping[str, str]) -> bool:
    """Ask PBS to rerun this job (``qrerun``); True when PBS accepted, False when refused or outside PBS."""
    job = this_job(environ)
    if job is None:
        return False
    try:
        return run_command(requeue_argv(job), timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False

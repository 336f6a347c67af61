"""Where a SLURM job's logs are (submitit's ``JobPaths``) and what slurmstepd and srun write there when they end a
job, read as our own states (scheduler/job_logs.py ``JobLogs``)."""

from __future__ import annotations

import re
from pathlib import Path

from hpc_runner.scheduler.job_logs import JobLogs
from hpc_runner.scheduler.job_status import JobState

# slurmstepd's own lines, searched first: a step killed for its memory (by polling, OverMemoryKill: "Exceeded job
# memory limit", or by the cgroup), then its "*** JOB 12 ON n1 CANCELLED AT ... ***"; it names itself
# slurmstepd-<node> where one machine runs several slurmd
VERDICTS = (
    re.compile(r"^slurmstepd(-\S+)?: error: (Exceeded job memory limit|Detected \d+ oom-kill event)"),
    re.compile(r"^slurmstepd(-\S+)?: error: \*\*\*"),
)
# the words in such a line (or in srun's) that say why the job ended
MARKERS = (
    ("DUE TO TIME LIMIT", JobState.TIMEOUT),
    ("DUE TO PREEMPTION", JobState.PREEMPTED),
    ("DUE TO NODE FAILURE", JobState.NODE_FAIL),
    ("oom-kill", JobState.OUT_OF_MEMORY),
    ("Exceeded job memory limit", JobState.OUT_OF_MEMORY),
    ("task 0: Out Of Memory", JobState.OUT_OF_MEMORY),  # srun's line for a step the memory cgroup killed
)


def log_files(folder: Path, job_id: str) -> list[Path]:
    """Return submitit's stderr and stdout files of ``job_id`` under ``folder`` (``%j``/``%A`` still in it)."""
    from submitit.core.utils import JobPaths

    paths = JobPaths(folder, job_id=job_id)
    return [paths.stderr, paths.stdout]


def slurm_job_logs(folder: Path) -> JobLogs:
    """Return the ``JobLogs`` of SLURM jobs under ``folder``."""
    return JobLogs(folder, log_files, VERDICTS, MARKERS)

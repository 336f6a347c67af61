"""When SLURM ends a job, and how early its stop signal may come (the job side's clock: scheduler/job_clock.py).

A job asks SLURM once for its end time (``SLURM_JOB_END_TIME`` where SLURM sets it, else
``squeue -h -j ID -o %e``, else ``scontrol show job -o ID``); ``job_env.job_end_time`` is the neutral
question. The stop margin is the profile's ``signal_delay_s`` plus ``SIGNAL_EARLY_S``: SLURM sends the stop
signal that long before the end, or up to 60 s earlier (its time-limit check runs every 30 s; SLURM's
sbatch manual says "up to 60 seconds"; on the local cluster a 20 s delay came 28 s before the end), and
a point started after it would only be stopped again.

The trainer's timed checkpoint measures against the end of the job it runs in (``training_job_end``).
"""

from __future__ import annotations

import datetime as _dt
import subprocess
from collections.abc import Callable, Mapping

from hpc_runner.records.command_output import run_command
from hpc_runner.scheduler.slurm.variables import end_time, own_job_id

UNKNOWN_TIMES = ("", "unknown", "n/a", "none", "invalid")
SIGNAL_EARLY_S = 60.0  # how much earlier than --signal=USR2@N SLURM may send it (sbatch(1), --signal)


def stop_margin_s(signal_delay_s: float | None) -> float:
    """Return how long before the job's end a point must be done: the signal delay plus SLURM's slack."""
    return max(0.0, float(signal_delay_s or 0)) + SIGNAL_EARLY_S


def parse_slurm_time(text: str | None) -> float | None:
    """Return a SLURM timestamp (``2026-11-23T17:05:00``, local time) as epoch seconds, None if unknown."""
    text = (text or "").strip()
    if text.lower() in UNKNOWN_TIMES:
        return None
    try:
        return _dt.datetime.fromisoformat(text).timestamp()  # naive: the controller's (= the node's) local time
    except ValueError:
        return None


def _end_from_scontrol(line: str) -> float | None:
    for word in line.split():
        key, _, value = word.partition("=")
        if key == "EndTime":
            return parse_slurm_time(value)
    return None


Runner = Callable[[list[str]], str]


def _run(cmd: list[str]) -> str:
    res = run_command(cmd, timeout=20)
    return res.stdout if res.returncode == 0 else ""


def job_end_time(job_id: str | None, environ: Mapping[str, str] | None = None, run: Runner = _run) -> float | None:
    """Return the epoch second at which SLURM ends this job, or None (no job, no limit, or no answer)."""
    known = end_time(environ)  # SLURM >= 23.02 sets it: no call needed
    if known is not None:
        return known
    if not job_id:
        return None
    try:
        end = parse_slurm_time(run(["squeue", "-h", "-j", job_id, "-o", "%e"]).strip().splitlines()[0])
    except (OSError, subprocess.SubprocessError, IndexError):
        end = None
    if end is not None:
        return end
    try:
        return _end_from_scontrol(run(["scontrol", "show", "job", "-o", job_id]))
    except (OSError, subprocess.SubprocessError):
        return None


def training_job_end(environ: Mapping[str, str] | None = None, run: Runner = _run) -> float | None:
    """Return the end of the job this training runs in (``SLURM_JOB_END_TIME``, else one squeue call), None
    outside a job: what the trainer's timed checkpoint measures against."""
    known = end_time(environ)
    if known is not None:
        return known
    job = own_job_id(environ)
    return job_end_time(job, environ, run) if job else None

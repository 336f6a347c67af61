"""PBS's commands as argv lists (no shell), and the one place they are run: submit, states, cancel.

Each is run by scheduler/client_command.py (bounded, decoded with bad bytes replaced) and its answer parsed by
answers.py. Nothing here is run on this machine's tests: tests/scheduler/test_pbs_lsf.py puts stand-ins
that print the golden answers on PATH.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hpc_runner.errors import ClusterError
from hpc_runner.scheduler.client_command import client_answer
from hpc_runner.scheduler.pbs.answers import PBS_JOB_ID, Report, Submitted, parse_submission, reports_from_qstat

CLIENT = "a PBS client"


def _native(job_id: str) -> str:
    """PBS's name for our id: ``1234_3`` -> ``1234[3]``; ``1234`` stays (qstat and qdel add the server)."""
    head, sep, task = str(job_id).partition("_")
    native = f"{head}[{task}]" if sep else head
    if not PBS_JOB_ID.fullmatch(native):
        raise ClusterError(f"{str(job_id)[:60]!r} is not a PBS job id", expected="1234, 1234_3 or 1234.server")
    return native


def submit_argv(script: Path) -> list[str]:
    return ["qsub", str(script)]


def status_argv(native_ids: Sequence[str]) -> list[str]:
    """qstat of jobs and finished ones (-x), each subjob of an array (-t), as JSON (-f -F json)."""
    return ["qstat", "-f", "-F", "json", "-x", "-t", *native_ids]


def cancel_argv(job_ids: Sequence[str]) -> list[str]:
    """qdel of our ids; an array's id is written ``1234[]`` by the caller's Submitted.native_id, or ours."""
    return ["qdel", *(_native(j) for j in job_ids)]


def submit(script: Path) -> Submitted:
    return parse_submission(client_answer(submit_argv(script), CLIENT))


def job_reports(native_ids: Sequence[str]) -> dict[str, Report]:
    """The reports of these jobs (with each array's subjobs) in one qstat call; qstat exits non-zero when one id
    is unknown yet prints the others, so its stdout is parsed whatever its exit status."""
    if not native_ids:
        return {}
    return reports_from_qstat(client_answer(status_argv(native_ids), CLIENT))


def cancel(job_ids: Sequence[str]) -> None:
    if job_ids:
        client_answer(cancel_argv(job_ids), CLIENT)

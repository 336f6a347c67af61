"""LSF's commands as argv lists (no shell), and the one place they are run: submit, states, cancel.

Each is run by scheduler/client_command.py (bounded, decoded with bad bytes replaced) and its answer parsed by
answers.py. Nothing here is run on this machine's tests: tests/scheduler/test_pbs_lsf.py puts stand-ins
that print the golden answers on PATH.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hpc_runner.errors import ClusterError
from hpc_runner.records.numbers import outside_int
from hpc_runner.records.read import read_record_text
from hpc_runner.scheduler.client_command import client_answer
from hpc_runner.scheduler.lsf.answers import (
    FIELDS,
    FIRST_INDEX,
    Report,
    Submitted,
    parse_submission,
    reports_from_bjobs,
)

CLIENT = "an LSF client"
MAX_SCRIPT_BYTES = 1 << 20


def native_id(job_id: str) -> str:
    """LSF's name for our id: ``1234_0`` -> ``1234[1]``; ``1234`` stays (a job, or a whole array)."""
    head, sep, task = str(job_id).partition("_")
    number, index = outside_int(head), outside_int(task) if sep else None
    if number is None or (sep and index is None):
        raise ClusterError(f"{str(job_id)[:60]!r} is not an LSF job id", expected="1234 or 1234_0")
    return f"{number}[{index + FIRST_INDEX}]" if index is not None else str(number)


def submit_argv() -> list[str]:
    """bsub reads the script's #BSUB lines from its standard input (``bsub < job.sh``)."""
    return ["bsub"]


def status_argv(native_ids: Sequence[str]) -> list[str]:
    """bjobs of these jobs in every state (-a), the fields answers.py reads, as JSON."""
    return ["bjobs", "-a", "-json", "-o", " ".join(FIELDS), *native_ids]


def cancel_argv(job_ids: Sequence[str]) -> list[str]:
    return ["bkill", *(native_id(j) for j in job_ids)]


def submit(script: Path) -> Submitted:
    text = read_record_text(script, "job script", MAX_SCRIPT_BYTES, error=ClusterError)
    if text is None:
        raise ClusterError("the job script is missing", where=str(script))
    return parse_submission(client_answer(submit_argv(), CLIENT, stdin=text))


def job_reports(native_ids: Sequence[str]) -> dict[str, Report]:
    """The reports of these jobs (each array's elements listed by bjobs) in one bjobs call."""
    if not native_ids:
        return {}
    return reports_from_bjobs(client_answer(status_argv(native_ids), CLIENT))


def cancel(job_ids: Sequence[str]) -> None:
    if job_ids:
        client_answer(cancel_argv(job_ids), CLIENT)

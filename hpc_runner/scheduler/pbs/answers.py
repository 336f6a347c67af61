"""What PBS answers, in our words: ``qsub``'s job id, and ``qstat -f -F json -x -t``'s jobs as ``JobStatus``
and ``Usage``.

An answer is someone else's text: it is bounded (job_status.py ``answer_text``), parsed with its nesting bounded
(records.read.parse_json_text), every number read by records.numbers, and a field of the wrong kind (a string
for ``Exit_status``, a list for ``resources_used``) is treated as absent. A job whose state word no table here
knows is ``UNKNOWN``, never a guess; an answer that is not PBS's at all is a ClusterError (exit 2).

Our ids: ``1234`` for a job or a whole array (``1234.server``, ``1234[].server``), ``1234_3`` for subjob 3
(``1234[3].server``); the server's name is dropped (one default server is assumed, as qstat and qdel assume it).

States (PBS Professional Reference Guide, "Job States"; OpenPBS src/include/job.h for the exit codes):

==========================  ==========================================================================
``Q`` ``H`` ``W`` ``T`` ``M``  PENDING (queued, held, waiting for its start time, in transit, moved)
``R`` ``E`` ``B`` ``S`` ``U``  RUNNING (running, exiting, an array begun, suspended)
``F`` ``X`` (finished)         by ``Exit_status``: 0 COMPLETED; -29 walltime and -28 cput TIMEOUT;
                               -27 mem and -26 vmem OUT_OF_MEMORY; -20 (mother superior lost)
                               NODE_FAIL; 256 and above (killed by signal N-256: qdel) CANCELLED;
                               absent (it never ran: qdel of a queued job, an afterok never met)
                               CANCELLED; anything else FAILED
==========================  ==========================================================================
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from hpc_runner.errors import ClusterError
from hpc_runner.records.numbers import outside_int
from hpc_runner.records.read import parse_json_text
from hpc_runner.scheduler.job_status import JobState, JobStatus, Report, Usage, answer_text
from hpc_runner.scheduler.units import parse_duration_s

# a job id as qsub prints it: sequence number, [] for an array or [N] for a subjob, then .server
PBS_JOB_ID = re.compile(r"([0-9]{1,18})(\[([0-9]{0,9})\])?(\.[A-Za-z0-9_-][A-Za-z0-9_.-]{0,254})?")

PENDING_WORDS = frozenset("QHWTM")
RUNNING_WORDS = frozenset("REBSU")
FINISHED_WORDS = frozenset("FX")
# Exit_status values PBS sets itself (OpenPBS src/include/job.h, JOB_EXEC_*)
EXIT_STATES = {
    -29: JobState.TIMEOUT,  # JOB_EXEC_KILL_WALLTIME
    -28: JobState.TIMEOUT,  # JOB_EXEC_KILL_CPUT
    -27: JobState.OUT_OF_MEMORY,  # JOB_EXEC_KILL_MEM
    -26: JobState.OUT_OF_MEMORY,  # JOB_EXEC_KILL_VMEM
    -20: JobState.NODE_FAIL,  # JOB_EXEC_RERUN_MS_FAIL: the mother superior's connection failed
}
SIGNAL_BASE = 256  # Exit_status of a job killed by signal N is 256 + N


@dataclass(frozen=True)
class Submitted:
    """A job qsub accepted: our id and the id PBS printed (what qdel, qstat and depend= take)."""

    job_id: str
    native_id: str
    array: bool


def _text(answer: str | bytes, what: str) -> str:
    return answer_text(answer, what, "PBS")


def our_job_id(native: str) -> str | None:
    """Return our id for a PBS id (``1234[3].server`` -> ``1234_3``; ``1234[].server`` -> ``1234``), or None."""
    m = PBS_JOB_ID.fullmatch(native.strip()) if isinstance(native, str) else None
    if m is None:
        return None
    return f"{m.group(1)}_{int(m.group(3))}" if m.group(3) else m.group(1)


def parse_submission(answer: str | bytes) -> Submitted:
    """Return the job ``qsub`` printed (its last line: ``1234.server``, ``1234[].server`` for an array);
    ClusterError quoting the answer when it holds none."""
    text = _text(answer, "qsub's answer")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    m = PBS_JOB_ID.fullmatch(last)
    if m is None or m.group(3):  # qsub never answers with a subjob
        raise ClusterError(f"qsub answered {text[:200]!r}, which names no job",
                           expected="qsub's answer: a job id such as 1234.server")
    return Submitted(job_id=m.group(1), native_id=last, array=m.group(2) is not None)


def _int(value: Any) -> int | None:
    """An integer field: a JSON int (not a bool) or ASCII digits with an optional '-'; else None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value if abs(value) < 1 << 63 else None
    if isinstance(value, str):
        sign = -1 if value.strip().startswith("-") else 1
        number = outside_int(value.strip().removeprefix("-"))
        return None if number is None else sign * number
    return None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


_SIZE = re.compile(r"([0-9]{1,18})(b|kb|mb|gb|tb|pb)?", re.I)
_FACTORS = {"b": 1, "kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30, "tb": 1 << 40, "pb": 1 << 50}


def pbs_size_bytes(value: Any) -> int | None:
    """Return a PBS size (``3836kb``, ``4gb``, ``512``: bytes) in bytes; None for anything else (words too)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    m = _SIZE.fullmatch(value.strip()) if isinstance(value, str) else None
    if m is None:
        return None
    return int(m.group(1)) * _FACTORS[(m.group(2) or "b").lower()]


def _seconds(value: Any) -> float | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return parse_duration_s(value) if isinstance(value, str) else None


def finished_state(exit_status: int | None) -> JobState:
    """Return the state of a finished job (``F``, or an array's ``X`` subjob) from its ``Exit_status``."""
    if exit_status is None:
        return JobState.CANCELLED  # it never ran: deleted while queued, or its dependency was never met
    if exit_status == 0:
        return JobState.COMPLETED
    if exit_status >= SIGNAL_BASE:
        return JobState.CANCELLED  # killed by a signal PBS sent (qdel); psij-python reads 265 the same way
    return EXIT_STATES.get(exit_status, JobState.FAILED)


def state_of(word: str, exit_status: int | None) -> JobState:
    """Return our state for qstat's ``job_state`` letter (and ``Exit_status`` once finished)."""
    if word in PENDING_WORDS:
        return JobState.PENDING
    if word in RUNNING_WORDS:
        return JobState.RUNNING
    if word in FINISHED_WORDS:
        return finished_state(exit_status)
    return JobState.UNKNOWN


def _report(job_id: str, job: dict[str, Any]) -> Report:
    word = _str(job.get("job_state")) or ""
    exit_status = _int(job.get("Exit_status"))
    state = state_of(word if len(word) == 1 else "", exit_status)
    if exit_status is None and "Exit_status" in job and state.final:
        state = JobState.UNKNOWN  # an Exit_status it cannot read is not "it never ran"
    used = job.get("resources_used") if isinstance(job.get("resources_used"), dict) else {}
    asked = job.get("Resource_List") if isinstance(job.get("Resource_List"), dict) else {}
    host = _str(job.get("exec_host"))
    node = re.split(r"[/+]", host, maxsplit=1)[0] or None if host else None
    runs = _int(job.get("run_count"))
    elapsed = _seconds(used.get("walltime"))
    status = JobStatus(job_id=job_id, state=state, raw=word[:20], exit_code=exit_status, node=node,
                       elapsed_s=elapsed, requeues=max(0, runs - 1) if runs else 0,
                       reason=(_str(job.get("comment")) or None))
    ncpus, ngpus = _int(used.get("ncpus")), _int(asked.get("ngpus"))
    usage = Usage(elapsed_s=elapsed, time_limit_s=_seconds(asked.get("walltime")),
                  cpu_time_s=_seconds(used.get("cput")), peak_memory_bytes=pbs_size_bytes(used.get("mem")),
                  memory_request_bytes=pbs_size_bytes(asked.get("mem")),
                  cpus=ncpus if ncpus is not None else _int(asked.get("ncpus")), gpus=ngpus)
    return Report(status, usage)


def reports_from_qstat(answer: str | bytes) -> dict[str, Report]:
    """Return each job's ``Report`` from ``qstat -f -F json -x -t`` (keyed by our ids); ClusterError when the
    answer is not qstat's JSON. A job entry that is not an object is left out; odd fields read as absent."""
    text = _text(answer, "qstat's answer")
    if not text.strip():
        return {}
    data = parse_json_text(text, "qstat -f -F json", "qstat's answer", error=ClusterError)
    jobs = data.get("Jobs") if isinstance(data, dict) else None
    if jobs is None and isinstance(data, dict) and "timestamp" in data:
        return {}  # qstat prints no "Jobs" when it knows none of them
    if not isinstance(jobs, dict):
        raise ClusterError("qstat's answer holds no \"Jobs\" object", expected="the JSON of qstat -f -F json")
    reports = {}
    for native, job in jobs.items():
        ours = our_job_id(native)
        if ours is not None and isinstance(job, dict):
            reports[ours] = _report(ours, job)
    return reports

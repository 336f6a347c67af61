"""What LSF answers, in our words: ``bsub``'s job id, and ``bjobs -a -json -o "<FIELDS>"``'s records as
``JobStatus`` and ``Usage``.

An answer is someone else's text: bounded (job_status.py ``answer_text``), parsed with its nesting bounded
(records.read.parse_json_text), each number read by records.numbers or an anchored ASCII pattern; a field of the
wrong kind reads as absent, a ``STAT`` no table here knows is ``UNKNOWN``, a record with ``ERROR`` (a job bjobs no
longer knows) is left out, and an answer that is not bjobs' JSON is a ClusterError (exit 2).

Our ids: ``1234`` for a job or a whole array, ``1234_0`` for element ``1234[1]``: LSF's indices start at 1,
our task numbers at 0 (as SLURM's and PBS's do here), and this module and job_script.py are the only places that
convert.

States (IBM Spectrum LSF 10.1, bjobs "Job states"; exit reasons from lsbatch.h's TERM_* list):

============================  ========================================================================
PEND PSUSP WAIT PROV          PENDING (waiting; suspended while pending; a chunk job waiting; provisioning)
RUN USUSP SSUSP UNKWN ZOMBI   RUNNING (suspended counts as started; UNKWN: the host is out of touch)
DONE                          COMPLETED
EXIT                          by ``EXIT_REASON``: TERM_RUNLIMIT, TERM_CPULIMIT, TERM_DEADLINE TIMEOUT;
                              TERM_MEMLIMIT, TERM_SWAP OUT_OF_MEMORY; TERM_PREEMPT PREEMPTED;
                              TERM_OWNER, TERM_ADMIN, TERM_FORCE_OWNER, TERM_FORCE_ADMIN,
                              TERM_REMOVE_HUNG_JOB CANCELLED; anything else (or none) FAILED
============================  ========================================================================
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from hpc_runner.errors import ClusterError
from hpc_runner.records.numbers import outside_int
from hpc_runner.records.read import parse_json_text
from hpc_runner.scheduler.job_status import JobState, JobStatus, Report, Usage, answer_text

FIRST_INDEX = 1  # LSF's first array index; our task = index - FIRST_INDEX
# the fields asked of bjobs -o (their JSON keys are the same words in capitals)
FIELDS = ("jobid", "jobindex", "stat", "exit_code", "exit_reason", "exec_host", "run_time", "cpu_used", "max_mem",
          "memlimit", "runtimelimit", "nalloc_slot", "gpu_num", "pend_reason")
STATES = {
    "PEND": JobState.PENDING, "PSUSP": JobState.PENDING, "WAIT": JobState.PENDING, "PROV": JobState.PENDING,
    "RUN": JobState.RUNNING, "USUSP": JobState.RUNNING, "SSUSP": JobState.RUNNING, "UNKWN": JobState.RUNNING,
    "ZOMBI": JobState.RUNNING, "DONE": JobState.COMPLETED, "EXIT": JobState.FAILED,
}
EXIT_REASONS = {
    "TERM_RUNLIMIT": JobState.TIMEOUT, "TERM_CPULIMIT": JobState.TIMEOUT, "TERM_DEADLINE": JobState.TIMEOUT,
    "TERM_MEMLIMIT": JobState.OUT_OF_MEMORY, "TERM_SWAP": JobState.OUT_OF_MEMORY,
    "TERM_PREEMPT": JobState.PREEMPTED,
    "TERM_OWNER": JobState.CANCELLED, "TERM_ADMIN": JobState.CANCELLED, "TERM_FORCE_OWNER": JobState.CANCELLED,
    "TERM_FORCE_ADMIN": JobState.CANCELLED, "TERM_REMOVE_HUNG_JOB": JobState.CANCELLED,
}
# the same reasons as bjobs may spell them without the TERM_ word (its descriptive text)
_REASON_WORDS = (("run time limit", JobState.TIMEOUT), ("cpu time limit", JobState.TIMEOUT),
                 ("memory usage limit", JobState.OUT_OF_MEMORY), ("preempt", JobState.PREEMPTED),
                 ("killed by owner", JobState.CANCELLED), ("killed by root or lsf administrator", JobState.CANCELLED))
_SUBMITTED = re.compile(r"Job <([0-9]{1,18})> is submitted to (?:default )?queue <([A-Za-z0-9_.+-]{1,64})>")
_TERM = re.compile(r"\bTERM_[A-Z_]{1,40}\b")
_NUMBER = r"([0-9]{1,15}(?:\.[0-9]{1,9})?)"
_SECONDS = re.compile(rf"{_NUMBER}\s*second\(s\)")
_MINUTES = re.compile(rf"{_NUMBER}\s*(?:min(?:ute)?s?)?(?:/[A-Za-z0-9_.-]{{1,64}})?")
_MEMORY = re.compile(rf"{_NUMBER}\s*([KMGTP]?)(?:bytes|B)?", re.I)
# no unit: None (it would be in the site's LSF_UNIT_FOR_LIMITS, which the answer does not say)
_FACTORS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}


@dataclass(frozen=True)
class Submitted:
    """A job bsub accepted: our id, LSF's id (what bkill, bjobs and done() take) and its queue."""

    job_id: str
    native_id: str
    queue: str


def _text(answer: str | bytes, what: str) -> str:
    return answer_text(answer, what, "LSF")


def parse_submission(answer: str | bytes) -> Submitted:
    """Return the job ``bsub`` announced (``Job <1234> is submitted to queue <normal>.``); ClusterError quoting
    the answer when it announces none."""
    text = _text(answer, "bsub's answer")
    m = _SUBMITTED.search(text)
    if m is None:
        raise ClusterError(f"bsub answered {text[:200]!r}, which names no job",
                           expected="bsub's answer: Job <1234> is submitted to queue <normal>.")
    return Submitted(job_id=m.group(1), native_id=m.group(1), queue=m.group(2))


def state_of(stat: str, exit_reason: str | None) -> JobState:
    """Return our state for bjobs' ``STAT`` word (and ``EXIT_REASON`` once it exited)."""
    state = STATES.get(stat, JobState.UNKNOWN)
    if state is not JobState.FAILED or not exit_reason:
        return state
    term = _TERM.search(exit_reason)
    if term is not None:
        return EXIT_REASONS.get(term.group(), JobState.FAILED)
    lowered = exit_reason.lower()
    return next((s for words, s in _REASON_WORDS if words in lowered), JobState.FAILED)


def _str(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def _number(pattern: re.Pattern[str], value: Any) -> float | None:
    m = pattern.fullmatch(_str(value))
    return float(m.group(1)) if m else None


def lsf_memory_bytes(value: Any) -> int | None:
    """Return bjobs' memory (``512 Mbytes``, ``1.5 Gbytes``, ``4 G``) in bytes; None for anything else."""
    m = _MEMORY.fullmatch(_str(value))
    if m is None or not m.group(2):
        return None
    return int(float(m.group(1)) * _FACTORS[m.group(2).upper()])


def _report(job_id: str, record: dict[str, Any]) -> Report:
    stat = _str(record.get("STAT"))
    reason = _str(record.get("EXIT_REASON")) or _str(record.get("PEND_REASON")) or None
    state = state_of(stat, _str(record.get("EXIT_REASON")) or None)
    exit_code = outside_int(_str(record.get("EXIT_CODE")), 0, 255)
    if state is JobState.COMPLETED:
        exit_code = 0
    host = _str(record.get("EXEC_HOST")).split(":")[0]
    node = host.rpartition("*")[2] or None
    elapsed = _number(_SECONDS, record.get("RUN_TIME"))
    limit_min = _number(_MINUTES, record.get("RUNTIMELIMIT"))
    status = JobStatus(job_id=job_id, state=state, raw=stat[:20], exit_code=exit_code, node=node, elapsed_s=elapsed,
                       reason=reason)
    usage = Usage(elapsed_s=elapsed, time_limit_s=None if limit_min is None else limit_min * 60,
                  cpu_time_s=_number(_SECONDS, record.get("CPU_USED")),
                  peak_memory_bytes=lsf_memory_bytes(record.get("MAX_MEM")),
                  memory_request_bytes=lsf_memory_bytes(record.get("MEMLIMIT")),
                  cpus=outside_int(_str(record.get("NALLOC_SLOT"))), gpus=outside_int(_str(record.get("GPU_NUM"))))
    return Report(status, usage)


def our_job_id(job: Any, index: Any) -> str | None:
    """Return our id for bjobs' ``JOBID`` and ``JOBINDEX`` (``1234``, ``3`` -> ``1234_2``; index 0: no array)."""
    number = outside_int(_str(job))
    task = outside_int(_str(index) or "0", 0, 1 << 31)
    if number is None or task is None:
        return None
    return f"{number}_{task - FIRST_INDEX}" if task >= FIRST_INDEX else str(number)


def reports_from_bjobs(answer: str | bytes) -> dict[str, Report]:
    """Return each job's ``Report`` from ``bjobs -a -json -o "<FIELDS>"`` (keyed by our ids); ClusterError when
    the answer is not bjobs' JSON."""
    text = _text(answer, "bjobs' answer")
    if not text.strip():
        return {}
    data = parse_json_text(text, "bjobs -json", "bjobs' answer", error=ClusterError)
    records = data.get("RECORDS") if isinstance(data, dict) else None
    if not isinstance(records, list):
        raise ClusterError("bjobs' answer holds no \"RECORDS\" list", expected="the JSON of bjobs -json")
    reports = {}
    for record in records:
        if not isinstance(record, dict) or "ERROR" in record:
            continue
        ours = our_job_id(record.get("JOBID"), record.get("JOBINDEX"))
        if ours is not None:
            reports[ours] = _report(ours, record)
    return reports

"""What Grid Engine answers, in our words: pure functions from its text to our types.

- ``parse_submission``: ``qsub -terse`` prints ``1234`` for a job and ``1234.1-4:1`` for an array.
- ``statuses_from_qstat``: ``qstat -xml -g d`` (one ``job_list`` per array task) into ``JobStatus``.
- ``reports_from_qacct``: ``qacct -j ID`` (one record per run, ``=====`` between them) into ``JobStatus`` and
  ``Usage``; a job requeued (exit 99, ``failed 25 : rescheduling``) has a record per run.
- ``limits_from_sconf`` / ``queue_limits``: ``qconf -sconf`` (``max_u_jobs``, ``max_jobs``, ``max_aj_tasks``,
  ``max_aj_instances``; 0 is "no limit") and ``qconf -sq QUEUE`` (``slots``, ``h_rt``, ``h_vmem``, ``pe_list``).

An answer is someone else's text: bounded (job_status.py ``answer_text``), bad bytes already replaced
(records.command_output), numbers read by records.numbers (ASCII digits only), an XML answer with a DOCTYPE refused
(no entity is ever expanded), a field that cannot be read treated as absent. A state word no table here knows is
``UNKNOWN``, never a guess; an answer that is not Grid Engine's at all is a ClusterError.

Our ids: ``1234`` for a job or a whole array, ``1234_<k>`` for array task ``k + 1`` (Grid Engine numbers tasks
from 1, ``-t 1-N``; our tasks count from 0 on every backend).

How a job ended, from its last ``qacct`` record (seen on Debian's 8.1.9, tests/scheduler/golden/gridengine):

==============================================  ===============================================================
``failed 0``, ``exit_status 0``                 COMPLETED
``failed 37`` (qmaster enforced h_rt, h_cpu or  OUT_OF_MEMORY when the job asked for ``h_vmem`` and ``maxvmem``
h_vmem limit), ``exit_status 137`` (140 when    reached it, else TIMEOUT when it asked for ``h_rt``/``h_cpu``
-notify's SIGUSR2 killed it first)              (the request is in ``category``: ``-l h_rt=3,h_vmem=300M``)
``failed 0``, ``exit_status 137``, ``h_vmem``   OUT_OF_MEMORY: killed by SIGKILL not from Grid Engine (the
asked for                                       kernel), or our job's call raised MemoryError at the address-
                                                space limit h_vmem sets (job_call.py exits 137 then)
``exit_status 152`` (SIGXCPU)                   TIMEOUT (``s_cpu``/``h_cpu``)
``failed 100`` (assumedly after job),           CANCELLED (``qdel`` of a running job: SIGKILL, or with
``exit_status`` 137, 143, 138 or 140            ``-notify`` the SIGUSR1/SIGUSR2 that comes first)
``failed 25`` (rescheduling)                    PENDING: the job asked to run again (exit 99) and is queued
any other ``failed`` (1-36: it could not start  FAILED, ``reason`` = qacct's words
or ended in a prolog/epilog), or exit != 0
==============================================  ===============================================================

``qstat``'s state letters: ``E`` (an error state: ``Eqw``, the job cannot start until ``qmod -cj`` clears it) is
FAILED; ``r``, ``t`` (transferring), ``s``/``S``/``T`` (suspended) RUNNING (``dr``: being deleted, still
running); ``qw``, ``hqw`` (a user hold, or ``-hold_jid`` waiting), ``Rq`` (requeued) PENDING.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Any

from hpc_runner.errors import ClusterError
from hpc_runner.records.numbers import outside_int
from hpc_runner.scheduler.job_status import Attempt, JobState, JobStatus, Report, Usage, answer_text

MAX_TASKS = 1_000_000  # the most array tasks one answer may expand to (a range in qstat, -t in qsub)
_ID = r"[0-9]{1,18}"
_TASK = r"[0-9]{1,9}"
_TERSE = re.compile(rf"({_ID})(?:\.({_TASK})-({_TASK}):({_TASK}))?")
_OUR_ID = re.compile(rf"({_ID})(?:_({_TASK}))?")
_RANGE = re.compile(rf"({_TASK})(?:-({_TASK})(?::({_TASK}))?)?")
_RECORD_SEPARATOR = re.compile(r"^={10,}\s*$", re.M)
_FIELD = re.compile(r"^([a-z_]{1,40})[ \t]+(.*?)\s*$")

FAILED_LIMIT = 37  # qmaster enforced h_rt, h_cpu, or h_vmem limit
FAILED_RESCHEDULING = 25  # the job exited 99 (or was rescheduled): it runs again
FAILED_AFTER_JOB = 100  # "assumedly after job": killed after it started (qdel)
SIGKILL_EXIT, SIGTERM_EXIT, SIGXCPU_EXIT = 137, 143, 152
# with -notify, SIGUSR1 (138) or SIGUSR2 (140) comes first: a process that does not handle it dies of it
KILLED_EXITS = frozenset({SIGKILL_EXIT, SIGTERM_EXIT, 138, 140})
REQUEUE_EXIT = 99  # a job's exit status that asks Grid Engine to run it again


@dataclass(frozen=True)
class Submitted:
    """A job qsub accepted: its id, and the task numbers Grid Engine gave an array (1..N), empty for a job."""

    job_id: str
    tasks: range = range(0)

    @property
    def array(self) -> bool:
        return len(self.tasks) > 0

    def our_ids(self) -> list[str]:
        """Our id of the job, or of each task (``1234_0`` for Grid Engine's task 1)."""
        if not self.array:
            return [self.job_id]
        return [f"{self.job_id}_{t - 1}" for t in self.tasks]


@dataclass(frozen=True)
class GlobalLimits:
    """The global configuration's limits (None: no limit, Grid Engine's 0)."""

    max_u_jobs: int | None = None  # jobs (an array counts once) a user may have queued or running
    max_jobs: int | None = None  # jobs in the whole cluster
    max_aj_tasks: int | None = None  # tasks one array may have
    max_aj_instances: int | None = None  # tasks of one array running at once


@dataclass(frozen=True)
class QueueLimits:
    """What one queue offers: its slots per host, its run-time and memory limits, its parallel environments."""

    name: str
    slots: int | None = None
    h_rt_s: float | None = None
    h_vmem_bytes: int | None = None
    pe_list: tuple[str, ...] = ()


def _text(answer: str | bytes, what: str) -> str:
    return answer_text(answer, what, "Grid Engine")


# ------------------------------------------------------------------------------------------------ ids


def our_task_id(job_id: str, ge_task: int | None) -> str:
    """Our id of Grid Engine's job ``job_id`` task ``ge_task`` (1-based; None: no array)."""
    return job_id if ge_task is None else f"{job_id}_{ge_task - 1}"


def native_id(our_id: str) -> tuple[str, int | None]:
    """Grid Engine's job id and task number (1-based, None for a whole job) of our id; ClusterError for an id
    that is not ours (``1234`` or ``1234_3``)."""
    m = _OUR_ID.fullmatch(our_id) if isinstance(our_id, str) else None
    if m is None:
        raise ClusterError(f"{str(our_id)[:60]!r} is not a Grid Engine job id", expected="1234 or 1234_3")
    return m.group(1), (None if m.group(2) is None else int(m.group(2)) + 1)


def parse_submission(answer: str | bytes) -> Submitted:
    """Return the job ``qsub -terse`` printed (``1234``; an array ``1234.1-4:1``); ClusterError quoting the
    answer when it holds none."""
    text = _text(answer, "qsub's answer")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    m = _TERSE.fullmatch(lines[0]) if len(lines) == 1 else None
    if m is None:
        raise ClusterError(f"qsub answered {text[:200]!r}, which names no job",
                           expected="qsub -terse's answer: 1234, or 1234.1-4:1 for an array")
    if m.group(2) is None:
        return Submitted(m.group(1))
    first, last, step = int(m.group(2)), int(m.group(3)), int(m.group(4))
    tasks = range(first, last + 1, step) if step and first <= last else range(0)
    if not tasks or len(tasks) > MAX_TASKS:
        raise ClusterError(f"qsub answered the array {lines[0][:80]!r}, which has no tasks or too many",
                           expected=f"1 to {MAX_TASKS} tasks")
    return Submitted(m.group(1), tasks)


def expand_tasks(text: str) -> list[int]:
    """Return the task numbers of qstat's ``tasks`` (``4``, ``2-4:1``, ``1-3:1,7``); ClusterError for text that
    is none, or names more than ``MAX_TASKS``."""
    out: list[int] = []
    for part in text.strip().split(","):
        m = _RANGE.fullmatch(part.strip())
        if m is None:
            raise ClusterError(f"qstat's tasks {text[:60]!r} are not task numbers", expected="4, 2-4:1 or 1-3:1,7")
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) else first
        step = int(m.group(3)) if m.group(3) else 1
        span = range(first, last + 1, step) if step else range(0)
        if len(out) + len(span) > MAX_TASKS:
            raise ClusterError(f"qstat's tasks {text[:60]!r} name more than {MAX_TASKS} tasks")
        out.extend(span)
    return out


# ------------------------------------------------------------------------------------------------ qstat -xml


def state_of_letters(word: str) -> JobState:
    """Return our state for qstat's state letters (``r``, ``qw``, ``hqw``, ``Eqw``, ``dr``, ``Rr``, ...)."""
    if not word or len(word) > 8 or not word.isascii() or not word.isalpha():
        return JobState.UNKNOWN
    if "E" in word:
        return JobState.FAILED
    if any(c in word for c in "rtsST"):
        return JobState.RUNNING
    if any(c in word for c in "qwh"):
        return JobState.PENDING
    return JobState.UNKNOWN


def _xml_root(text: str, what: str) -> ET.Element:
    head = text[:4096]
    if "<!DOCTYPE" in head.upper() or "<!ENTITY" in text.upper():
        raise ClusterError(f"{what} declares a DOCTYPE or an entity; refused", expected=f"{what} of Grid Engine")
    try:
        return ET.fromstring(text)
    except ET.ParseError as exc:
        raise ClusterError(f"{what} is not XML ({exc})", expected=f"{what} of Grid Engine") from None


def _child_text(element: ET.Element, tag: str) -> str:
    child = element.find(tag)
    return (child.text or "").strip() if child is not None else ""


def statuses_from_qstat(answer: str | bytes) -> dict[str, JobStatus]:
    """Return each listed job's (array task's) ``JobStatus`` from ``qstat -xml`` (``-g d`` lists each task; a
    task range is expanded), keyed by our ids; ClusterError when the answer is not qstat's XML."""
    text = _text(answer, "qstat's answer")
    if not text.strip():
        return {}
    root = _xml_root(text, "qstat -xml's answer")
    if root.tag != "job_info":
        raise ClusterError(f"qstat -xml's answer is a <{root.tag[:40]}>, not a <job_info>",
                           expected="the XML of qstat -xml")
    out: dict[str, JobStatus] = {}
    for job in root.iter("job_list"):
        number = outside_int(_child_text(job, "JB_job_number"))
        if number is None:
            continue
        word = _child_text(job, "state")
        state = state_of_letters(word)
        queue = _child_text(job, "queue_name")
        node = queue.partition("@")[2] or None if queue else None
        tasks_text = _child_text(job, "tasks")
        try:
            tasks: list[int | None] = list(expand_tasks(tasks_text)) if tasks_text else [None]
        except ClusterError:
            tasks = [None]
        reason = "error state: it cannot start until `qmod -cj` clears it, or qdel" if "E" in word else None
        for task in tasks:
            job_id = our_task_id(str(number), task)
            out[job_id] = JobStatus(job_id=job_id, state=state, raw=word[:20], node=node, reason=reason)
    return out


# ------------------------------------------------------------------------------------------------ qacct -j

_SIZE = re.compile(r"([0-9]{1,18})(?:\.([0-9]{1,9}))?\s*([KMGTP]?)i?B?", re.I)
_SIZE_FACTORS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_SECONDS = re.compile(r"([0-9]{1,12})(?:\.([0-9]{1,9}))?\s*s?")
_TIME = re.compile(r"([0-9]{1,9})(?::([0-9]{1,9}))?(?::([0-9]{1,9}))?")


def qacct_size_bytes(text: str) -> int | None:
    """Return a size as qacct prints it (``429.855MB``, ``0.000B``, ``4.387KB``; powers of 1024) in bytes."""
    m = _SIZE.fullmatch(text.strip()) if isinstance(text, str) else None
    if m is None:
        return None
    value = int(m.group(1)) + (int(m.group(2)) / 10 ** len(m.group(2)) if m.group(2) else 0.0)
    return int(value * _SIZE_FACTORS[m.group(3).upper()])


def ge_memory_bytes(text: str) -> int | None:
    """Return a Grid Engine memory specifier (``300M``, ``4G``, ``512m``, ``1024``) in bytes: upper-case
    multipliers are powers of 1024, lower-case of 1000 (sge_types(1)); None for anything else."""
    m = re.fullmatch(r"([0-9]{1,15})(?:\.([0-9]{1,6}))?([KMGTkmgt]?)", text.strip()) if isinstance(text, str) else None
    if m is None:
        return None
    value = int(m.group(1)) + (int(m.group(2)) / 10 ** len(m.group(2)) if m.group(2) else 0.0)
    unit = m.group(3)
    factor = _DECIMAL[unit] if unit.islower() else _SIZE_FACTORS[unit]
    return int(value * factor)


def ge_time_s(text: str) -> float | None:
    """Return a Grid Engine time (``3``, ``600``, ``0:10:0``, ``1:00:00``; ``INFINITY`` is None) in seconds."""
    m = _TIME.fullmatch(text.strip()) if isinstance(text, str) else None
    if m is None:
        return None
    parts = [int(g) for g in m.groups() if g is not None]
    seconds = 0
    for p in parts:
        seconds = seconds * 60 + p
    return float(seconds)


def _seconds(text: str | None) -> float | None:
    m = _SECONDS.fullmatch(text.strip()) if isinstance(text, str) else None
    if m is None:
        return None
    return int(m.group(1)) + (int(m.group(2)) / 10 ** len(m.group(2)) if m.group(2) else 0.0)


def _leading_code(text: str | None) -> tuple[int | None, str]:
    """``failed`` and ``exit_status`` are a number then words: ``37  : qmaster enforced ...``, ``137  (Killed)``."""
    if not isinstance(text, str):
        return None, ""
    head, _, rest = text.strip().partition(" ")
    return outside_int(head), rest.strip(" :")


def requests_of(category: str | None) -> dict[str, str]:
    """The ``-l`` requests in qacct's ``category`` (``-l h_rt=3,h_vmem=300M -pe smp 2`` -> h_rt, h_vmem) and the
    parallel environment (``pe``: ``smp 2``)."""
    out: dict[str, str] = {}
    if not isinstance(category, str):
        return out
    words = category.split()
    for i, word in enumerate(words[:-1]):
        if word == "-l":
            for item in words[i + 1].split(","):
                name, sep, value = item.partition("=")
                if sep and name and name not in out:
                    out[name] = value
        elif word == "-pe" and i + 2 < len(words):
            out.setdefault("pe", f"{words[i + 1]} {words[i + 2]}")
    return out


def qacct_records(answer: str | bytes) -> list[dict[str, str]]:
    """Return qacct's records, each a mapping of its fields (the first word of a line -> the rest), in order."""
    text = _text(answer, "qacct's answer")
    records = []
    for chunk in _RECORD_SEPARATOR.split(text):
        fields: dict[str, str] = {}
        for line in chunk.splitlines():
            m = _FIELD.match(line)
            if m and m.group(1) not in fields:
                fields[m.group(1)] = m.group(2)
        if "jobnumber" in fields:
            records.append(fields)
    return records


def finished_state(record: dict[str, str]) -> tuple[JobState, str | None]:
    """Return our state of one qacct record, and qacct's words for why it ended (None for a success)."""
    failed, failed_words = _leading_code(record.get("failed"))
    exit_status, _ = _leading_code(record.get("exit_status"))
    if failed is None or exit_status is None:
        return JobState.UNKNOWN, None
    asked = requests_of(record.get("category"))
    peak = qacct_size_bytes(record.get("maxvmem", ""))
    vmem = ge_memory_bytes(asked.get("h_vmem", ""))
    slots = outside_int(record.get("slots", "")) or 1
    over_memory = vmem is not None and peak is not None and peak >= vmem * slots
    if failed == FAILED_RESCHEDULING:
        return JobState.PENDING, failed_words or "rescheduling"
    if failed == FAILED_LIMIT:
        if over_memory or (vmem is not None and not ({"h_rt", "h_cpu", "s_rt", "s_cpu"} & set(asked))):
            return JobState.OUT_OF_MEMORY, failed_words
        return JobState.TIMEOUT, failed_words
    if failed == FAILED_AFTER_JOB and exit_status in KILLED_EXITS:
        return JobState.CANCELLED, failed_words
    if failed != 0:
        return JobState.FAILED, failed_words or f"failed {failed}"
    if exit_status == 0:
        return JobState.COMPLETED, None
    if exit_status == SIGXCPU_EXIT:
        return JobState.TIMEOUT, "SIGXCPU (a CPU-time limit)"
    if exit_status == SIGKILL_EXIT and vmem is not None:
        return JobState.OUT_OF_MEMORY, "killed (SIGKILL) or out of memory under h_vmem"
    return JobState.FAILED, f"exit status {exit_status}"


def _usage(record: dict[str, str]) -> Usage:
    asked = requests_of(record.get("category"))
    slots = outside_int(record.get("slots", ""))
    vmem = ge_memory_bytes(asked.get("h_vmem", ""))
    return Usage(elapsed_s=_seconds(record.get("ru_wallclock")),
                 time_limit_s=ge_time_s(asked.get("h_rt", "")),
                 cpu_time_s=_seconds(record.get("cpu")),
                 peak_memory_bytes=qacct_size_bytes(record.get("maxvmem", "")),
                 memory_request_bytes=None if vmem is None else vmem * (slots or 1),
                 cpus=slots, gpus=None)


def reports_from_qacct(answer: str | bytes) -> dict[str, Report]:
    """Return each job's (array task's) ``Report`` from ``qacct -j``: its last record's state and usage, and how
    many records came before it (its requeues). ``error: job id N not found`` is no record: an empty answer."""
    runs: dict[str, list[dict[str, str]]] = {}
    for record in qacct_records(answer):
        number = outside_int(record.get("jobnumber", ""))
        if number is None:
            continue
        task_text = record.get("taskid", "undefined")
        task = None if task_text == "undefined" else outside_int(task_text, low=1)
        if task is None and task_text != "undefined":
            continue
        runs.setdefault(our_task_id(str(number), task), []).append(record)
    reports = {}
    for job_id, records in runs.items():
        last = records[-1]
        state, reason = finished_state(last)
        exit_status, _ = _leading_code(last.get("exit_status"))
        failed_text = (last.get("failed") or "").strip()
        usage = _usage(last)
        killed = exit_status is not None and state is not JobState.COMPLETED and 128 < exit_status < 160
        status = JobStatus(job_id=job_id, state=state, raw=f"failed {failed_text}"[:80], exit_code=exit_status,
                           node=(last.get("hostname") or None)[:255] if last.get("hostname") else None,
                           elapsed_s=usage.elapsed_s, requeues=len(records) - 1, reason=reason,
                           signal=exit_status - 128 if killed and exit_status is not None else None)
        attempts: tuple[Attempt, ...] = ()
        if len(records) > 1:
            earlier = [Attempt(JobState.REQUEUED.value if finished_state(r)[0] is JobState.PENDING
                               else finished_state(r)[0].value, r.get("hostname") or None) for r in records[:-1]]
            attempts = (*earlier, Attempt(state.value, status.node))
        reports[job_id] = Report(status, usage, attempts)
    return reports


# ------------------------------------------------------------------------------------------------ qconf


def conf_fields(answer: str | bytes, what: str) -> dict[str, str]:
    """Return a ``qconf -s...`` listing as ``name -> value`` (continuation lines ending in ``\\`` joined)."""
    text = _text(answer, what)
    joined = re.sub(r"\\\n[ \t]*", " ", text)
    fields: dict[str, str] = {}
    for line in joined.splitlines():
        if line.startswith("#"):
            continue
        m = _FIELD.match(line)
        if m and m.group(1) not in fields:
            fields[m.group(1)] = m.group(2)
    return fields


def _limit(value: Any) -> int | None:
    n = outside_int(value) if isinstance(value, str) else None
    return n if n else None  # 0 is "no limit"


def limits_from_sconf(answer: str | bytes) -> GlobalLimits:
    """Return the limits of ``qconf -sconf`` (the global configuration); a missing or garbled one is None."""
    f = conf_fields(answer, "qconf -sconf's answer")
    return GlobalLimits(max_u_jobs=_limit(f.get("max_u_jobs")), max_jobs=_limit(f.get("max_jobs")),
                        max_aj_tasks=_limit(f.get("max_aj_tasks")), max_aj_instances=_limit(f.get("max_aj_instances")))


def queue_limits(answer: str | bytes) -> QueueLimits:
    """Return what ``qconf -sq QUEUE`` says of its slots (the default before any ``[host=N]``), ``h_rt``,
    ``h_vmem`` and parallel environments; ClusterError for an answer that names no queue."""
    f = conf_fields(answer, "qconf -sq's answer")
    if "qname" not in f:
        raise ClusterError("qconf -sq's answer names no queue", expected="qconf -sq QUEUE's listing")
    slots_text = f.get("slots", "").split(",")[0].strip()
    pes = tuple(p for p in re.split(r"[\s,]+", f.get("pe_list", "")) if p and p != "NONE" and "[" not in p)
    return QueueLimits(name=f["qname"][:200], slots=outside_int(slots_text), h_rt_s=ge_time_s(f.get("h_rt", "")),
                       h_vmem_bytes=ge_memory_bytes(f.get("h_vmem", "")), pe_list=pes)


_LIMIT_REFUSAL = re.compile(
    r"only [0-9]+ jobs are allowed per user|max_u_jobs|max_jobs|jobs are allowed|"
    r"too many jobs|qmaster is busy|failed receiving gdi request|unable to contact qmaster", re.I)


def is_limit_refusal(message: str) -> bool:
    """True when qsub's refusal names a limit on queued jobs (``job rejected: only 1 jobs are allowed per user``)
    or a busy or unreachable qmaster: the jobs are not wrong, a later try may pass."""
    return bool(_LIMIT_REFUSAL.search(message or ""))

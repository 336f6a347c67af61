"""What SLURM says about jobs: one ``sacct`` call (``squeue`` when sacct does not answer), parsed once.

``sacct -D --parsable2 -j id1,id2,...`` once for all arrays, checked (``checked_answer``: a header line naming
JobID and State, each row of its width, each job id SLURM's in digits 0-9; an answer without the header is no
answer) and read by ``read_records`` (as submitit's ``SlurmInfoWatcher.read_info`` did: it expands
``123_[5-999%32]`` ranges, to the tasks asked about, and skips the steps; with ``-D`` a requeued job has one record
per attempt, oldest first, so the last one read is the current one and the others count its requeues); ``squeue``
once when sacct does not answer, or answers what cannot be read.

Each job's record becomes a ``JobStatus`` (SLURM's state words read through ``STATES``) and a ``Usage`` (the
numbers, in bytes and seconds): nothing above scheduler/slurm/ sees sacct's fields.

The same call says what each job used (``Usage``): the allocation's record has Elapsed,
Timelimit, TotalCPU, AllocCPUS and ReqMem, but peak memory (MaxRSS) and the TRES usage (GPU
utilisation and memory where the site gathers them) are step fields: ``sacct -X`` prints them empty.
So the call lists the steps too (no ``-X``; each step's record follows its job's) and ``fold_steps``
keeps, per job and attempt, the largest value any step reached (and a step the memory cgroup killed:
SLURM 22.05 marks only the step OUT_OF_MEMORY, the job FAILED; status shows the job OUT_OF_MEMORY).
Measured on the local cluster with 200 jobs: 586 lines instead of 201, 0.25 s instead of 0.06 s.
"""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from collections.abc import Collection, Sequence
from typing import Any

from hpc_runner.control_chars import printable
from hpc_runner.errors import ClusterError
from hpc_runner.records.command_output import run_command
from hpc_runner.records.numbers import outside_int
from hpc_runner.scheduler.executor import SchedulerAnswer, array_ids
from hpc_runner.scheduler.job_state import FROM_ACCOUNTING, FROM_NOWHERE, FROM_QUEUE
from hpc_runner.scheduler.job_status import Attempt, JobState, JobStatus, Usage
from hpc_runner.scheduler.units import parse_duration_s, parse_size_bytes

# what SLURM calls each source of an answer, for people (status: "states from sacct, 1 call")
WORDS = {FROM_ACCOUNTING: "sacct", FROM_QUEUE: "squeue"}
# SLURM's job states (sacct's and squeue's first word) in our own words; a word not here is UNKNOWN
STATES: dict[str, JobState] = {
    "PENDING": JobState.PENDING, "REQUEUED": JobState.PENDING, "REQUEUE_HOLD": JobState.PENDING,
    "REQUEUE_FED": JobState.PENDING, "RESV_DEL_HOLD": JobState.PENDING, "CONFIGURING": JobState.PENDING,
    "RUNNING": JobState.RUNNING, "COMPLETING": JobState.RUNNING, "SUSPENDED": JobState.RUNNING,
    "STOPPED": JobState.RUNNING, "SIGNALING": JobState.RUNNING, "STAGE_OUT": JobState.RUNNING,
    "RESIZING": JobState.RUNNING,
    "COMPLETED": JobState.COMPLETED,
    "FAILED": JobState.FAILED, "SPECIAL_EXIT": JobState.FAILED,
    "TIMEOUT": JobState.TIMEOUT, "DEADLINE": JobState.TIMEOUT,
    "OUT_OF_MEMORY": JobState.OUT_OF_MEMORY,
    "PREEMPTED": JobState.PREEMPTED,
    "NODE_FAIL": JobState.NODE_FAIL, "BOOT_FAIL": JobState.NODE_FAIL,
    "CANCELLED": JobState.CANCELLED, "REVOKED": JobState.CANCELLED,
}
MB = 1024 * 1024


def first_word(state: str | None) -> str:
    """SLURM's state word without its detail (``CANCELLED by 1000`` -> CANCELLED, ``RUNNING+`` -> RUNNING)."""
    text = (state or "").strip()
    return text.split()[0].rstrip("+") if text else ""


def job_state(state: str | None) -> JobState:
    """Return SLURM's state (sacct's State, squeue's %T) in our own words."""
    return STATES.get(first_word(state), JobState.UNKNOWN)


def attempt_state(state: str | None) -> str:
    """Return an attempt's state in our words: REQUEUED stays REQUEUED (it ran, then was queued again)."""
    word = first_word(state)
    return JobState.REQUEUED.value if word == "REQUEUED" else job_state(word).value

SACCT_FIELDS = "JobID,State,Elapsed,ExitCode"
SACCT_FIELDS += ",NodeList"  # where each attempt ran: status's node column, the node exclusions of the governor
# what each job used (jobs/usage.py): fields of the allocation's record, then of its steps
USAGE_FIELDS = "Timelimit,TotalCPU,AllocCPUS,ReqMem,MaxRSS,TRESUsageInAve,TRESUsageInMax"
SACCT_FIELDS += "," + USAGE_FIELDS
STEP_FIELDS = ("MaxRSS", "TRESUsageInAve", "TRESUsageInMax")  # empty on the allocation's record
MAX_TASKS = 1_000_000  # the most array tasks one answer's ranges expand to when no task is named (sweep's MAX_POINTS)
_TASKS = r"[0-9]{1,8}(?:-[0-9]{1,8})?(?:,[0-9]{1,8}(?:-[0-9]{1,8})?)*"
# SLURM's job ids in digits 0-9: 123, 123_4, a pending array's 123_[5-9,12%2], a step's 123.batch or 123_4.0
_JOB_ID = re.compile(rf"([0-9]{{1,10}})(?:_([0-9]{{1,8}})|_\[({_TASKS})(?:%[0-9]{{1,8}})?\])?(\.[A-Za-z0-9_]{{1,40}})?")


def checked_answer(text: str, what: str = "sacct") -> str:
    """Return a ``--parsable2`` answer (header line first) with only the rows that can be read: each of the
    header's width, its job id SLURM's in digits 0-9 (``_JOB_ID``); the others are left out (their jobs are not
    known). ClusterError naming ``what`` when the first line is no header naming JobID and State: the answer is
    not sacct's. An empty answer says nothing of any job (``""``)."""
    lines = text.splitlines()
    if not lines:
        return ""
    names = lines[0].split("|")
    if "JobID" not in names or "State" not in names:
        said = printable(" ".join(lines[0].split())[:80])
        raise ClusterError(f"{what}'s answer could not be read: its first line ({said!r}) is no header line naming "
                           "the fields asked for",
                           expected=f"a header line naming JobID and State ({SACCT_FIELDS.replace(',', '|')}), then "
                           "one row of the header's width per record, as sacct --parsable2 prints them")
    i = names.index("JobID")
    rows = [line for line in lines[1:]
            if len(cells := line.split("|")) == len(names) and _JOB_ID.fullmatch(cells[i].strip())]
    return "\n".join([lines[0], *rows]) + "\n"


def read_records(text: str, wanted: Collection[str] | None = None) -> dict[str, dict[str, str]]:
    """Return each job's last record (job id -> field -> value) of a checked answer (``checked_answer``), the
    steps left out. A pending array's range (``123_[5-999%32]``) is the record of each of its tasks that
    ``wanted`` names; of every task (up to MAX_TASKS in all) when ``wanted`` is None or names the array itself."""
    lines = text.splitlines()
    if len(lines) < 2:
        return {}  # no record: a job id sacct does not know (yet)
    names = lines[0].split("|")
    asked: dict[str, list[int]] = {}
    for job_id in wanted or ():
        m = _JOB_ID.fullmatch(job_id)
        if m and m.group(2) is not None:
            asked.setdefault(m.group(1), []).append(int(m.group(2)))
    whole = None if wanted is None else {j for j in wanted if j.isascii() and j.isdigit()}
    out: dict[str, dict[str, str]] = {}
    left = MAX_TASKS
    for line in lines[1:]:
        stats = {k: v.strip() for k, v in zip(names, line.split("|"))}
        m = _JOB_ID.fullmatch(stats.get("JobID", ""))
        if m is None or m.group(4):  # unreadable (not checked), or a step
            continue
        base, task, ranges = m.group(1), m.group(2), m.group(3)
        if ranges is None:
            out[base if task is None else f"{base}_{int(task)}"] = stats
            continue
        spans = [range(int(a), int(b or a) + 1) for a, _, b in (part.partition("-") for part in ranges.split(","))]
        if whole is None or base in whole:
            for span in spans:
                for k in span[:left]:
                    out[f"{base}_{k}"] = stats
                left -= min(left, len(span))
        else:
            out.update({f"{base}_{k}": stats for k in asked.get(base, ()) if any(k in span for span in spans)})
    return out


def parse_attempts(text: str) -> dict[str, list[Attempt]]:
    """Return each job's attempts, oldest first, from ``sacct -D --parsable2`` output with State and NodeList
    (steps left out)."""
    lines = text.splitlines()
    if not lines:
        return {}
    head = lines[0].split("|")
    if "State" not in head or "NodeList" not in head:
        return {}
    i_state, i_node = head.index("State"), head.index("NodeList")
    out: dict[str, list[Attempt]] = {}
    for line in lines[1:]:
        cells = line.split("|")
        job_id = cells[0].strip()
        if not job_id or "." in job_id or "[" in job_id or len(cells) <= max(i_state, i_node):
            continue
        node = cells[i_node].strip()
        out.setdefault(job_id, []).append(Attempt(attempt_state(cells[i_state]),
                                                  None if node in ("", "None assigned") else node))
    return out


def count_records(text: str) -> dict[str, int]:
    """Return how many sacct records each job id has (``sacct -D``: one per attempt of a requeued job)."""
    out: Counter = Counter()
    for line in text.splitlines()[1:]:
        job_id = line.split("|", 1)[0].strip()
        if job_id and "." not in job_id and "[" not in job_id:
            out[job_id] += 1
    return dict(out)


def parse_tres(text: str | None) -> dict[str, float]:
    """Return a TRES list (``cpu=00:00:14,mem=620768K,gres/gpuutil=85,gres/gpumem=1234M``) as numbers:
    sizes in bytes, times in seconds, counts and percentages as they are."""
    out: dict[str, float] = {}
    for item in (text or "").split(","):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            continue
        key, value = key.strip(), value.strip()
        number = parse_duration_s(value) if ":" in value else None
        if number is None:
            number = parse_size_bytes(value)
        if number is not None:
            out[key] = number
    return out


def fold_steps(text: str) -> dict[str, dict[str, Any]]:
    """Return, per job id, the peaks its steps reached in its current attempt: ``max_rss`` (bytes) and
    ``tres_max``/``tres_ave`` (``parse_tres`` of each step, the largest value per key).

    A step's record follows its job's (``sacct -D``: one job record per attempt, then its steps), so a
    job record starts the fold again: a requeued job shows what its last attempt used.
    """
    lines = text.splitlines()
    if len(lines) < 2:
        return {}
    names = lines[0].split("|")
    out: dict[str, dict[str, Any]] = {}
    for line in lines[1:]:
        row = dict(zip(names, line.split("|")))
        job_id = (row.get("JobID") or "").strip()
        if not job_id or "[" in job_id:
            continue
        base, dot, _ = job_id.partition(".")
        if not dot:
            out[base] = {}
            continue
        folded = out.setdefault(base, {})
        if (row.get("State") or "").split(" ")[0] == "OUT_OF_MEMORY":
            folded["oom_step"] = job_id
        rss = parse_size_bytes(row.get("MaxRSS"))
        if rss is not None:
            folded["max_rss"] = max(folded.get("max_rss", 0.0), rss)
        for name, key in (("TRESUsageInMax", "tres_max"), ("TRESUsageInAve", "tres_ave")):
            for k, v in parse_tres(row.get(name)).items():
                peaks = folded.setdefault(key, {})
                peaks[k] = max(peaks.get(k, v), v)
    return {k: v for k, v in out.items() if v}


def _now() -> str:
    import datetime as _dt

    return _dt.datetime.now().astimezone().isoformat(timespec="seconds")


def step_killed_for_memory(info: dict[str, dict[str, str]], steps: dict[str, dict[str, Any]]) -> None:
    """A job one of whose steps the memory cgroup killed ends FAILED on SLURM 22.05 (the batch script saw srun
    fail), though the step says OUT_OF_MEMORY: show the job as OUT_OF_MEMORY, as newer SLURM does (in place)."""
    for job_id, folded in steps.items():
        stats = info.get(job_id)
        if folded.get("oom_step") and stats and first_word(stats.get("State")) in ("FAILED", "CANCELLED"):
            info[job_id] = {**stats, "State": "OUT_OF_MEMORY", "StepState": f"{folded['oom_step']} OUT_OF_MEMORY"}


def exit_code_of(text: str | None) -> tuple[int | None, int | None]:
    """Return sacct's ExitCode ``status:signal`` as (exit code, signal; 0 -> None), (None, None) when not said."""
    status, _, signal = (text or "").partition(":")
    return outside_int(status.strip()), (outside_int(signal.strip()) or None)


def cancelled_by(state: str | None) -> str | None:
    """Return the uid in sacct's ``CANCELLED by 1000``, None when it names nobody."""
    words = (state or "").split()
    return words[2] if len(words) >= 3 and words[1] == "by" and words[2].isdigit() else None


def node_of(text: str | None) -> str | None:
    """Return sacct's NodeList of a job that ran (a hostlist like ``n[1-2]`` for several nodes), else None."""
    nodes = (text or "").strip()
    return None if not nodes or nodes.lower().startswith("none") else nodes


def to_status(job_id: str, row: dict[str, str], requeues: int = 0) -> JobStatus:
    """Return one job's sacct (or squeue) record as a ``JobStatus``."""
    raw = (row.get("State") or "").strip()
    code, signal = exit_code_of(row.get("ExitCode"))
    return JobStatus(job_id, job_state(raw), raw=raw, exit_code=code, node=node_of(row.get("NodeList")),
                     elapsed_s=parse_duration_s(row.get("Elapsed")), requeues=requeues,
                     signal=signal, cancelled_by=cancelled_by(raw))


def mem_request_bytes(req_mem: str | None, cpus: int | None) -> float | None:
    """Return sacct's ReqMem in bytes for the whole job (an older SLURM's per-CPU ``...c`` times the CPUs)."""
    size = parse_size_bytes(req_mem, default_unit="M")
    if size is None or size <= 0:
        return None
    per_cpu = (req_mem or "").strip().endswith("c")
    return size * ((cpus or 1) if per_cpu else 1)


def to_usage(row: dict[str, str], steps: dict[str, Any] | None) -> Usage:
    """Return what one job used, from its sacct record and its folded steps (``fold_steps``)."""
    steps = steps or {}
    cpus = outside_int(row.get("AllocCPUS") or "") or None
    tres_ave, tres_max = steps.get("tres_ave") or {}, steps.get("tres_max") or {}
    gpu = "gres/gpuutil" in tres_ave or "gres/gpuutil" in tres_max or "gres/gpumem" in tres_max
    mem = mem_request_bytes(row.get("ReqMem"), cpus)
    return Usage(elapsed_s=parse_duration_s(row.get("Elapsed")), time_limit_s=parse_duration_s(row.get("Timelimit")),
                 cpu_time_s=parse_duration_s(row.get("TotalCPU")),
                 peak_memory_bytes=int(steps["max_rss"]) if steps.get("max_rss") is not None else None,
                 memory_request_bytes=int(mem) if mem is not None else None, cpus=cpus,
                 gpu_util=tres_ave.get("gres/gpuutil") if gpu else None,
                 gpu_util_max=tres_max.get("gres/gpuutil") if gpu else None,
                 gpu_memory_bytes=tres_max.get("gres/gpumem") if gpu else None)


def parse_sacct(text: str, calls: int = 1, wanted: Collection[str] | None = None) -> SchedulerAnswer:
    """Return the answer of ``sacct -D --parsable2 -o JobID,State,...`` (header line first; steps folded) about the
    jobs ``wanted`` (array ranges expanded to those; all when None); ClusterError when it has no header line."""
    text = checked_answer(text)
    info, steps = read_records(text, wanted), fold_steps(text)
    step_killed_for_memory(info, steps)
    records = count_records(text)
    statuses = {j: to_status(j, row, max(0, records.get(j, 0) - 1)) for j, row in info.items() if row.get("State")}
    usage = {j: to_usage(row, steps.get(j)) for j, row in info.items() if j in statuses}
    return SchedulerAnswer(statuses, FROM_ACCOUNTING, calls, usage=usage, attempts=parse_attempts(text), at=_now(),
                           words=dict(WORDS))


def parse_queue(text: str, calls: int = 2, error: str | None = None,
                wanted: Collection[str] | None = None) -> SchedulerAnswer:
    """Return the answer of ``squeue -h -t all -o %i|%T`` (no header): states only."""
    info = read_records(checked_answer("JobID|State\n" + text, "squeue"), wanted)
    statuses = {j: to_status(j, row) for j, row in info.items() if row.get("State")}
    return SchedulerAnswer(statuses, FROM_QUEUE, calls, error, at=_now(), words=dict(WORDS))


def query_scheduler(job_ids: Sequence[str | None], since: str | None = None, timeout: float = 60,
                    accounting: bool = True) -> SchedulerAnswer:
    """Ask sacct once about ``job_ids`` (squeue once if sacct fails); return each job's status and usage.
    ``accounting`` False (the profile's cluster check found sacct does not answer): squeue only."""
    ids = array_ids(job_ids)
    if not ids:
        return SchedulerAnswer({}, FROM_NOWHERE, words=dict(WORDS))
    wanted = [j for j in job_ids if j]
    command = ["sacct", "-D", "--parsable2", "-o", SACCT_FIELDS, "-j", ",".join(ids)]
    if since:
        command += ["-S", since]
    errors = []
    try:
        if not accounting:
            errors.append("sacct: not asked (cluster check: no accounting on this cluster)")
        elif (res := run_command(command, timeout=timeout)).returncode == 0:
            return parse_sacct(res.stdout, wanted=wanted)
        else:
            errors.append(f"sacct: {res.stderr.strip()[:300]}")
    except (OSError, subprocess.SubprocessError) as exc:
        errors.append(f"sacct: {exc}")
    except ClusterError as exc:  # an answer that is not sacct's: asked of squeue, as when sacct fails
        errors.append(exc.message)
    try:
        res = run_command(["squeue", "-h", "-t", "all", "-j", ",".join(ids), "-o", "%i|%T"],
                             timeout=timeout)
    except (OSError, subprocess.SubprocessError) as exc:
        return SchedulerAnswer({}, FROM_NOWHERE, 1, "; ".join([*errors, f"squeue: {exc}"]), at=_now(),
                               words=dict(WORDS))
    if res.returncode != 0 and "Invalid job id" not in res.stderr:
        return SchedulerAnswer({}, FROM_NOWHERE, 2, "; ".join([*errors, f"squeue: {res.stderr.strip()[:300]}"]),
                               at=_now(), words=dict(WORDS))
    return parse_queue(res.stdout if res.returncode == 0 else "", 2, "; ".join(errors), wanted)


def queued_states(job_ids: Sequence[str], timeout: float = 30) -> dict[str, str] | None:
    """Return squeue's state of each queued job (array tasks one by one, in squeue's words), None when squeue does
    not answer."""
    ids = array_ids(job_ids)
    if not ids:
        return {}
    try:
        res = run_command(["squeue", "-h", "-r", "-j", ",".join(ids), "-o", "%i|%T"],
                             timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    if res.returncode != 0:
        return {} if "Invalid job id" in res.stderr else None
    return dict(line.split("|", 1) for line in res.stdout.split() if "|" in line)


def still_queued(job_ids: Sequence[str]) -> set[str]:
    """Job ids squeue still lists as pending or running (when it cannot tell: all of them, to be safe)."""
    states = queued_states(job_ids, timeout=60)
    if states is None:
        return set(job_ids)  # cannot tell: do not risk running a point twice
    return {j for j in job_ids if j in states or j.split("_")[0] in states}


def scancel(job_ids: Sequence[str], timeout: float = 60) -> None:
    """Cancel the jobs with one scancel call; ClusterError when scancel refuses."""
    try:
        res = run_command(["scancel", *job_ids], timeout=timeout)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ClusterError(f"scancel failed: {exc}") from None
    if res.returncode != 0 and "already completing or completed" not in res.stderr:
        raise ClusterError(f"scancel refused: {res.stderr.strip()[:500]}")

"""What SLURM says about jobs: one ``sacct`` call (``squeue`` when sacct does not answer), parsed once.

``sacct -D --parsable2 -j id1,id2,...`` once for all arrays, parsed by submitit's own
``SlurmInfoWatcher.read_info`` (it expands ``123_[5-999%32]`` ranges and skips the steps; with ``-D``
a requeued job has one record per attempt, oldest first, so the last one read is the current one and
the others count its requeues); ``squeue`` once when sacct does not answer.

The same call says what each job used (sweep/usage.py): the allocation's record has Elapsed,
Timelimit, TotalCPU, AllocCPUS and ReqMem, but peak memory (MaxRSS) and the TRES usage (GPU
utilisation and memory where the site gathers them) are step fields: ``sacct -X`` prints them empty.
So the call lists the steps too (no ``-X``; each step's record follows its job's) and ``fold_steps``
keeps, per job and attempt, the largest value any step reached (and a step the memory cgroup killed:
SLURM 22.05 marks only the step OUT_OF_MEMORY, the job FAILED; status shows the job OUT_OF_MEMORY).
Measured on the local cluster with 200 jobs: 586 lines instead of 201, 0.25 s instead of 0.06 s.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from collections.abc import Sequence
from typing import Any

from hpc_runner.records.command_output import run_command
from hpc_runner.scheduler.executor import Attempt, SchedulerAnswer, array_ids
from hpc_runner.scheduler.job_state import FROM_ACCOUNTING, FROM_NOWHERE, FROM_QUEUE
from hpc_runner.scheduler.units import parse_duration_s, parse_size_bytes

SACCT_FIELDS = "JobID,State,Elapsed,ExitCode"
SACCT_FIELDS += ",NodeList"  # where each attempt ran: status's node column, the node exclusions of the governor
# what each job used (sweep/usage.py): fields of the allocation's record, then of its steps
USAGE_FIELDS = "Timelimit,TotalCPU,AllocCPUS,ReqMem,MaxRSS,TRESUsageInAve,TRESUsageInMax"
SACCT_FIELDS += "," + USAGE_FIELDS
STEP_FIELDS = ("MaxRSS", "TRESUsageInAve", "TRESUsageInMax")  # empty on the allocation's record


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
        state = cells[i_state].split()[0] if cells[i_state].strip() else ""
        node = cells[i_node].strip()
        out.setdefault(job_id, []).append(Attempt(state, None if node in ("", "None assigned") else node))
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
        if folded.get("oom_step") and stats and stats.get("State", "").split(" ")[0] in ("FAILED", "CANCELLED"):
            info[job_id] = {**stats, "State": "OUT_OF_MEMORY", "StepState": f"{folded['oom_step']} OUT_OF_MEMORY"}


def parse_sacct(text: str, calls: int = 1) -> SchedulerAnswer:
    """Return the answer of ``sacct -D --parsable2 -o JobID,State,...`` (header line first; steps folded)."""
    from submitit.slurm.slurm import SlurmInfoWatcher

    info, steps = SlurmInfoWatcher().read_info(text), fold_steps(text)
    step_killed_for_memory(info, steps)
    return SchedulerAnswer(info, FROM_ACCOUNTING, calls, records=count_records(text), attempts=parse_attempts(text),
                           steps=steps, at=_now())


def query_scheduler(job_ids: Sequence[str | None], since: str | None = None, timeout: float = 60) -> SchedulerAnswer:
    """Ask sacct once about ``job_ids`` (squeue once if sacct fails); return submitit-parsed info per job id."""
    from submitit.slurm.slurm import SlurmInfoWatcher

    ids = array_ids(job_ids)
    if not ids:
        return SchedulerAnswer({}, FROM_NOWHERE)
    parse = SlurmInfoWatcher().read_info
    command = ["sacct", "-D", "--parsable2", "-o", SACCT_FIELDS, "-j", ",".join(ids)]
    if since:
        command += ["-S", since]
    errors = []
    try:
        res = run_command(command, timeout=timeout)
        if res.returncode == 0:
            return parse_sacct(res.stdout)
        errors.append(f"sacct: {res.stderr.strip()[:300]}")
    except (OSError, subprocess.SubprocessError) as exc:
        errors.append(f"sacct: {exc}")
    try:
        res = run_command(["squeue", "-h", "-t", "all", "-j", ",".join(ids), "-o", "%i|%T"],
                             timeout=timeout)
    except (OSError, subprocess.SubprocessError) as exc:
        return SchedulerAnswer({}, FROM_NOWHERE, 1, "; ".join([*errors, f"squeue: {exc}"]), at=_now())
    if res.returncode != 0 and "Invalid job id" not in res.stderr:
        return SchedulerAnswer({}, FROM_NOWHERE, 2, "; ".join([*errors, f"squeue: {res.stderr.strip()[:300]}"]),
                               at=_now())
    text = "JobID|State\n" + (res.stdout if res.returncode == 0 else "")
    return SchedulerAnswer(parse(text), FROM_QUEUE, 2, "; ".join(errors), at=_now())


def queued_states(job_ids: Sequence[str], timeout: float = 30) -> dict[str, str] | None:
    """Return squeue's state of each queued job (array tasks one by one), None when squeue does not answer."""
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
    from hpc_runner.errors import ClusterError

    try:
        res = run_command(["scancel", *job_ids], timeout=timeout)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ClusterError(f"scancel failed: {exc}") from None
    if res.returncode != 0 and "already completing or completed" not in res.stderr:
        raise ClusterError(f"scancel refused: {res.stderr.strip()[:500]}")

"""What SLURM says about jobs: one ``sacct`` call (``squeue`` when sacct does not answer), parsed once.

``sacct -X -D --parsable2 -j id1,id2,...`` once for all arrays, parsed by submitit's own
``SlurmInfoWatcher.read_info`` (it expands ``123_[5-999%32]`` ranges; with ``-D`` a requeued job has
one record per attempt, oldest first, so the last one read is the current one and the others count
its requeues); ``squeue`` once when sacct does not answer.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

# states after which a job never runs again, and that mean its work must be run again
FAILED_STATES = frozenset({"FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL", "DEADLINE",
                           "PREEMPTED", "REVOKED", "SPECIAL_EXIT"})
DONE = "COMPLETED"
SACCT_FIELDS = "JobID,State,Elapsed,ExitCode"
SACCT_FIELDS += ",NodeList"  # where each attempt ran: status's node column, the node exclusions of the governor


@dataclass
class SchedulerAnswer:
    """The parsed answer of the one sacct (or squeue) call."""

    info: dict[str, dict[str, str]]
    source: str  # "sacct", "squeue" or "none"
    calls: int = 0
    error: str | None = None
    records: dict[str, int] = field(default_factory=dict)  # sacct records per job id (2 and more: requeued)
    attempts: dict[str, list[Attempt]] = field(default_factory=dict)  # per job id, oldest first (sacct -D)

    def requeues(self, job_id: str | None) -> int:
        """Return how many times the job was requeued (its sacct records beyond the first)."""
        return max(0, self.records.get(job_id, 0) - 1) if job_id else 0


@dataclass(frozen=True)
class Attempt:
    """One run of a job (a requeued job has several): how it ended and where it ran."""

    state: str  # sacct's State, first word (NODE_FAIL, COMPLETED, RUNNING, ...)
    node: str | None  # sacct's NodeList (``vm[1-2]``), None before the job had nodes


def parse_attempts(text: str) -> dict[str, list[Attempt]]:
    """Return each job's attempts, oldest first, from ``sacct -X -D --parsable2`` output with State and NodeList."""
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


def array_ids(job_ids: Iterable[str | None]) -> list[str]:
    """Return the distinct job ids to ask about (array tasks ``123_4`` -> ``123``), local runs left out."""
    return list(dict.fromkeys(j.split("_")[0] for j in job_ids if j and j[0].isdigit()))


def count_records(text: str) -> dict[str, int]:
    """Return how many sacct records each job id has (``sacct -D``: one per attempt of a requeued job)."""
    out: Counter = Counter()
    for line in text.splitlines()[1:]:
        job_id = line.split("|", 1)[0].strip()
        if job_id and "." not in job_id and "[" not in job_id:
            out[job_id] += 1
    return dict(out)


def parse_sacct(text: str, calls: int = 1) -> SchedulerAnswer:
    """Return the answer of ``sacct -X -D --parsable2 -o JobID,State,...`` (header line first)."""
    from submitit.slurm.slurm import SlurmInfoWatcher

    return SchedulerAnswer(SlurmInfoWatcher().read_info(text), "sacct", calls, records=count_records(text),
                           attempts=parse_attempts(text))


def query_scheduler(job_ids: Sequence[str | None], since: str | None = None, timeout: float = 60) -> SchedulerAnswer:
    """Ask sacct once about ``job_ids`` (squeue once if sacct fails); return submitit-parsed info per job id."""
    from submitit.slurm.slurm import SlurmInfoWatcher

    ids = array_ids(job_ids)
    if not ids:
        return SchedulerAnswer({}, "none")
    parse = SlurmInfoWatcher().read_info
    command = ["sacct", "-X", "-D", "--parsable2", "-o", SACCT_FIELDS, "-j", ",".join(ids)]
    if since:
        command += ["-S", since]
    errors = []
    try:
        res = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        if res.returncode == 0:
            return parse_sacct(res.stdout)
        errors.append(f"sacct: {res.stderr.strip()[:300]}")
    except (OSError, subprocess.SubprocessError) as exc:
        errors.append(f"sacct: {exc}")
    try:
        res = subprocess.run(["squeue", "-h", "-t", "all", "-j", ",".join(ids), "-o", "%i|%T"],
                             capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError) as exc:
        return SchedulerAnswer({}, "none", 1, "; ".join([*errors, f"squeue: {exc}"]))
    if res.returncode != 0 and "Invalid job id" not in res.stderr:
        return SchedulerAnswer({}, "none", 2, "; ".join([*errors, f"squeue: {res.stderr.strip()[:300]}"]))
    text = "JobID|State\n" + (res.stdout if res.returncode == 0 else "")
    return SchedulerAnswer(parse(text), "squeue", 2, "; ".join(errors))


def queued_states(job_ids: Sequence[str], timeout: float = 30) -> dict[str, str] | None:
    """Return squeue's state of each queued job (array tasks one by one), None when squeue does not answer."""
    ids = array_ids(job_ids)
    if not ids:
        return {}
    try:
        res = subprocess.run(["squeue", "-h", "-r", "-j", ",".join(ids), "-o", "%i|%T"],
                             capture_output=True, text=True, timeout=timeout)
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
        res = subprocess.run(["scancel", *job_ids], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ClusterError(f"scancel failed: {exc}") from None
    if res.returncode != 0 and "already completing or completed" not in res.stderr:
        raise ClusterError(f"scancel refused: {res.stderr.strip()[:500]}")

"""Where every point of a sweep (or a single submitted run) stands: the ledger's state, the scheduler's
answer to ONE call (``Executor.query``: each job's ``JobStatus``, in our own words) and the run's own run.yaml,
put together, read-only.

The run dirs are read only where the scheduler cannot tell (no record yet, purged, local runs, packed
points) and for the cause of failed points, so status stays fast at thousands of points.

Packed points (``--pack K``: K points share one array task's job id) take their state from their
own run.yaml when it says completed or failed, else from the task: queued or running -> PENDING
(RUNNING for the point the task is running), ended with a failure -> that failure, COMPLETED
without running the point -> NOT-STARTED (resume sends it again).
"""

from __future__ import annotations

import datetime as _dt
import os
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpc_runner.errors import UserError
from hpc_runner.jobs import ledger as sr
from hpc_runner.jobs.causes import Cause, decide
from hpc_runner.jobs.results import RESULTS_FILE, ResultsFile
from hpc_runner.records.numbers import starts_with_digit
from hpc_runner.records.read import open_regular, read_record_text
from hpc_runner.records.run_head import run_head
from hpc_runner.records.rundir import RunDir
from hpc_runner.scheduler.executor import Executor, SchedulerAnswer, is_local_job, is_scheduler_job
from hpc_runner.scheduler.job_env import recorded_job
from hpc_runner.scheduler.job_logs import EXCEPTION_LINE, JobLogs, LogLine
from hpc_runner.scheduler.job_state import FROM_ACCOUNTING, FROM_QUEUE
from hpc_runner.scheduler.job_status import FAILED_STATES, JobState, JobStatus

DONE = JobState.COMPLETED.value
PRUNED = "PRUNED"  # a tune trial its pruner stopped early: finished, with a result, not a failure
ENDED_WELL = (DONE, PRUNED)
NOT_SUBMITTED = "NOT-SUBMITTED"
NOT_STARTED = "NOT-STARTED"  # local run, or packed point, that never started
WAITING = "WAITING"  # waits in the sweep dir for a free submit slot (ledger.WAITING, no job id)
UNKNOWN = "UNKNOWN"  # the scheduler has no record (yet: sacct lags a few seconds; or purged)
GAVE_UP = "FAILED"  # the ledger gave the point up (returned or retried past its bounds): failed, with a cause
# run.yaml status -> state, for runs the scheduler cannot tell about
RUN_STATUS_STATES = {
    "completed": DONE,
    "failed": "FAILED",
    "preempted": "PREEMPTED",
    "interrupted": "CANCELLED",
    "pruned": PRUNED,  # a tune trial stopped early by its pruner (the job went on)
    "running": "RUNNING",
    "prepared": "PENDING",
    "submitted": "PENDING",
    sr.NOT_SUBMITTED: NOT_SUBMITTED,
}


@dataclass
class PointState:
    """One point's state and where it came from."""

    index: int
    run_dir: Path
    params: dict[str, Any]
    job_id: str | None
    state: str
    source: str  # job_state.FROM_ACCOUNTING or FROM_QUEUE, "run.yaml", "results.jsonl", "record"
    elapsed: str | None = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    requeues: int = 0  # how many times the scheduler requeued its job (its attempts, run.yaml)
    scheduler_state: str | None = None  # the scheduler's own words for its state, for display ("CANCELLED by 1000")
    exit_code: str | None = None  # its exit code for people ("2", "0 (signal 15)")
    status: JobStatus | None = None  # the scheduler's whole answer about its job
    cause: Any = None  # hpc_runner.jobs.causes.Cause of a failed point (see explain_failures)
    recorded_cause: dict[str, Any] | None = None  # the ledger's own cause (a point it gave up)
    node: str | None = None  # where its job's current attempt runs or ran (the scheduler's host list)
    history: list[dict[str, Any]] = field(default_factory=list)  # its job's earlier attempts: state, node
    excluded: list[str] = field(default_factory=list)  # nodes its submissions exclude (the ledger's)

    def where(self) -> str:
        """Return the node column: the node, with the earlier attempts' outcomes (``vm2 (NODE_FAIL vm1)``)."""
        earlier = ", ".join(f"{h['state']} {h.get('node') or '?'}" for h in self.history)
        return (self.node or "-") + (f" ({earlier})" if earlier else "")

    @property
    def cause_kind(self) -> str | None:
        """Return the cause of a failed point (OUT_OF_MEMORY, TIMEOUT, ..., ERROR), None otherwise."""
        return self.cause.kind if self.cause is not None else None

    @property
    def failed(self) -> bool:
        """True when the point ended without completing, or was never submitted."""
        return self.state in FAILED_STATES or self.state == NOT_SUBMITTED

    @property
    def active(self) -> bool:
        """True while the scheduler may still run it."""
        return not (self.failed or self.state in (*ENDED_WELL, UNKNOWN, NOT_STARTED))


def _elapsed_text(seconds: float | None) -> str | None:
    """``64.0`` -> ``00:01:04`` (``1-02:00:00`` from a day on), None when unknown."""
    if seconds is None:
        return None
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    text = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text


# failures after which the scheduler itself may requeue the job (SLURM: JobRequeue=1 / --requeue); its accounting
# records the new attempt only once it is eligible to start (~10 s later), so until then the job looks failed
REQUEUABLE_STATES = frozenset({"NODE_FAIL", "PREEMPTED"})


def recheck_requeued(states: Sequence[PointState], answer: SchedulerAnswer, executor: Executor,
                     timeout: float = 30) -> None:
    """Ask the queue once (only when some point ended NODE_FAIL/PREEMPTED) whether the scheduler requeued those
    jobs; a requeued one is shown as the queue says (PENDING, RUNNING), one requeue more than the accounting counts."""
    suspects = [s for s in states if s.state in REQUEUABLE_STATES and s.source == FROM_ACCOUNTING and s.job_id]
    if not suspects:
        return
    queued = executor.queue_states([s.job_id for s in suspects if s.job_id], timeout)
    answer.calls += 1
    if not queued:
        return
    for s in suspects:
        now = queued.get(s.job_id) or queued.get(f"{s.job_id}_0" if "_" not in s.job_id else "")
        if now and now not in FAILED_STATES and now != DONE:
            s.history.append({"state": s.state, "node": s.node})  # the accounting has not the new attempt yet
            s.state, s.source, s.requeues, s.node = now, FROM_QUEUE, s.requeues + 1, None


def _since(dates: Iterable[str | None]) -> str | None:
    """Where the accounting starts looking: the day before the earliest submission (SLURM's defaults to today)."""
    days = []
    for d in dates:
        try:
            days.append(_dt.datetime.fromisoformat(str(d)).date())
        except ValueError:
            continue
    return (min(days) - _dt.timedelta(days=1)).isoformat() if days else None


def _read_record(run_dir: Path) -> dict:
    try:
        return RunDir(run_dir).record()
    except Exception:  # a half-written or hand-edited record must not stop status
        return {}


def _status_and_job(run_dir: Path) -> tuple[str | None, str]:
    """run.yaml's status and job id: from its lines when it is plainly as written (records/run_head.py), else parsed."""
    try:  # bounded, a regular file only
        text = read_record_text(os.path.join(run_dir, "run.yaml"), "run record")  # a string: no Path per point
    except UserError:
        return None, ""
    head = run_head(text) if text is not None else (None, None)
    if head is not None:
        return head[0], head[1] or ""
    rec = _read_record(run_dir)
    return rec.get("status"), str((rec.get("job") or {}).get("id") or "")


def _state_from_record(run_dir: Path, local: bool, job_id: str | None = None) -> tuple[str, str]:
    status, recorded_job = _status_and_job(run_dir)  # (None, "") without a run dir
    if job_id and is_scheduler_job(job_id) and is_scheduler_job(recorded_job) and recorded_job != job_id:
        # run.yaml is an earlier job's (a retry or resume sent the point again, and the scheduler does not list
        # the new job yet): not the point's state
        return UNKNOWN, "record"
    if status in RUN_STATUS_STATES:
        return RUN_STATUS_STATES[status], "run.yaml"
    return (NOT_STARTED if local else UNKNOWN), "record"


_STATUS_LINE = re.compile(r"^status: *['\"]?([\w-]+)", re.M)


def run_status(run_dir: Path) -> str | None:
    """Return run.yaml's top-level ``status`` without parsing the whole file (a packed sweep reads them all)."""
    try:  # bounded, a regular file only: a run.yaml linked to /dev/zero or a named pipe has no status
        text = read_record_text(run_dir / "run.yaml", "run record")
    except UserError:
        return None
    m = _STATUS_LINE.search(text or "")
    return m.group(1) if m else None


def _packed_state(ps: PointState, task: str, status: str | None) -> tuple[str, str]:
    """Return (state, source) of a point that shares its array task with others."""
    if status == "completed":
        return DONE, "run.yaml"
    if status == "failed":
        return "FAILED", "run.yaml"
    if status == "pruned":  # a tune worker's trial, stopped early by the pruner while the worker went on
        return PRUNED, "run.yaml"
    if task == DONE:  # the task ended well but this point did not end: it never ran (or was stopped)
        return ("PREEMPTED", "run.yaml") if status == "preempted" else (NOT_STARTED, "run.yaml")
    if task in FAILED_STATES:
        if status == "preempted" and task == "FAILED":
            return "PREEMPTED", "run.yaml"
        return task, ps.source
    # queued or running: only the point the task is running runs
    return ("RUNNING", "run.yaml") if task == "RUNNING" and status == "running" else ("PENDING", ps.source)


# the ledger's states of a point that no job has (jobs/ledger.py) -> the state shown
_LEDGER_STATES = {sr.WAITING: WAITING, sr.CANCELLED: "CANCELLED", sr.GAVE_UP: GAVE_UP, sr.NOT_SUBMITTED: NOT_SUBMITTED,
                  sr.SUBMITTING: NOT_SUBMITTED}


def combine(point: dict[str, Any], run_dir: Path, answer: SchedulerAnswer, packed: bool = False,
            results: ResultsFile | None = None) -> PointState:
    """Return one point's state: the scheduler's, except that a completed run.yaml always wins.

    ``packed``: the point shares its job id with other points (``--pack K``), so the job's state is
    the task's, and the point's own run.yaml decides first. ``results``: the sweep's results file
    (jobs/results.py), asked before the run dir where the run's own record is needed: a line of the point's
    current hand-off says how its run ended without reading run.yaml.
    """
    job_id = point.get("job_id")
    params = point.get("params", {})
    ps = PointState(point["index"], run_dir, params, job_id, UNKNOWN, "record", extra=point.get("extra", {}),
                    excluded=list(point.get("exclude") or []))
    if not job_id:
        ps.state = _LEDGER_STATES.get(point.get("submit", ""), NOT_SUBMITTED)
        if point.get("submit") == sr.GAVE_UP:
            ps.recorded_cause = point.get("cause") or {}
        return ps
    status = answer.status(job_id) if starts_with_digit(job_id) else None
    if status is not None:
        ps.state, ps.source, ps.elapsed = status.state.value, answer.source, _elapsed_text(status.elapsed_s)
        ps.scheduler_state, ps.exit_code, ps.status = status.raw or status.state.value, status.exit_text, status
        ps.requeues = status.requeues
        ps.node = status.node
        ps.history = [{"state": a.state, "node": a.node} for a in answer.attempts.get(job_id, [])[:-1]]
        if packed:
            ended = results.of(point) if results is not None else None
            ps.state, ps.source = _packed_state(ps, ps.state, ended.status if ended else run_status(run_dir))
            if ended is not None and ps.source == "run.yaml":
                ps.source = RESULTS_FILE
            return ps
        if ps.state in FAILED_STATES and (run_dir / "summary.json").is_file():
            # a job killed after the run finished (e.g. while saving submitit's result) still has results
            ended = results.of(point) if results is not None else None
            if ended is not None:
                state, src = RUN_STATUS_STATES[ended.status], RESULTS_FILE
            else:
                state, src = _state_from_record(run_dir, False)
            if state == DONE:
                ps.state, ps.source = state, src
        return ps
    ended = results.of(point) if results is not None else None
    if ended is not None:
        ps.state, ps.source = RUN_STATUS_STATES[ended.status], RESULTS_FILE
        return ps
    ps.state, ps.source = _state_from_record(run_dir, is_local_job(job_id), job_id)
    return ps


def job_alive(answer: SchedulerAnswer, job_id: str | None) -> bool:
    """Whether a scheduler's job may still run: queued or running, or not yet in its accounting (which lags a few
    seconds behind the submission); a local job never is."""
    if not is_scheduler_job(job_id):
        return False
    status = answer.status(job_id)
    return status is None or not status.state.final


def unclaimed_trial(point: dict[str, Any], run_dir: Path, workers_alive: bool) -> PointState:
    """A tune trial no worker has claimed: PENDING while a worker may still claim it, else NOT-STARTED."""
    state = "PENDING" if workers_alive else NOT_STARTED
    return PointState(point["index"], run_dir, {}, None, state, "record")


def _first_exception(path: Path) -> str | None:
    """The first exception line of a traceback file: with chained exceptions, the root cause."""
    try:  # a regular file only, its first MiB (a traceback file, not a stream)
        fd = open_regular(path, "error file")
        if fd is None:
            return None
        with open(fd, "rb") as f:
            text = f.read(1 << 20).decode("utf-8", "replace")
    except (OSError, UserError):
        return None
    for line in text.splitlines():
        if EXCEPTION_LINE.match(line):
            return line.strip()
    return None


def error_line(ps: PointState, logs: JobLogs | None) -> str | None:
    """Return the line that says why a point failed: error.txt's root cause, run.yaml's error, the job's log."""
    rec = _read_record(ps.run_dir) if ps.run_dir.is_dir() else {}
    err = rec.get("error") if isinstance(rec.get("error"), dict) else {}
    at = f" (at id '{err['id']}')" if err.get("id") else ""
    line = _first_exception(ps.run_dir / "error.txt")
    if line:
        return line + at
    if err.get("message") or err.get("type"):
        return f"{err.get('type', 'Error')}: {err.get('message', '')}".strip() + at
    found = _log_line(ps, logs)
    if found is not None:
        return found.text
    if ps.state == NOT_SUBMITTED:
        return "not submitted (the scheduler refused its submission; `hpc-runner resume` sends it)"
    return None


def failure_text(state: PointState, logs: JobLogs | None) -> str:
    """Return the line that says why a failed point failed: its cause's text, else the error line."""
    cause = state.cause
    if cause is None:
        return error_line(state, logs) or ""
    if cause.kind in ("ERROR", "BAD_INPUT", "OUT_OF_MEMORY") and not cause.where:
        # an error run.yaml does not place (an older record, or a job that died before writing it):
        # error.txt's root cause or the job log says more
        return error_line(state, logs) or cause.text()
    return cause.text()


def counts(states: Sequence[PointState]) -> Counter:
    """Return how many points are in each state."""
    return Counter(s.state for s in states)


def cause_counts(states: Sequence[PointState]) -> Counter:
    """Return how many failed points have each cause."""
    return Counter(s.cause_kind for s in states if s.cause_kind)


def _requeue_counter(rec: dict[str, Any]) -> int:
    """run.yaml's requeue counter: the restarts of the attempt that wrote it, as its scheduler said."""
    return recorded_job(rec).restarts


def explain_failures(states: Sequence[PointState], logs: JobLogs | None) -> None:
    """Set ``cause`` (and run.yaml's requeue count) on every failed point; reads only failed points' files."""
    for ps in states:
        if ps.state not in FAILED_STATES:
            continue
        if ps.recorded_cause is not None:  # the ledger gave it up and said why

            ps.cause = Cause(ps.recorded_cause.get("kind", "ERROR"), message=ps.recorded_cause.get("message"))
            continue
        rec = _read_record(ps.run_dir) if ps.run_dir.is_dir() else {}
        ps.requeues = max(ps.requeues, _requeue_counter(rec))
        ps.cause = decide(ps.state, ps.status, rec, lambda p=ps: _log_line(p, logs))


def _log_line(ps: PointState, logs: JobLogs | None) -> LogLine | None:
    """The job log's telling line (the scheduler's own verdict, else the last exception), for a point run.yaml
    cannot explain; the executor's ``JobLogs`` knows where its jobs' logs are."""
    if not (ps.job_id and logs is not None and starts_with_digit(ps.job_id)):
        return None
    return logs.line(ps.job_id)

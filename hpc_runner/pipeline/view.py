"""Where every stage of a pipeline stands, read-only: the pipeline record, each stage's own folder, the scheduler.

A stage the record holds as planned, done, failed, cancelled or not-submitted is shown so (with its
cause). A queued stage is shown as its work goes: a sweep, tune, run or sharded stage from its own
folder (jobs/states.py: one sacct call each), a select or export stage from its job's state, and a
pending job with squeue's reason (``Dependency``: it waits on its inputs).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from hpc_runner.errors import UserError
from hpc_runner.jobs.states import ENDED_WELL, UNKNOWN
from hpc_runner.jobs.targets import load_target
from hpc_runner.pipeline import record as pr
from hpc_runner.pipeline.model import CANCELLED, COMPLETED, FAILED, NOT_SUBMITTED, PENDING, PLANNED, RUNNING, StageView
from hpc_runner.pipeline.propagate import stage_executor
from hpc_runner.pipeline.selection import read_summary
from hpc_runner.pipeline.stages.registry import kind_of
from hpc_runner.records.numbers import starts_with_digit
from hpc_runner.scheduler.job_status import JobState

_RECORDED = {pr.PLANNED: PLANNED, pr.DONE: COMPLETED, pr.FAILED: FAILED, pr.CANCELLED: CANCELLED,
             pr.NOT_SUBMITTED: NOT_SUBMITTED}


def view(directory: str | Path) -> tuple[pr.PipelineRecord, list[StageView]]:
    """Return the record and every stage's view (in submission order)."""
    record = pr.PipelineRecord.load(directory)
    views = [_stage_view(record, s) for s in record.stages]
    _pending_reasons(record, views)
    _input_ended(record, views)
    return record, views


def _input_ended(record: pr.PipelineRecord, views: list[StageView]) -> None:
    """A queued stage whose jobs ended unrun because its input failed or was cancelled (SLURM ends a job whose
    dependency can never be met) is shown cancelled, naming the input."""
    by_name = {v.name: v for v in views}
    for s in record.stages:
        v = by_name[s["name"]]
        if s.get("state") != pr.QUEUED or v.state not in (FAILED, PENDING):
            continue
        ended = [i for i in s.get("inputs") or [] if by_name[i].state in (FAILED, CANCELLED)]
        if ended and (v.state == FAILED or v.reason == "DependencyNeverSatisfied"):
            v.state = CANCELLED
            v.cause = {"kind": "INPUT_FAILED", "message": f"stage '{ended[0]}' {by_name[ended[0]].state.lower()}: "
                       f"{(by_name[ended[0]].cause or {}).get('message', '')}".rstrip(": ")}
            v.detail = f"{v.cause['kind']}: {v.cause['message']}"


def _stage_view(record: pr.PipelineRecord, s: dict[str, Any]) -> StageView:
    name, kind, state = s["name"], kind_of(s.get("kind")), s.get("state")
    v = StageView(name, kind, _RECORDED.get(state, PENDING), record.stage_dir(name), list(s.get("jobs") or []),
                  cause=s.get("cause"))
    v.detail = kind.recorded_detail(s)
    if state in (pr.FAILED, pr.CANCELLED, pr.NOT_SUBMITTED) and v.cause:
        v.detail = f"{v.cause.get('kind')}: {v.cause.get('message')}"
    kind.look(record, v, state)
    return v


def from_folder(v: StageView, done: bool) -> None:
    """A sweep, tune, run or sharded stage: its points' states (one scheduler call)."""
    try:
        v.target = load_target(v.folder)
        v.points, v.answer = v.target.states()
    except UserError as exc:
        v.state, v.detail = (COMPLETED if done else PENDING), f"its folder cannot be read: {exc.message}"
        return
    counts = Counter(p.state for p in v.points)
    what = v.kind.unit
    v.detail = f"{len(v.points)} {what}(s): " + ", ".join(f"{n} {st}" for st, n in counts.most_common())
    if done or all(p.state in ENDED_WELL for p in v.points):
        v.state = COMPLETED
    elif any(p.state == "RUNNING" for p in v.points):
        v.state = RUNNING
    elif any(p.active or (p.state == UNKNOWN and p.job_id) for p in v.points):  # UNKNOWN: sacct lags sbatch
        v.state = PENDING
    else:
        v.state = FAILED
        failed = [p for p in v.points if p.failed]
        if failed:
            first = failed[0]
            v.cause = {"kind": first.cause_kind or first.state, "message": f"{len(failed)} {what}(s) failed"}


def from_job(record: pr.PipelineRecord, v: StageView) -> None:
    """A select or export stage: its job's state (one scheduler call)."""
    jobs = [j for j in v.jobs if j and starts_with_digit(j)]
    if not jobs:
        v.state = PENDING if v.jobs else PLANNED
        return
    answer = stage_executor(record, v.name).query(jobs)
    status = answer.status(jobs[-1])
    state = status.state.value if status is not None and status.state is not JobState.UNKNOWN else ""
    v.state = {"": PENDING, JobState.COMPLETED.value: COMPLETED, JobState.PENDING.value: PENDING,
               JobState.RUNNING.value: RUNNING}.get(state, FAILED if state else PENDING)
    if v.state == FAILED:
        v.cause = v.cause or {"kind": state, "message": f"job {jobs[-1]} ended {state}"}
        v.detail = v.detail or f"job {jobs[-1]} ended {state}"


def _pending_reasons(record: pr.PipelineRecord, views: list[StageView]) -> None:
    """squeue's reason for the pending jobs of the queued stages (one call)."""
    ids = [j for v in views if v.state == PENDING for j in v.jobs if j and starts_with_digit(j)]
    if not ids:
        return
    try:
        reasons = stage_executor(record).pending_reasons(ids)
    except Exception:  # status shows the states even when squeue does not answer
        return
    by_array = {j.split("_")[0]: r for j, r in reasons.items()}
    for v in views:
        found = [by_array[j.split("_")[0]] for j in v.jobs if j.split("_")[0] in by_array]
        if found:
            v.reason = found[0]


def metrics_line(run_dir: Path) -> str:
    """Return a run's results from its summary.json: an evaluation's mean metrics, an inference's count, a
    training's final and best metric."""
    summary = read_summary(run_dir)
    metrics = summary.get("metrics")
    if isinstance(metrics, dict) and metrics:
        means = [f"{n} {s['mean']:.4g}" for n, s in metrics.items()
                 if isinstance(s, dict) and isinstance(s.get("mean"), int | float)]
        return f"{summary.get('kind', 'evaluation')} of {summary.get('count')} case(s): mean " + ", ".join(means)
    if summary.get("kind") == "inference":
        return f"inference of {summary.get('count')} case(s) into {summary.get('predictions_dir')}"
    name = summary.get("metric_name")
    if name and summary.get(name) is not None:
        return f"{name} {summary[name]:.4g} (best {summary.get('best_metric')})"
    return "no summary.json" if not summary else f"status {summary.get('status')}"


def render(record: pr.PipelineRecord, views: list[StageView]) -> str:
    """Return the stage table ``status DIR`` prints."""
    rows = [("stage", "kind", "state", "jobs", "detail")]
    for v in views:
        state = v.state + (f" ({v.reason})" if v.reason and v.state == PENDING else "")
        jobs = ",".join(v.jobs[:3]) + (f",+{len(v.jobs) - 3}" if len(v.jobs) > 3 else "")
        rows.append((v.name, v.kind.name, state, jobs or "-", v.detail or "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [f"pipeline {record.path} ({len(views)} stages, created {record.data.get('created')})"]
    lines += ["  " + "  ".join(r[i].ljust(widths[i]) for i in range(4)) + "  " + r[4] for r in rows]
    counts = Counter(v.state for v in views)
    lines.append("  " + ", ".join(f"{n} {st}" for st, n in counts.most_common()))
    return "\n".join(lines)

"""The text of ``hpc-runner status``: a header, counts per state and cause, and a table of the points."""

from __future__ import annotations

from typing import Any

from hpc_runner.data.staging import shared_bytes_of
from hpc_runner.jobs.governor import waiting_indices
from hpc_runner.jobs.states import cause_counts, counts, failure_text
from hpc_runner.scheduler.job_state import FROM_ACCOUNTING, FROM_QUEUE
from hpc_runner.sweep.spec import format_cell

MAX_ROWS = 40
MAX_ERRORS = 20


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def _clock(at: str | None) -> str:
    """``2026-11-25T21:26:57+00:00`` -> ``2026-11-25 21:26:57``."""
    return (at or "").split("+")[0].replace("T", " ") or "now"


def _said(answer: Any, source: str) -> str:
    """What the answer's backend calls ``source``, for people (SLURM: sacct, squeue)."""
    words = getattr(answer, "words", None) or {}
    return words.get(source, source)


def states_source(answer: Any) -> str:
    """Where the states come from, for people, in the backend's words: ``sacct, 1 call``, ``squeue (sacct did not
    answer)``, ``the run records`` (no scheduler: local runs), or that the scheduler cannot be reached."""
    source = getattr(answer, "source", None)
    calls = getattr(answer, "calls", 0)
    if source == FROM_ACCOUNTING:
        said = _said(answer, source)
        return f"{said}, {calls} call{'s' if calls != 1 else ''}" if calls else said
    if source == FROM_QUEUE:
        return f"{_said(answer, source)} ({_said(answer, FROM_ACCOUNTING)} did not answer)"
    if getattr(answer, "error", None):
        return f"the run records (the scheduler cannot be reached, as of {_clock(getattr(answer, 'at', None))})"
    return "the run records"


def _accounting_reason(error: str, accounting: str) -> str:
    """Return the accounting's own reason from the error of an answer the queue gave (``sacct: ...``), one line."""
    text = " ".join(error.removeprefix(f"{accounting}:").split())  # its stderr may span lines: the note is one
    return text if len(text) <= 160 else text[:157] + "..."


def scheduler_note(answer: Any) -> str | None:
    """One line when the scheduler could not be asked (instead of its commands' raw errors), else None."""
    if not getattr(answer, "error", None):
        return None
    at = _clock(getattr(answer, "at", None))
    if getattr(answer, "source", None) == FROM_QUEUE:
        accounting, queue = _said(answer, FROM_ACCOUNTING), _said(answer, FROM_QUEUE)
        reason = _accounting_reason(answer.error, accounting)
        return f"{accounting} did not answer ({reason}); states are from {queue} and the run records, as of {at}"
    return f"the scheduler cannot be reached; states are from the run records, as of {at}"


def render(target: Any, states: list[Any], answer: Any, show_all: bool = False) -> str:
    """Return the status report as text."""
    c = counts(states)
    what = target.title(len(states))  # "sweep of N points", "run" (jobs/targets.py)
    profile = (target.record.data if target.record else target.run_record or {}).get("cluster") or {}
    if not profile and target.run_record:
        profile = (target.run_record.get("job") or {}).get("cluster") or {}
    head = f"{what} in {target.path} (profile {profile.get('profile', '?')}; states from {states_source(answer)})"
    lines = [head]
    note = scheduler_note(answer)
    if note:
        lines.append(f"  note: {note}")
    if target.record is not None and not target.record.submit_calls_left():  # jobs/ledger.py: its sbatch budget

        waiting = len(waiting_indices(target.record))
        lines.append(f"  stopped submitting: {target.record.budget_note()}"
                     + (f"; {waiting} point(s) wait" if waiting else ""))
    lines.append("  " + "  ".join(f"{state} {n}" for state, n in sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))))
    by_cause = cause_counts(states)
    if by_cause:
        ordered = sorted(by_cause.items(), key=lambda kv: (-kv[1], kv[0]))
        lines.append("  causes: " + "  ".join(f"{k} {n}" for k, n in ordered))
    requeued = sum(1 for s in states if s.requeues)
    if requeued:
        lines.append(f"  requeued: {requeued} point(s), {sum(s.requeues for s in states)} requeue(s) in all")
    nodes = {s.node for s in states if s.node}
    if len(nodes) > 1:
        lines.append(f"  nodes: {len(nodes)} ({', '.join(sorted(nodes)[:8])}{', ...' if len(nodes) > 8 else ''})")
    excluded = [s for s in states if s.excluded]
    for s in excluded[:MAX_ERRORS]:
        lines.append(f"  point {s.index} excludes node {', '.join(s.excluded)} (it failed there twice)")
    failed = [s for s in states if s.failed]
    params = target.param_ids
    shared = _shared_bytes(states)
    if shared:
        total = sum(shared.values())
        lines.append(f"  read from shared storage: {total / 1e6:.1f} MB over {len(shared)} point(s) (data_io.json)")
    if show_all or len(states) <= MAX_ROWS:
        shared_head = ["shared MB"] if shared else []
        rows = [["point", "state", "cause", "job", "node", "requeues", *shared_head, *params, "error"]]
        for s in states:
            eff = {**s.params, **s.extra}
            err = failure_text(s, target.job_logs) if s.failed else ""
            mb = [f"{shared[s.index] / 1e6:.1f}" if s.index in shared else "-"] if shared else []
            rows.append([str(s.index), s.state, s.cause_kind or "-", s.job_id or "-", s.where(), str(s.requeues),
                         *mb, *(format_cell(eff.get(p)) for p in params), err[:300]])
        lines.append(_table(rows))
    elif failed:
        lines.append(f"failed points ({len(failed)}; --all lists every point):")
        for s in failed[:MAX_ERRORS]:
            lines.append(f"  {s.index}  {s.cause_kind or s.state}  {s.job_id or '-'}  {s.where()}  "
                         f"{failure_text(s, target.job_logs)[:300]}")
        if len(failed) > MAX_ERRORS:
            lines.append(f"  ... and {len(failed) - MAX_ERRORS} more")
    if failed and target.hints_resume:
        lines.append(f"resubmit the failed ones: hpc-runner resume {target.path}")
        if by_cause.get("TIMEOUT"):
            lines.append(f"  only the timed-out ones, longer: hpc-runner resume {target.path} --cause TIMEOUT "
                         "--scheduler-option time=...")
    return "\n".join(lines)


def _shared_bytes(states: list[Any]) -> dict[int, int]:
    """Each point's bytes read from shared storage (its run dir's data_io.json: data/staging.py), where recorded."""
    from pathlib import Path

    out = {}
    for s in states:
        if s.run_dir and Path(s.run_dir).is_dir():
            value = shared_bytes_of(Path(s.run_dir))
            if value is not None:
                out[s.index] = value
    return out

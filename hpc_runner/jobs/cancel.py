"""Cancel the queued and running jobs of a sweep (or of one submitted run) with one scancel call."""

from __future__ import annotations

from dataclasses import dataclass, field

from hpc_runner.jobs import ledger as sr
from hpc_runner.jobs.governor import cancel_waiting
from hpc_runner.jobs.targets import Target
from hpc_runner.records.rundir import RunDir, now_iso
from hpc_runner.scheduler.executor import is_scheduler_job


@dataclass
class Cancelled:
    """What cancel did."""

    job_ids: list[str] = field(default_factory=list)
    points: int = 0
    message: str = ""
    waiting: int = 0  # points no job had, now cancelled in the ledger


def cancel_target(target: Target) -> Cancelled:
    """Cancel every job of ``target`` that may still run; completed points are untouched.

    For a sweep the points no job has yet (waiting, not-submitted) are cancelled in the ledger first,
    under the sweep's lock, so that no task of the sweep submits them afterwards; the lock is held until
    the scheduler was asked to cancel the rest.
    """
    if target.record is None:
        return _cancel(target)

    refused: Exception | None = None
    with sr.locked(target.path) as ledger:
        target.record, target.points = ledger.record, ledger.points
        waiting = cancel_waiting(ledger)
        entry = ledger.note_cancel(waiting)
        try:
            out = _cancel(target)
        except Exception as exc:  # scancel refused: the waiting points stay cancelled all the same
            refused = exc
        else:
            entry["jobs"] = out.job_ids
    if refused is not None:
        raise refused
    out.waiting = waiting
    if waiting:
        out.message += f"; {waiting} waiting point(s) will not be submitted (now cancelled)"
    return out


def _cancel(target: Target) -> Cancelled:
    states, _ = target.states()
    live = [s for s in states if is_scheduler_job(s.job_id) and (s.active or s.state == "UNKNOWN")]
    workers = [j for j in target._worker_jobs() if is_scheduler_job(j)]  # a tune's workers run its trials
    out = Cancelled(points=len(live))
    ids = target.executor().cancel([s.job_id for s in live if s.job_id] + workers)
    if not ids:
        out.message = "nothing to cancel: no point is queued or running"
        return out
    out.job_ids = ids
    if target.record is None:
        RunDir(target.path).update_record(cancelled=now_iso())
    out.message = f"cancelled {len(live)} point(s): scancel {' '.join(ids)}"
    return out

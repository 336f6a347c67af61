"""Cancel the queued and running jobs of a sweep (or of one submitted run) with one scancel call."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field

from hpc_runner.errors import ClusterError
from hpc_runner.records.rundir import RunDir, now_iso
from hpc_runner.sweep.states import array_ids
from hpc_runner.sweep.targets import Target


@dataclass
class Cancelled:
    """What cancel did."""

    job_ids: list[str] = field(default_factory=list)
    points: int = 0
    message: str = ""
    waiting: int = 0  # waiting points turned not-submitted


def cancel_target(target: Target) -> Cancelled:
    """scancel every job of ``target`` that may still run; completed points are untouched.

    For a sweep the waiting points first become not-submitted, under the sweep's lock, so that no
    task of the sweep submits them afterwards; the lock is held until scancel returned.
    """
    if target.record is None:
        return _cancel(target)
    from hpc_runner.sweep import ledger as sr
    from hpc_runner.sweep.governor import cancel_waiting

    with sr.locked(target.path) as record:
        target.record, target.points = record, record.points
        waiting = cancel_waiting(record)
        try:
            out = _cancel(target)
        except BaseException:
            record.save()  # the waiting points stay cancelled even when scancel failed
            raise
        out.waiting = waiting
        if waiting:
            out.message += f"; {waiting} waiting point(s) will not be submitted (now not-submitted)"
        if out.job_ids or waiting:
            record.data.setdefault("cancelled", []).append({"at": now_iso(), "jobs": out.job_ids, "waiting": waiting})
    return out


def _cancel(target: Target) -> Cancelled:
    states, _ = target.states()
    live = [s for s in states if s.job_id and s.job_id != "local" and (s.active or s.state == "UNKNOWN")]
    ids = array_ids(s.job_id for s in live)
    out = Cancelled(points=len(live))
    if not ids:
        out.message = "nothing to cancel: no point is queued or running"
        return out
    out.job_ids = ids
    try:
        res = subprocess.run(["scancel", *ids], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ClusterError(f"scancel failed: {exc}") from None
    if res.returncode != 0 and "already completing or completed" not in res.stderr:
        raise ClusterError(f"scancel refused: {res.stderr.strip()[:500]}")
    if target.record is None:
        RunDir(target.path).update_record(cancelled=now_iso())
    out.message = f"cancelled {len(live)} point(s): scancel {' '.join(ids)}"
    return out

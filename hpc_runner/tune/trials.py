"""A tune's trials in its sweep ledger: a worker claims the next trial of the budget, takes up the one it left
running, and records how it ended (tune/worker.py calls these under the sweep's lock).

A tune's trials are points of its sweep.yaml made at the start (one per trial of the budget, params empty
until a worker claims one), so ``status`` lists them from the start; only the tune knows trials.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from hpc_runner.jobs import ledger as sr
from hpc_runner.records.ledger_record import TransitionError
from hpc_runner.records.rundir import now_iso

RUNNING, COMPLETED, PRUNED, FAILED = "running", "completed", "pruned", "failed"
FINISHED = (COMPLETED, PRUNED, FAILED)


class TrialLedger(sr.Ledger):
    """The sweep ledger of a tune, with the transitions of its trials."""

    def claim_trial(self, worker: int, job_id: str | None, params: dict[str, Any], trial: Any) -> dict[str, Any] | None:
        """Give worker ``worker`` the next unclaimed trial point; None when the budget is spent."""
        for n, p in enumerate(self.record.points):
            if p.get("trial") is None and p.get("state") is None:
                p.update(params=params, trial=trial.number, trial_id=getattr(trial, "_trial_id", None),
                         worker=worker, state=RUNNING, job_id=job_id or "local", started=now_iso())
                p["submit"] = sr.SUBMITTED
                p.setdefault("jobs", []).append(job_id or "local")
                self.events.append(("claim", n))
                return p
        return None

    def resume_trial(self, index: int, job_id: str | None) -> dict[str, Any]:
        """A worker takes up again the trial it left running (it was requeued or restarted)."""
        p = self.record.points[index]
        if p.get("state") != RUNNING:
            raise TransitionError(f"trial point {index} is {p.get('state')}, not running", where=str(self.record.file))
        p["job_id"] = job_id or "local"
        p["resumed"] = int(p.get("resumed", 0)) + 1
        self.events.append(("resume_trial", index))
        return p

    def finish_trial(self, index: int, state: str, value: float | None, epochs: int | None,
                     error: str | None) -> None:
        """Record how a trial ended (completed, pruned or failed); a finished trial is never changed again."""
        p = self.record.points[index]
        if p.get("state") in FINISHED:
            return  # told before (a worker killed between the tell and this write): nothing to change
        if state not in FINISHED:
            raise TransitionError(f"a trial cannot end {state}", where=str(self.record.file))
        p.update(state=state, value=value, epochs=epochs, ended=now_iso())
        if error:
            p["error"] = error[:500]
        self.events.append(("finish_trial", index))

    def unclaimed_trials(self) -> int:
        """Return how many trials of the budget no worker has claimed yet."""
        return sum(1 for p in self.record.points if p.get("trial") is None and p.get("state") is None)


def locked(path: str | Path, timeout: float = 600.0) -> contextlib.AbstractContextManager[TrialLedger]:
    """Take the tune's sweep lock, read sweep.yaml, yield its TrialLedger; write it atomically on exit."""
    return TrialLedger.locked(path, timeout)

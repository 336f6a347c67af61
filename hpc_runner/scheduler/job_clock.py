"""Whether a job still has time for more work: the job side's clock, in neutral words.

A packed sweep task (jobs/task.py) keeps a :class:`JobClock`: before each point it asks ``can_start``, and a
point is started only if ``now + estimate + margin <= end``, where the estimate is the longest point this task
has run so far (or the profile's ``point_minutes`` before the first one ends) and the margin is how long before
the end the stop signal may come (``job_env.stop_margin_s``). A point that is not started goes back to the sweep
as waiting, so it is never lost.

The trainer keeps a :class:`CheckpointTimer`: it saves once, mid-epoch, when the time left falls below one epoch
(as measured so far) plus the time a save takes, so a job killed at its limit (or stopped by the signal) loses at
most that much work.

The job's end comes from the scheduler (``job_env.job_end_time``: SLURM's in scheduler/slurm/job_clock.py); the
decisions here are pure functions of the given clock, so they are tested without waiting for a job.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field


def point_estimate_s(durations: list[float], hint_s: float | None = None) -> float | None:
    """Return how long the next point may take: the longest so far, else the profile's hint, else None."""
    if durations:
        return max(durations)
    return hint_s


def can_start(now: float, end: float | None, estimate_s: float | None, margin_s: float) -> bool:
    """Whether a point started at ``now`` ends (estimate) before the stop signal at ``end - margin``.

    No end time (no limit, or SLURM did not answer): yes. No estimate yet: yes while the stop signal has
    not come due, since the point checkpoints on the signal like any run.
    """
    if end is None:
        return True
    return now + (estimate_s or 0.0) + max(0.0, margin_s) <= end


@dataclass
class JobClock:
    """The job's end, the stop margin, and the durations of the points this task ran so far."""

    end: float | None
    margin_s: float = 0.0
    hint_s: float | None = None
    durations: list[float] = field(default_factory=list)

    def can_start(self, now: float) -> bool:
        """Whether one more point fits before the end (see `can_start`)."""
        return can_start(now, self.end, point_estimate_s(self.durations, self.hint_s), self.margin_s)

    def ran(self, seconds: float) -> None:
        """Record how long a point took (its wall time in this task)."""
        self.durations.append(float(seconds))

    def why_not(self, now: float) -> str:
        """Say why no more point starts (for the task's log and the returned points)."""
        est = point_estimate_s(self.durations, self.hint_s) or 0.0
        left = (self.end or now) - now
        return (f"{left:.0f} s left before the job's end, a point takes up to {est:.0f} s "
                f"and the stop signal comes {self.margin_s:.0f} s before the end")

    def record(self) -> dict[str, object]:
        """Return what the task records about its clock."""
        end = _dt.datetime.fromtimestamp(self.end).astimezone().isoformat(timespec="seconds") if self.end else None
        return {"end": end, "margin_s": self.margin_s, "point_hint_s": self.hint_s}


# ---------------------------------------------------------------- checkpoints timed to the limit


def checkpoint_due(now: float, end: float | None, epoch_s: float | None, save_s: float) -> bool:
    """Whether a training run should save now: the time left before the job's ``end`` has fallen below one
    epoch (as measured so far) plus the time a save takes, so the epoch's own checkpoint would come too late.

    No end (no limit, or not in a job) or no epoch measured yet: no.
    """
    if end is None or epoch_s is None:
        return False
    return end - now < epoch_s + max(0.0, save_s)


@dataclass
class CheckpointTimer:
    """The job's end and how long an epoch and a save take; says once per run when to save before the end."""

    end: float | None
    epoch_s: float | None = None  # the longest epoch so far, or the current one's estimate from its steps
    save_s: float = 0.0  # the longest save so far
    fired: bool = False

    def due(self, now: float, epoch_s: float | None = None) -> str | None:
        """Return why a checkpoint is due now (once per run), None when it is not."""
        estimate = max(filter(None, (self.epoch_s, epoch_s)), default=None)
        if self.fired or not checkpoint_due(now, self.end, estimate, self.save_s):
            return None
        self.fired = True
        left = (self.end or now) - now
        return (f"{left:.0f} s left before the job's time limit, less than one epoch ({estimate:.0f} s) plus a save "
                f"({self.save_s:.1f} s): the epoch's own checkpoint would come too late")

    def epoch_took(self, seconds: float) -> None:
        """Record an epoch's wall time."""
        self.epoch_s = max(self.epoch_s or 0.0, float(seconds))

    def save_took(self, seconds: float) -> None:
        """Record a save's wall time."""
        self.save_s = max(self.save_s, float(seconds))

"""``resume`` of a tune dir: restart the workers whose trial was left running, and workers for the unspent budget.

A worker index owns the trial it left ``running`` (it continues it from its checkpoint), so a dead
worker with such a trial is restarted under the same index. Workers for trials not yet started take
the free indices, never more than the tune's workers alive at once. Finished trials (completed,
pruned, failed) are never run again: Optuna was told their result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hpc_runner.jobs.submitted import Submitted
from hpc_runner.scheduler.executor import is_scheduler_job
from hpc_runner.scheduler.select import executor_for
from hpc_runner.tune.submit import run_workers_here, send_workers, worker_jobs
from hpc_runner.tune.trials import RUNNING


@dataclass
class TunePlan:
    """Which worker indices to restart and why, and what stays as it is."""

    restart: list[int] = field(default_factory=list)  # dead workers whose trial is left running
    new: list[int] = field(default_factory=list)  # workers for trials not yet started
    alive: list[int] = field(default_factory=list)  # workers still queued or running
    unspent: int = 0  # trials of the budget not yet started

    @property
    def workers(self) -> list[int]:
        """Return every worker index to start."""
        return sorted(self.restart + self.new)


def plan_tune_resume(record: Any, queued: set[str]) -> TunePlan:
    """Sort the workers of a tune's ``record`` given the job ids ``queued`` (squeue's pending and running)."""
    jobs = worker_jobs(record)
    size = max(len(jobs), 1)  # the tune's --parallel: its first submission started workers 0..K-1
    alive = sorted(i for i, job in jobs.items() if job in queued)
    left_running = sorted({int(p["worker"]) for p in record.points
                           if p.get("state") == RUNNING and p.get("worker") is not None})
    restart = [w for w in left_running if w not in alive]
    unspent = sum(1 for p in record.points if p.get("trial") is None and p.get("state") is None)
    free = [i for i in range(size) if i not in alive and i not in restart]
    room = max(0, size - len(alive) - len(restart))
    return TunePlan(restart=restart, new=free[: min(unspent, room)], alive=alive, unspent=unspent)


def resume_tune(directory: Any, record: Any, profile: Any, *, hold: bool = False, preflight: bool = True,
                dry_run: bool = False, log: Any = print) -> tuple[TunePlan, Any]:
    """Plan and start the workers a tune dir needs; return the plan and the submission (None when none)."""
    from pathlib import Path

    executor = executor_for(profile)
    jobs = [j for j in worker_jobs(record).values() if is_scheduler_job(j)]
    plan = plan_tune_resume(record, executor.still_queued(jobs) if jobs else set())
    if dry_run or not plan.workers:
        return plan, None
    out = Submitted(Path(directory))
    send_workers(Path(directory), plan.workers, executor, reason="resume", out=out, hold=hold, preflight=preflight)
    if executor.runs_here:
        run_workers_here(Path(directory), executor, out, log)
    return plan, out

"""What one array task of a sweep runs: its K points, one after another (or P at a time).

A task with one point is the unpacked case. Each point keeps its own run dir, run.yaml, log and
records; a point that fails does not stop the others. When the task ends it asks the governor to
submit the sweep's waiting points into the slot it frees (slurm/governor.py).

Order of events in a task (see docs/packing.md):

1. Read its own points' lines of sweep.yaml (under the sweep lock, so the submitter has recorded this
   job's id): a point whose run.yaml says completed is skipped (the task was requeued after running
   it), and so is a point that no longer belongs to this job (the task returned it to the sweep, and
   the governor sent it elsewhere). A task never parses the whole sweep.yaml.
2. Ask the scheduler once for the job's end time (job_env.job_end_time; the clock: scheduler/job_clock.py).
3. Run the points: sequentially in this process (``parallel=1``: the imports and the data caches are
   paid once), or in P spawned worker processes, each pinned to its share of the job's GPUs and CPUs
   (resources/shares.py) before torch is imported. SIGUSR2/SIGTERM are stop requests for the whole
   task: running points checkpoint, no new point starts.
4. Points the clock says cannot finish before the end go back to the sweep as waiting, but never the
   task's first point: a task always runs at least one point, so no task is submitted for nothing and
   no chain of tasks returns a point unrun forever (a point returned ``max_returns`` times gives up,
   jobs/ledger.py).
5. If a point was stopped (or points were left unstarted by a stop), the task asks SLURM to requeue it
   once, after every running point has checkpointed; the requeued task skips what is done.

Each point that ended (completed or failed, its run.yaml final) gets its line in the sweep's results file as
soon as it ends, appended by the process that ran it (jobs/results.py ``record_point_result``): what collect
reads instead of the point's run dir.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import signal
import time
from collections import deque
from pathlib import Path
from typing import Any

from hpc_runner.data.staging import sweep_hold
from hpc_runner.engine.stop import clear_stop, install_stop_handlers, stop_requested
from hpc_runner.jobs import ledger as sr
from hpc_runner.jobs.governor import top_up_after_task
from hpc_runner.jobs.job import RunFailed, run_sweep_point
from hpc_runner.jobs.ledger import CANCELLED, GAVE_UP, LOCK_FILE, WAITING, read_point
from hpc_runner.jobs.results import handoff_of, record_point_result
from hpc_runner.jobs.targets import states_of
from hpc_runner.progress_bars import no_bars_without_a_terminal
from hpc_runner.quick_exit import freeze_at_exit
from hpc_runner.records.file_lock import exclusive
from hpc_runner.records.numbers import outside_int
from hpc_runner.records.rundir import RunDir, now_iso
from hpc_runner.resources.shares import (
    ASSIGNED_ENV,
    accessible_gpu_minors,
    describe_shares,
    job_cpus,
    slot_gpu_plan,
    slot_shares,
)
from hpc_runner.resources.threads import THREAD_VARIABLES
from hpc_runner.scheduler.executor import job_entry
from hpc_runner.scheduler.job_clock import JobClock
from hpc_runner.scheduler.job_env import grant_cpus, job_end_time, own_job_id, requeue_job, stop_margin_s

# per-point outcomes of a task (what run_sweep_task returns under "points")
COMPLETED, FAILED, PREEMPTED = "completed", "failed", "preempted"
SKIPPED = "skipped"  # completed before (the task was requeued), or now another job's
NOT_STARTED = "not-started"  # a stop request came first: the requeued task runs it
RETURNED = "returned"  # not enough time left in the job: back to the sweep as waiting


@job_entry
def run_sweep_task(
    sweep_dir: str,
    points: list[dict[str, Any]],
    entry: str | None = None,
    job_record: dict[str, Any] | None = None,
    parallel: int = 1,
) -> dict[str, Any]:
    """Run the points of one task (each ``{"index", "dir", "overrides"}``); raise RunFailed if any failed.

    With ``stage clean: end`` the task holds the sweep's hold on this node while it runs (and tops up) its points;
    the last task of the sweep to end on the node removes the copies its points read (data/staging.py)."""
    with sweep_hold(sweep_dir):
        return _run_task_points(sweep_dir, points, entry, job_record, parallel)


def _run_task_points(
    sweep_dir: str,
    points: list[dict[str, Any]],
    entry: str | None,
    job_record: dict[str, Any] | None,
    parallel: int,
) -> dict[str, Any]:
    freeze_at_exit()
    no_bars_without_a_terminal()
    task = own_job_id()
    outcomes: dict[int, str] = {}
    messages: dict[int, str] = {}
    requeued = None
    clear_stop()
    restore = install_stop_handlers()  # a stop between two points must not kill the task
    try:
        mine = _read_points(sweep_dir, [p["index"] for p in points])
        todo = []
        for p in points:
            why = _skip_reason(sweep_dir, p, mine.get(p["index"]), task)
            if why is None:  # with the hand-off the ledger names, which its line in the results file records
                todo.append({**p, "handoff": handoff_of(mine.get(p["index"]) or {})})
            else:
                outcomes[p["index"]], messages[p["index"]] = why
        clock = _task_clock(job_record, task)
        pack = {"task": task or "local", "points": [p["index"] for p in points], "parallel": max(1, parallel)}
        print(f"hpc-runner: task {task or 'local'} runs {len(todo)} of {len(points)} point(s)"
              f"{f', {parallel} at a time' if parallel > 1 else ''}", flush=True)
        if parallel > 1 and len(todo) > 1:
            run = _run_concurrent(sweep_dir, todo, entry, job_record, min(parallel, len(todo)), clock, pack)
        else:
            run = _run_sequential(sweep_dir, todo, entry, job_record, clock, pack)
        for index, (status, message) in run.items():
            outcomes[index], messages[index] = status, message
        returned = [i for i, s in outcomes.items() if s == RETURNED]
        if returned:
            _return_points(sweep_dir, returned, task, clock.why_not(time.time()))
        stopped = [i for i, s in outcomes.items() if s in (PREEMPTED, NOT_STARTED)]
        if stopped:
            requeued = requeue_job()
            if not requeued:
                reason = stop_requested() or "a stop request"
                for i in stopped:
                    outcomes[i], messages[i] = FAILED, f"stopped by {reason} and not requeued"
    finally:
        if task is None:
            restore()  # in a job the flag-only handlers stay: a stop signal that comes while the finished
            # task exits must not kill it (submitit's USR2 handler would, and the job would end FAILED)
        _top_up(sweep_dir, run_sweep_task)
    failed = [f"point {i}: {messages[i]}" for i, s in outcomes.items() if s == FAILED]
    if failed and not requeued:
        raise RunFailed(f"{len(failed)} of {len(points)} point(s) failed: " + "; ".join(failed)[:2000])
    status = PREEMPTED if requeued else COMPLETED
    out: dict[str, Any] = {"status": status, "points": outcomes}
    if requeued:
        out["requeued"] = requeued
    return out


def _read_points(sweep_dir: str, indices: list[int]) -> dict[int, dict[str, Any]]:
    """This task's points as the ledger has them, read under the sweep's lock (which the submitter holds
    until it has recorded this job's id), each from its own line of sweep.yaml."""
    with exclusive(Path(sweep_dir) / LOCK_FILE, what=f"the sweep {sweep_dir}"):
        return {i: read_point(sweep_dir, i) for i in indices}


def _skip_reason(sweep_dir: str, point: dict[str, Any], recorded: dict[str, Any] | None,
                 task: str | None) -> tuple[str, str] | None:
    """Why this task must not run ``point`` (an outcome and a message), or None to run it."""
    run = RunDir(Path(sweep_dir) / point["dir"]).record()
    if run.get("status") == COMPLETED:
        return SKIPPED, "completed before"
    if run.get("status") == FAILED and task and (run.get("job") or {}).get("id") == task:
        return FAILED, "failed earlier in this job (see its error.txt)"  # a requeued task does not retry it
    if task is None or recorded is None:
        return None
    owner, state = recorded.get("job_id"), recorded.get("submit")
    if owner not in (None, task):
        return SKIPPED, f"now belongs to job {owner}"
    if owner is None and state in (WAITING, CANCELLED, GAVE_UP):
        return SKIPPED, f"{state} in the sweep (not this job's any more)"
    return None


def _task_clock(job_record: dict[str, Any] | None, task: str | None) -> Any:
    """The job's end (one scheduler call) and the margin and hint of the profile it was submitted with."""
    settings = (job_record or {}).get("clock") or {}
    margin = stop_margin_s(settings.get("signal_delay_s"))
    minutes = settings.get("point_minutes")
    hint = float(minutes) * 60 if isinstance(minutes, int | float) and minutes > 0 else None
    return JobClock(job_end_time(task) if task else None, margin, hint)


def _return_points(sweep_dir: str, indices: list[int], task: str | None, why: str) -> None:
    """Put the points this task could not start back in the sweep's queue (only those still ours)."""
    with sr.locked(sweep_dir) as ledger:
        ours = [i for i in indices if ledger.return_point(i, task, why)]
        gave_up = [i for i in ours if ledger.points[i].get("submit") == sr.GAVE_UP]
    print(f"hpc-runner: {len(ours)} point(s) go back to the sweep as waiting ({why}): "
          f"{', '.join(map(str, ours))}", flush=True)
    if gave_up:
        print(f"hpc-runner: point(s) {', '.join(map(str, gave_up))} returned too often; they fail with cause "
              "RETURNED", flush=True)


def _run_one(
    sweep_dir: str, p: dict[str, Any], entry: str | None, job_record: dict[str, Any] | None, pack: dict[str, Any]
) -> tuple[str, str]:
    """Run one point in this process; return (outcome, message). A point that ended gets its line in the
    sweep's results file (one that was stopped to be requeued has not ended)."""
    run_dir = f"{sweep_dir}/{p['dir']}"
    try:
        res = run_sweep_point(sweep_dir, p["index"], run_dir, p["overrides"], entry, job_record, pack=pack)
    except Exception as exc:  # the point's run.yaml and error.txt say why; go on with the next
        record_point_result(sweep_dir, p["index"], p.get("handoff"), run_dir)
        return FAILED, str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if res.get("status") == PREEMPTED:
        return PREEMPTED, "checkpointed"
    record_point_result(sweep_dir, p["index"], p.get("handoff"), run_dir)
    return COMPLETED, ""


def _run_sequential(
    sweep_dir: str,
    todo: list[dict[str, Any]],
    entry: str | None,
    job_record: dict[str, Any] | None,
    clock: Any,
    pack: dict[str, Any],
) -> dict[int, tuple[str, str]]:
    """Run the points one after another in this process."""
    out: dict[int, tuple[str, str]] = {}
    for p in todo:
        if stop_requested():
            out[p["index"]] = NOT_STARTED, f"{stop_requested()} came before it started"
            continue
        if out and not clock.can_start(time.time()):  # the first point always runs (module doc, step 4)
            out[p["index"]] = RETURNED, clock.why_not(time.time())
            continue
        t0 = time.monotonic()
        out[p["index"]] = _run_one(sweep_dir, p, entry, job_record, {**pack, "slot": 0})
        clock.ran(time.monotonic() - t0)
    return out


# ---------------------------------------------------------------- concurrent packing


def _worker_main(
    slot: int, share: dict[str, Any], gpus: list[str], cpus: list[int], sweep_dir: str, entry: str | None,
    job_record: dict[str, Any] | None, pack: dict[str, Any], inbox: Any, outbox: Any,
) -> None:
    """One slot's process: pin to its GPUs and CPUs before torch loads, then run the points it is given."""
    _pin(gpus, cpus)

    install_stop_handlers()  # for the process's whole life: an idle worker must not die of SIGUSR2
    try:
        import monai  # noqa: F401 - paid once per worker, before its first point
        import torch  # noqa: F401
    except ImportError:
        pass
    while True:
        p = inbox.get()
        if p is None:
            return
        if stop_requested():
            outbox.put((slot, p["index"], NOT_STARTED, f"{stop_requested()} came before it started", 0.0))
            continue
        t0 = time.monotonic()
        status, message = _run_one(sweep_dir, p, entry, job_record, {**pack, **share})
        outbox.put((slot, p["index"], status, message, time.monotonic() - t0))


def _pin(gpus: list[str], cpus: list[int]) -> None:
    """Give this process its share: CUDA_VISIBLE_DEVICES (ids this process can open, resources/shares.py) with
    HPCR_ASSIGNED_GPUS (so a slot that was given GPUs and sees none stops instead of training on the CPU),
    the affinity mask and the CPU count that resources/cpus.py reads (SLURM_CPUS_PER_TASK), and no larger
    thread counts inherited from the job."""
    if gpus:
        os.environ["CUDA_VISIBLE_DEVICES"] = os.environ[ASSIGNED_ENV] = ",".join(gpus)
    elif "CUDA_VISIBLE_DEVICES" in os.environ:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # a slot with no GPU of its own uses none
    if cpus and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cpus)
    if cpus:
        grant_cpus(len(cpus))  # the slot's share is its grant: what resources/cpus.py reads

        for name in THREAD_VARIABLES:
            raw = os.environ.get(name, "").split(",")[0].strip()
            if (outside_int(raw) or 0) > len(cpus):
                os.environ[name] = str(len(cpus))


class _Slot:
    """The parent's handle on one worker process."""

    def __init__(self, ctx: Any, slot: int, share: Any, args: tuple, outbox: Any) -> None:
        self.slot, self.share = slot, share
        self.inbox = ctx.Queue()
        self.process = ctx.Process(
            target=_worker_main, name=f"hpcr-slot-{slot}",
            args=(slot, share.record(), list(share.gpus), list(share.cpus), *args, self.inbox, outbox),
        )
        self.process.start()
        self.point: dict[str, Any] | None = None
        self.since = 0.0


def _run_concurrent(
    sweep_dir: str,
    todo: list[dict[str, Any]],
    entry: str | None,
    job_record: dict[str, Any] | None,
    parallel: int,
    clock: Any,
    pack: dict[str, Any],
) -> dict[int, tuple[str, str]]:
    """Run the points ``parallel`` at a time, each slot in its own spawned process with its share."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")  # CUDA_VISIBLE_DEVICES must be set before CUDA starts
    plan = slot_gpu_plan(parallel, accessible=accessible_gpu_minors())  # ids a child can open, one GPU a slot
    shares = slot_shares([], job_cpus(), parallel)
    shares = [dataclasses.replace(sh, gpus=plan.slots[n], gpu_shared=plan.shared) for n, sh in enumerate(shares)]
    print(f"hpc-runner: {parallel} slots: {plan.line()}; {describe_shares(shares)}", flush=True)
    outbox = ctx.Queue()
    args = (sweep_dir, entry, job_record, pack)
    slots = [_Slot(ctx, s, shares[s], args, outbox) for s in range(parallel)]
    pending = deque(todo)
    out: dict[int, tuple[str, str]] = {}
    forwarded = False

    started = [0]

    def feed(slot: _Slot) -> None:
        if pending and not stop_requested() and (not started[0] or clock.can_start(time.time())):
            started[0] += 1
            slot.point, slot.since = pending.popleft(), time.monotonic()
            slot.inbox.put(slot.point)
        else:
            slot.point = None
            slot.inbox.put(None)

    try:
        for slot in slots:
            feed(slot)
        while any(s.point is not None for s in slots):
            if stop_requested() and not forwarded:  # the workers may not have got SLURM's signal
                forwarded = True
                for s in slots:
                    if s.process.is_alive() and s.process.pid:
                        os.kill(s.process.pid, signal.SIGUSR2)
            try:
                n, index, status, message, seconds = outbox.get(timeout=0.5)
            except queue.Empty:
                for s in slots:
                    if s.point is not None and not s.process.is_alive():
                        out[s.point["index"]] = _worker_died(sweep_dir, s)
                        slots[s.slot] = s = _Slot(ctx, s.slot, s.share, args, outbox)
                        feed(s)
                continue
            out[index] = status, message
            slot = slots[n]
            if status != NOT_STARTED:
                clock.ran(seconds)
            feed(slot)
    finally:
        for s in slots:
            if s.process.is_alive() and s.point is not None:
                s.process.terminate()  # an exception in the parent: do not leave workers behind
            s.process.join(timeout=30)
            if s.process.is_alive():
                s.process.kill()
    stop = stop_requested()
    for p in pending:
        out[p["index"]] = (NOT_STARTED, f"{stop} came before it started") if stop else \
            (RETURNED, clock.why_not(time.time()))
    return out


def _worker_died(sweep_dir: str, slot: _Slot) -> tuple[str, str]:
    """Record the point a dead worker was running as failed (a kill -9, e.g. the OOM killer, leaves
    run.yaml at running)."""
    code = slot.process.exitcode
    how = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}"
    message = f"the worker process of slot {slot.slot} ended with {how} while running the point"
    assert slot.point is not None
    rd = RunDir(Path(sweep_dir) / slot.point["dir"])
    if rd.record().get("status") in (None, "prepared", "running"):
        rd.update_record(status=FAILED, ended=now_iso(),
                         error={"type": "WorkerDied", "message": message, "id": None, "exit_code": code})
    record_point_result(sweep_dir, slot.point["index"], slot.point.get("handoff"), rd.path)
    return FAILED, message


def _top_up(sweep_dir: str, task_fn: Any) -> None:
    """Let the governor fill the slot this task is about to free (never fails the task)."""
    try:
        top_up_after_task(Path(sweep_dir), task_fn, states_of)  # and retries failed points (--retry rules)
    except Exception as exc:  # a failed top-up leaves the points waiting: `status`/`resume` send them
        print(f"hpc-runner: could not submit the sweep's waiting points: {exc}", flush=True)

"""The submission governor: never ask sbatch for more jobs than the cluster lets this user queue.

A sweep's points are grouped into tasks of K points (``--pack K``, index order); each array task runs
one task (``jobs/task.py``'s ``run_sweep_task``). ``send_points`` reads the limits through the
executor (``executor.limits()``), submits the first ``free_slots`` tasks as arrays of at most
MaxArraySize, and moves the points of the other tasks to ``waiting`` (no job id) in the ledger.

Waiting points are submitted later with no process of ours left on the login node (``top_up``):

- every array task, when it ends, takes the sweep's lock, counts the free slots and submits waiting
  points into them (``top_up_after_task``, called by the task in a ``finally``). The caller's own
  job still counts in the queue until it exits, so SLURM would refuse a job in "its" slot; the slot it
  frees is used by the next task that ends. The lock serialises the top-ups and squeue shows an sbatch
  at once, so two tasks never fill the same slot. So that the last two tasks of a wave do not each
  count the other and leave with no one to submit the rest, a task records its job id under
  ``leaving`` when its top-up is done, and a later top-up that finds too few free slots waits (up to
  30 s, polling squeue) for the leaving jobs to leave the queue, then counts again. It never waits for
  a task that has not done its top-up (that one needs the lock), so the wait cannot deadlock.
- ``hpc-runner status DIR``, ``status --watch`` and ``resume DIR`` take the same top-up step (the sweep's
  last tasks may have found no free slot, e.g. when other jobs of the user filled the queue).

Every loop here is bounded: at most ``len(DEFAULT_BACKOFF)`` retries of a refused sbatch, at most one
array per MaxArraySize tasks, and every task runs at least its first point (jobs/task.py). Over the
sweep's whole life, every sbatch call, whatever its outcome (queued, refused by a limit and retried,
failed), is counted in sweep.yaml before it is made (``Ledger.count_submit_call``), against one budget:
``max_submit_calls``, by default its points times (1 + the ledger's bounds on returns and retries). A
sweep whose budget is spent submits nothing more: its top-ups return at once (no lock, no scheduler
call), its waiting points keep waiting, ``status`` says so, and ``resume --max-submit-calls N`` raises it.
A tune's workers (tune/submit.py) count in the same budget.

A point that failed twice on one node (its jobs' attempts ended NODE_FAIL or BOOT_FAIL there, as sacct
records them) excludes that node on its next submission: ``exclude_failing_nodes`` (called by ``resume``)
notes the failures and the exclusion in the ledger, and ``send_points`` submits the tasks whose points
exclude nodes as arrays of their own, with ``sbatch --exclude``.

A refused sbatch whose message names a limit (QOSMaxSubmitJobPerUserLimit, AssocMaxSubmitJobLimit,
MaxJobCount, a socket time-out) is retried after 1, 2, 4 and 8 s, re-counting the free slots each time,
and is never recorded as submitted. When the limits are known and no slot is free the rest wait; when
sbatch still refuses after the back-off, the CLI reports a partial submission (the points are marked
not-submitted, as for any other sbatch error) and a top-up leaves them waiting.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpc_runner.engine.sandbox import recorded_grants
from hpc_runner.errors import ClusterError, UserError
from hpc_runner.jobs import ledger as sr
from hpc_runner.jobs import retry
from hpc_runner.jobs.submitted import Submitted
from hpc_runner.jobs.usage import point_usage
from hpc_runner.records.rundir import now_iso
from hpc_runner.resources.threads import variables_set_here
from hpc_runner.scheduler.dependency import after_any
from hpc_runner.scheduler.executor import Executor, JobRequest, SubmitLimits, is_scheduler_job
from hpc_runner.scheduler.job_env import own_job_id, scrubbed_environment
from hpc_runner.scheduler.profiles import ClusterProfile, check_settings, checked_from_record
from hpc_runner.scheduler.select import executor_for

Log = Callable[[str], None]
StatesReader = Callable[[Path], tuple[list[Any], Any]]  # sweep dir -> (PointStates, SchedulerAnswer)
RETRY_CHECK_S = 20.0  # a task that ends looks for failed points to retry at most this often (all tasks together)
DEFAULT_BACKOFF = (1.0, 2.0, 4.0, 8.0)  # seconds before each retry of a limit refusal: 15 s at most in all
NODE_FAULTS = frozenset({"NODE_FAIL", "BOOT_FAIL"})  # attempts that failed because of their node
EXCLUDE_AFTER = 2  # a point excludes a node after this many failures there
LEAVING_WAIT_S = 30.0  # how long a top-up waits for tasks that are ending to leave the queue


@dataclass
class Backoff:
    """How long to wait before each retry of a refused sbatch (``sleep`` injectable for tests)."""

    delays: Sequence[float] = DEFAULT_BACKOFF
    sleep: Callable[[float], None] = time.sleep


def pack_of(record: sr.SweepRecord) -> tuple[int, int]:
    """Return the sweep's (points per task, points run at once per task); absent means (1, 1)."""
    pack = record.data.get("pack") or {}
    return int(pack.get("points", 1)), int(pack.get("parallel", 1))


def group_tasks(indices: Sequence[int], points_per_task: int) -> list[list[int]]:
    """Split point indices, in order, into tasks of at most ``points_per_task`` points."""
    idx = list(indices)
    return [idx[i : i + points_per_task] for i in range(0, len(idx), points_per_task)]


def excluded_nodes(record: sr.SweepRecord, indices: Sequence[int]) -> str:
    """Return the nodes the points ``indices`` exclude, as sbatch --exclude takes them (``""``: none)."""
    return ",".join(sorted({n for i in indices for n in record.points[i].get("exclude") or []}))


def group_tasks_by_exclusion(record: sr.SweepRecord, indices: Sequence[int], points_per_task: int) -> list[list[int]]:
    """Split point indices into tasks, the points that exclude the same nodes together (those excluding none
    first), so that each array is one sbatch with one --exclude."""
    by_key: dict[str, list[int]] = {}
    for i in indices:
        by_key.setdefault(excluded_nodes(record, [i]), []).append(i)
    return [t for key in sorted(by_key) for t in group_tasks(by_key[key], points_per_task)]


def failed_nodes(attempts: Sequence[dict[str, Any]]) -> list[str]:
    """Return the node of each attempt that failed because of its node (NODE_FAIL, BOOT_FAIL), oldest first.

    An attempt on several nodes is left out: sacct lists all of them and cannot say which one failed.
    """
    return [a["node"] for a in attempts if a.get("state") in NODE_FAULTS and a.get("node")
            and not any(c in a["node"] for c in ",[")]


def exclude_failing_nodes(ledger: sr.Ledger, states: Sequence[Any], log: Log = print) -> dict[int, list[str]]:
    """Note where each point's current job failed (its attempts: ``PointState.history`` and its state now),
    and exclude a node from a point's next submissions once the point failed there ``EXCLUDE_AFTER`` times;
    return the nodes newly excluded, per point. Call it under the sweep's lock, before the points are retried."""
    newly: dict[int, list[str]] = {}
    for ps in states:
        if not ps.job_id or ledger.points[ps.index].get("job_id") != ps.job_id:
            continue
        nodes = failed_nodes([*ps.history, {"state": ps.state, "node": ps.node}])
        if nodes:
            ledger.note_node_failures(ps.index, ps.job_id, nodes)
        counts: dict[str, int] = {}
        for job_nodes in (ledger.points[ps.index].get("node_failures") or {}).values():
            for node in job_nodes:
                counts[node] = counts.get(node, 0) + 1
        for node, n in sorted(counts.items()):
            if n >= EXCLUDE_AFTER and ledger.exclude_node(ps.index, node):
                newly.setdefault(ps.index, []).append(node)
                log(f"hpc-runner: point {ps.index} failed {n} times on node {node}; its next jobs exclude it")
    return newly


def plan_arrays(n_tasks: int, free: int | None, max_array: int) -> tuple[list[int], int]:
    """Return the sizes of the arrays submitted now and how many tasks wait."""
    now = n_tasks if free is None else min(free, n_tasks)
    sizes = [min(max_array, now - i) for i in range(0, now, max_array)]
    return sizes, n_tasks - now


@contextlib.contextmanager
def outside_the_job() -> Iterator[None]:
    """Submit as the user would, not as the job this runs in: hide the job's SLURM_* variables (kept:
    SLURM_CONF) and the thread-count variables hpc-runner set for it (the user's own are kept), so a job
    submitted from inside a job gets only what the user set, and decides its own threads."""
    with scrubbed_environment(also=variables_set_here()):
        yield


def profile_from_record(record: sr.SweepRecord) -> ClusterProfile:
    """Rebuild the cluster profile of the sweep's latest submission (else the one recorded at creation)."""
    recorded = next((s["profile"] for s in reversed(record.submissions()) if s.get("profile")), None)
    recorded = recorded or record.data.get("cluster") or {}
    name = recorded.get("profile") or "recorded"
    return checked_from_record(recorded, f"the profile recorded in {record.file} ({name})")


def _wait_for_leaving(
    limits: SubmitLimits, record: sr.SweepRecord, me: str | None, wanted: int, backoff: Backoff,
    reader: Callable[[], SubmitLimits], executor: Executor,
) -> SubmitLimits:
    """When fewer slots are free than ``wanted``, wait (up to ``LEAVING_WAIT_S``) for the sweep's tasks that
    have done their last top-up to leave the queue, then count again: their slots are about to free up."""
    free = limits.free_slots
    if free is None or free >= wanted:
        return limits
    leaving = (set(record.data.get("leaving") or []) & {j for j, _, _ in limits.jobs}) - {me}
    if not leaving:
        return limits
    deadline = time.monotonic() + LEAVING_WAIT_S
    while time.monotonic() < deadline:
        backoff.sleep(0.2)
        if not leaving & {j for j, _, _ in executor.queued_jobs(limits.user)}:
            break
    return reader()


def point_span(indices: Sequence[int], limit: int = 60) -> str:
    """The points ``indices`` in a few words: ``0-3``, ``0-3, 7, 9-11`` (cut at ``limit`` characters)."""
    runs: list[list[int]] = []
    for i in sorted(set(indices)):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    text = ", ".join(f"{a}-{b}" if b > a else str(a) for a, b in runs)
    return text if len(text) <= limit else f"{text[:limit].rsplit(', ', 1)[0]}, ... ({len(set(indices))} points)"


def points_description(sweep_dir: Path | str, indices: Sequence[int], entry: str | None,
                       bundle: str | None) -> str:
    """What a sweep's job runs, in words: the script's first comment line."""
    what = f"; {entry or 'run'} of {bundle}" if bundle else f"; entry {entry or 'run'}"
    return f"hpc-runner: sweep points {point_span(indices)} of {sweep_dir}{what}"


def job_request(record: sr.SweepRecord, hold: bool = False, array_parallelism: int | None = None) -> JobRequest:
    """Return what the sweep's tasks ask for besides the profile: name, log folder, working dir."""
    return JobRequest(
        job_name=f"hpcr-sweep-{record.data.get('bundle', 'sweep')}",
        folder=record.job_folder,
        chdir=(record.data.get("command") or {}).get("cwd") or os.getcwd(),
        hold=hold,
        array_parallelism=array_parallelism,
        # a pipeline stage waits on its inputs (pipeline/): its top-ups wait on them too
        dependency=record.data.get("dependency"),
        describe=f"hpc-runner: each task runs points of {record.path.resolve()} (points/NNNN/config.yaml; "
        "sweep.yaml says which)",
    )


def send_points(
    ledger: sr.Ledger,
    indices: Sequence[int],
    executor: Executor,
    task_fn: Callable[..., Any],
    *,
    entry: str | None,
    reason: str,
    out: Any,
    hold: bool = False,
    array_parallelism: int | None = None,
    log: Log = print,
    preflight: bool = True,
    give_up: str = "error",
    backoff: Backoff | None = None,
    limits_reader: Callable[[Executor], SubmitLimits] | None = None,
) -> None:
    """Submit as many tasks of ``indices`` as there are free slots; the rest wait; fill ``out``.

    Call it under the sweep's lock (``ledger``): a task that starts at once must find its job id.
    ``task_fn`` is what each array task runs (jobs/task.py's ``run_sweep_task``): given, not imported,
    because a task itself tops up the sweep through this module.
    ``give_up``: what a limit refusal that outlasts the back-off does: ``error`` (the rest are refused,
    not-submitted, and the error raised, as for any sbatch error) or ``wait`` (they keep waiting: a top-up).
    """
    record = ledger.record
    backoff = backoff or Backoff()

    def reader() -> SubmitLimits:
        return limits_reader(executor) if limits_reader else executor.limits()

    me = own_job_id()
    k, parallel = pack_of(record)
    # one array per (request, exclusion): points whose retries changed their request (jobs/retry.py) go in
    # arrays of their own, one per request, and within each the points that exclude the same nodes together
    keyed = [((key, excluded_nodes(record, task)), task) for key, group in request_groups(record, indices).items()
             for task in group_tasks_by_exclusion(record, group, k)]
    tasks = [task for _, task in keyed]
    sweep_dir = str(record.path.resolve())
    settings = executor.profile.settings
    clock = {k: settings.get(k) for k in ("signal_delay_s", "point_minutes") if settings.get(k) is not None}
    job_record = {"cluster": executor.name, "sweep": sweep_dir, "clock": clock}  # what a task needs, no more
    if record.data.get("sandbox") is not None:  # a --safe sweep: its submission's grants, checked again, or

        record.data["sandbox"] = job_record["sandbox"] = recorded_grants(record.data["sandbox"],
                                                                         str(record.file)).to_record()
    submission: dict[str, Any] = {"at": now_iso(), "reason": reason, "arrays": []}
    if reason != "top-up":  # a top-up uses the profile of the submission before it (profile_from_record)
        submission["profile"] = executor.profile.to_record()
    if array_parallelism:
        submission["array_parallelism"] = array_parallelism
    record.submissions().append(submission)
    limits = _wait_for_leaving(reader(), record, me, len(tasks), backoff, reader, executor)
    out.limits = limits
    request = job_request(record, hold, array_parallelism)
    sizes, _ = plan_arrays(len(tasks), limits.free_slots, limits.max_array_size)
    if len(sizes) > 1:
        log(f"hpc-runner: {len(tasks)} tasks > MaxArraySize {limits.max_array_size} ({limits.max_array_source}): "
            f"{len(sizes)} arrays")
    if preflight and sizes:
        _preflight(executor, request, record, max(sizes), len(indices), submission)
    pending = list(keyed)
    retries = sbatch_calls = 0
    while pending:
        free = limits.free_slots
        group = pending[0][0]
        key, exclude = group
        same = next((j for j, (g, _) in enumerate(pending) if g != group), len(pending))  # one request an array
        n = min(same, limits.max_array_size, same if free is None else free)
        if n <= 0:
            break
        batch = [task for _, task in pending[:n]]
        idx = [i for t in batch for i in t]
        if ledger.submit_calls_left() <= 0:  # the sweep's budget of sbatch calls of any outcome (jobs/ledger.py)
            submission["budget"] = ledger.record.budget_note()
            log(f"hpc-runner: {len(pending)} task(s) keep waiting: {submission['budget']}")
            break
        ledger.count_submit_call()
        sbatch_calls += 1
        try:
            described = points_description(sweep_dir, idx, entry or record.data.get("entry"),
                                           record.data.get("bundle_dir") or record.data.get("bundle"))
            jobs = _sbatch(executor_with(executor, key), task_fn,
                           dataclasses.replace(request, exclude=exclude or None, describe=described),
                           record, batch, sweep_dir, entry, job_record, parallel)
        except BaseException as exc:
            message = exc.message if isinstance(exc, UserError) else str(exc)
            limited = isinstance(exc, Exception) and executor.is_limit_refusal(message)
            if limited and retries < len(backoff.delays):
                delay = backoff.delays[retries]
                retries += 1
                submission.setdefault("refused", []).append({"at": now_iso(), "tasks": n, "message": message[:300]})
                log(f"hpc-runner: the scheduler refused {n} task(s) ({message[:160]}); "
                    f"retry {retries}/{len(backoff.delays)} in {delay:g} s")
                backoff.sleep(delay)
                limits = reader()
                out.limits = limits
                continue
            if limited and give_up == "wait":
                log(f"hpc-runner: the scheduler still refuses after {retries} retries; {len(pending)} task(s) keep "
                    "waiting")
                break
            submission["sbatch_calls"] = sbatch_calls
            _record_failure(ledger, [t for _, t in pending], exc, submitted_any=bool(out.job_ids))
            raise
        for task, job in zip(batch, jobs):
            for i in task:
                ledger.submit(i, job.job_id)
                out.job_ids[i] = job.job_id
        array_id = jobs[0].job_id.split("_")[0]
        entry_ = {"job_id": array_id, "size": n, "points": len(idx), "first": idx[0], "last": idx[-1]}
        if exclude:
            entry_["exclude"] = exclude
        if key:
            entry_["request"] = dict(key)
        submission["arrays"].append(entry_)
        out.arrays.append(entry_)
        limits.consume(n)
        pending = pending[n:]
    waiting = [i for _, t in pending for i in t]
    for i in waiting:
        ledger.wait(i)
    out.waiting = waiting
    submission["sbatch_calls"] = sbatch_calls
    if out.arrays and record.data.get("waiters"):
        _tell_waiters(record, executor, log)
    if reason == "top-up" and not sbatch_calls:
        record.submissions().remove(submission)  # one task's "no slot free" is not worth a line
        return
    if waiting:
        submission["waiting"] = len(waiting)
        submission["limit"] = limits.describe()


RequestKey = tuple[tuple[str, Any], ...]  # a point's request (profile settings of its own), hashable


def request_groups(record: sr.SweepRecord, indices: Sequence[int]) -> dict[RequestKey, list[int]]:
    """Group point indices (in order) by their own request: the sweep's (``()``) first, then each other one."""
    groups: dict[RequestKey, list[int]] = {(): []}
    for i in indices:
        request = record.points[i].get("request") or {}
        key: RequestKey = tuple(sorted((str(k), v) for k, v in request.items()))
        groups.setdefault(key, []).append(i)
    return {k: v for k, v in groups.items() if v}


def executor_with(executor: Executor, key: RequestKey) -> Executor:
    """Return the executor whose profile has the request's settings on top (the same one for no request, or
    when the tasks run here: a local run asks nothing of a scheduler)."""
    if not key or executor.runs_here:
        return executor

    settings = {**executor.profile.settings, **dict(key)}
    check_settings(dict(key), f"a point's request in the sweep record ({executor.profile.name})")
    return executor_for(ClusterProfile(executor.profile.name, list(executor.profile.sources), settings))


def _tell_waiters(record: sr.SweepRecord, executor: Executor, log: Log) -> None:
    """Jobs that must start only once every point of the sweep has ended (a pipeline's select stage, recorded
    as ``waiters``) wait on the arrays just submitted too; one that already started is left alone."""
    arrays = [a["job_id"] for s in record.submissions() for a in s.get("arrays") or [] if a.get("job_id")]
    try:
        executor.set_dependency(record.data["waiters"], after_any(arrays))
    except Exception as exc:  # the waiter started already: it looks at the sweep itself (pipeline/select_job.py)
        log(f"hpc-runner: the jobs waiting on this sweep were not told of its new arrays ({exc})")


def _preflight(executor: Executor, request: JobRequest, record: sr.SweepRecord, size: int, points: int,
               submission: dict[str, Any]) -> None:
    """sbatch --test-only for the largest array sent now; a limit refusal is not a reason to stop here."""
    try:
        executor.check_resources(request, size, f"the sweep's job array ({points} points)")
    except ClusterError as exc:
        if executor.is_limit_refusal(exc.message):  # --test-only counts the queue too; the governor handles that
            return
        record.submissions().remove(submission)  # nothing was submitted: no trace in sweep.yaml
        raise


def _sbatch(executor: Executor, task_fn: Callable[..., Any], request: JobRequest, record: sr.SweepRecord,
            batch: list[list[int]], sweep_dir: str, entry: str | None, job_record: dict[str, Any],
            parallel: int) -> list[Any]:
    """One sbatch: an array of ``len(batch)`` tasks, each running its points with ``task_fn``."""
    n = len(batch)
    points = [
        [{"index": i, "dir": record.points[i]["dir"], "overrides": record.effective_overrides(record.points[i])}
         for i in task]
        for task in batch
    ]
    with outside_the_job():
        return executor.submit(task_fn, [[sweep_dir] * n, points, [entry] * n, [job_record] * n,
                                                [parallel] * n], request)


def _record_failure(ledger: sr.Ledger, rest: list[list[int]], exc: BaseException, submitted_any: bool) -> None:
    for task in rest:
        for i in task:
            if ledger.points[i].get("submit") in (sr.SUBMITTING, sr.WAITING):
                ledger.refuse(i)
    ledger.submission_failed(exc.paragraph() if isinstance(exc, UserError) else str(exc), submitted_any)


def waiting_indices(record: sr.SweepRecord) -> list[int]:
    """Return the indices of the points that wait for a free submit slot (a tune's trials never do)."""
    if record.is_tune:
        return []
    return [n for n, p in enumerate(record.points) if p.get("submit") == sr.WAITING]


def top_up(
    sweep_dir: str | Path,
    task_fn: Callable[..., Any],
    log: Log = print,
    *,
    leaving: bool = False,
    backoff: Backoff | None = None,
    limits_reader: Callable[[Executor], SubmitLimits] | None = None,
    states_reader: StatesReader | None = None,
) -> int:
    """Submit the sweep's waiting points into the free submit slots; return how many points were submitted.

    The one top-up step: the sweep's tasks when they end, ``status``, ``status --watch`` and ``resume``
    all call it. It writes nothing and takes no lock when no point waits (the common case).
    ``leaving``: the caller is an array task of this sweep that is about to end (see the module doc).
    ``states_reader(path)``: every point's state (jobs/targets.py's ``states_of``: one scheduler call); given,
    a sweep with ``--retry`` rules first sends its failed points again with their changed request
    (``retry_failed``), which then wait here like any other point.
    """
    path = Path(sweep_dir)
    if not (path / sr.SWEEP_FILE).is_file():
        return 0
    recorded = sr.SweepRecord.load(path)
    if not recorded.submit_calls_left():  # its budget of sbatch calls is spent: no retry, no lock, no scheduler call
        if waiting_indices(recorded):
            log(f"hpc-runner: {len(waiting_indices(recorded))} waiting point(s) not submitted: "
                f"{recorded.budget_note()}")
        return 0
    retried = 0
    if states_reader is not None:
        retried = retry_failed(path, states_reader, log, throttle_s=RETRY_CHECK_S if leaving else 0.0,
                               record=recorded)
    if not waiting_indices(sr.SweepRecord.load(path) if retried else recorded):
        return 0  # (read again only when retries changed it: a 10,000-point sweep.yaml is ~0.1 s a read)
    me = own_job_id() if leaving else None
    with sr.locked(path) as ledger:
        record = ledger.record
        waiting = waiting_indices(record)
        if not waiting:
            return 0
        executor = executor_for(profile_from_record(record))
        last = next((s for s in reversed(record.submissions()) if s.get("reason") != "top-up"), {})
        out = Submitted(record.path)
        try:
            send_points(ledger, waiting, executor, task_fn, entry=record.data.get("entry"), reason="top-up", out=out,
                        array_parallelism=last.get("array_parallelism"), log=log, preflight=False,
                        give_up="wait", backoff=backoff, limits_reader=limits_reader)
        except Exception as exc:  # not a limit: the points keep waiting; status/resume try again
            for i in waiting:
                if ledger.points[i].get("submit") == sr.NOT_SUBMITTED:
                    ledger.wait(i)
            ledger.note_error(f"top-up: {exc}")
            log(f"hpc-runner: could not submit {len(waiting)} waiting point(s): {exc}")
            out.job_ids.clear()
        if not waiting_indices(record) and all(p.get("job_id") for p in record.points):
            ledger.all_submitted()
        submitted = len(out.job_ids)
        if submitted:
            log(f"hpc-runner: submitted {submitted} waiting point(s) as "
                f"{', '.join(a['job_id'] for a in out.arrays)}; {len(out.waiting)} still wait")
        if me:  # later top-ups count this job as gone (see the module doc); forget the ones that left
            queued = {j for j, _, _ in out.limits.jobs} if out.limits is not None else set()
            ledger.set_leaving(sorted({j for j in record.data.get("leaving") or [] if j in queued} | {me}))
    executor.run_pending(log)
    return submitted


def top_up_after_task(sweep_dir: Path, task_fn: Callable[..., Any], states_reader: StatesReader | None = None) -> int:
    """Submit waiting points into the slot the calling task frees; return how many were submitted."""
    return top_up(sweep_dir, task_fn, leaving=is_scheduler_job(own_job_id()), states_reader=states_reader)


RETRY_MARK = ".retry-checked"  # its mtime: when a task last looked for failed points to retry


def _checked_lately(path: Path, seconds: float) -> bool:
    """Whether a task looked for failed points less than ``seconds`` ago (then mark now); tasks that end
    together ask the scheduler once between them, not once each."""
    mark = path / RETRY_MARK
    with contextlib.suppress(OSError):
        if time.time() - mark.stat().st_mtime < seconds:
            return True
    with contextlib.suppress(OSError):
        mark.touch()
    return False


def retry_failed(path: Path, states_reader: StatesReader, log: Log = print, throttle_s: float = 0.0,
                 record: sr.SweepRecord | None = None) -> int:
    """Send the sweep's failed points whose cause has a ``--retry`` rule back to waiting, with the changed
    request (jobs/retry.py), through the ledger's ``retry`` transition; return how many.

    Nothing is read from the scheduler for a sweep without rules. Bounded: a point is retried at most
    ``max_retries`` times (the ledger's bound), and only while its failed job is still its job. ``record``: the
    sweep's record as the caller just read it (the retries themselves are decided again under the lock).
    """
    record = record if record is not None else sr.SweepRecord.load(path)
    rules = retry.rules_of(record.data.get("retry"))
    if not rules or record.is_tune:
        return 0
    if not any(p.get("submit") == sr.SUBMITTED for p in record.points):
        return 0
    if throttle_s and _checked_lately(path, throttle_s):
        return 0
    states, answer = states_reader(path)
    bound = record.limit("max_retries", sr.MAX_RETRIES)
    settings = profile_from_record(record).settings
    plan = retry.decide(record.points, states, rules, settings, bound, usage_of=lambda st: point_usage(st, answer))
    for index, cause in plan.exhausted:
        log(f"hpc-runner: point {index} failed with {cause} after {bound} retries (max_retries): not retried again")
    if not plan.retry:
        return 0
    done = []
    with sr.locked(path) as ledger:
        at = now_iso()
        for d in plan.retry:
            p = ledger.points[d.index]
            if p.get("submit") != sr.SUBMITTED or p.get("job_id") != d.job_id:
                continue  # sent again by another top-up since the states were read
            ledger.retry(d.index, request=d.request, history=d.history(at))  # the run dir stays: checkpoints too
            done.append(d)
    for d in done:
        log(f"hpc-runner: point {d.index} ended {d.cause} (job {d.job_id}{f' on {d.node}' if d.node else ''}): "
            f"retry {d.rule.text}: {d.note}")
    return len(done)


def cancel_waiting(ledger: sr.Ledger) -> int:
    """Cancel the sweep's points that no job has yet (call under the lock); return how many."""
    cancelled = [i for i, p in enumerate(ledger.points) if p.get("submit") in (sr.WAITING, sr.NOT_SUBMITTED)
                 and not ledger.record.is_tune]
    for i in cancelled:
        ledger.cancel(i)
    return len(cancelled)

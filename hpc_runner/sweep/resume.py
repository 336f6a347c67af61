"""Resubmit the failed and missing points of a sweep (never a completed or a still-queued one)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpc_runner.config import preflight as config_preflight
from hpc_runner.config.overrides import Override, point_override
from hpc_runner.config.recorded import load_recorded_config
from hpc_runner.engine.sandbox import received_grants, recorded_grants
from hpc_runner.engine.sandbox_job import recorded_safe
from hpc_runner.errors import ClusterError
from hpc_runner.jobs import ledger as sr
from hpc_runner.jobs import states as tracking
from hpc_runner.jobs.governor import exclude_failing_nodes, outside_the_job
from hpc_runner.jobs.job import run_submitted
from hpc_runner.jobs.submitted import Submitted
from hpc_runner.jobs.targets import Target
from hpc_runner.records.confine import inside
from hpc_runner.records.rundir import RunDir, now_iso
from hpc_runner.scheduler.executor import JobRequest
from hpc_runner.scheduler.profiles import ClusterProfile
from hpc_runner.scheduler.select import executor_for
from hpc_runner.sweep.submission import submit_points, top_up


@dataclass
class ResumePlan:
    """Which points go again, and which stay (with why)."""

    resubmit: list[tracking.PointState] = field(default_factory=list)
    completed: list[int] = field(default_factory=list)
    active: list[int] = field(default_factory=list)


def plan_resume(target: Target, only: Sequence[int] | None = None) -> ResumePlan:
    """Sort the points into resubmit / completed / active; ``only`` limits the resubmitted ones."""
    states, _ = target.states()
    unknown = [s.job_id for s in states if s.state == tracking.UNKNOWN and s.job_id]
    queued = target.executor().still_queued(unknown) if unknown else set()
    plan = ResumePlan()
    for s in states:
        if s.state in tracking.ENDED_WELL:  # completed, or a tune trial pruned: never again
            plan.completed.append(s.index)
        elif s.failed or s.state == tracking.NOT_STARTED or (s.state == tracking.UNKNOWN and s.job_id not in queued):
            plan.resubmit.append(s)
        else:
            plan.active.append(s.index)
    if only is not None:
        wanted = set(only)
        unknown_idx = wanted - {s.index for s in states}
        if unknown_idx:
            raise ClusterError(
                f"no point {', '.join(map(str, sorted(unknown_idx)))} in this sweep",
                expected=f"indices 0..{len(states) - 1}",
            )
        refused = sorted(wanted & set(plan.completed + plan.active))
        if refused:
            raise ClusterError(
                f"point(s) {', '.join(map(str, refused))} completed or are still queued/running",
                expected="failed or missing points only (resume never runs a completed point again)",
            )
        plan.resubmit = [s for s in plan.resubmit if s.index in wanted]
    return plan


def _move_aside(record: sr.SweepRecord, point: dict[str, Any]) -> tuple[Path, Path] | None:
    """Move a point's old run dir to attempts/ so the new config starts clean; return (old, new) paths."""
    src = record.point_dir(point)
    if not src.exists():
        return None
    n = 1
    while (dst := record.path / sr.ATTEMPTS_DIR / f"{src.name}-{n}").exists():
        n += 1
    dst.parent.mkdir(parents=True, exist_ok=True)
    src.rename(dst)
    return src, dst


def resume_sweep(
    target: Target,
    plan: ResumePlan,
    profile: ClusterProfile,
    extra: Sequence[Override] = (),
    *,
    hold: bool = False,
    array_parallelism: int | None = None,
    log: Callable[[str], None] = print,
    preflight: bool = True,
    max_retries: int | None = None,
    retry_rules: dict[str, str] | None = None,
    chosen: set[str] | frozenset[str] = frozenset(),
) -> Submitted:
    """Submit the planned points again, and the points still waiting for a slot, through the governor.

    Each planned point takes the ledger's ``retry`` transition (bounded: a point resubmitted
    ``max_retries`` times is refused, naming it, before anything is submitted); with ``extra`` fixes its
    old run dir goes to attempts/ first. The sweep's lock is held from the first sbatch until the record
    is written, so no task of the sweep tops up in between.
    """
    assert target.record is not None
    planned = {s.index: s.job_id for s in plan.resubmit}
    fixes = {o.spelling(): o.value for o in extra}
    executor = executor_for(profile)
    executor.check_time()
    executor.check_site()  # what `cluster check` found that this job depends on, said before queueing
    if preflight:  # the recorded base config plus each point's values and fixes, before any sbatch

        record = target.record
        base, _ = load_recorded_config(record.base_dir)
        cwd = (record.data.get("command") or {}).get("cwd")  # where the jobs run: relative paths start there
        config_preflight.check_points(
            base, [[point_override(k, v) for k, v in {**record.effective_overrides(record.points[i]), **fixes}.items()]
                   for i in planned],
            cwd=Path(cwd) if cwd else None, entry=record.data.get("entry") or "run")
    with sr.locked(target.path) as ledger:
        record = ledger.record
        target.record, target.points = record, record.points
        if max_retries is not None:
            ledger.set_bound("max_retries", max_retries)
        if not ledger.submit_calls_left():  # nothing moved yet: the points stay as they are
            raise ClusterError(record.budget_note(), where=str(record.file),
                               expected=f"at most {record.submit_call_budget()} submit calls for this sweep")
        if retry_rules:
            ledger.add_retry_rules(retry_rules)
        # a point a task submitted since the plan was made (it was waiting) is not sent twice
        indices = [i for i, job in planned.items() if record.points[i].get("job_id") == job
                   and record.points[i].get("submit") != sr.WAITING]
        wanted = set(indices)  # a point that failed twice on a node avoids it from now on
        exclude_failing_nodes(ledger, [s for s in plan.resubmit if s.index in wanted], log)
        for i in indices:  # all checked (bounds) before any run dir moves or any sbatch
            own = record.points[i].get("request") or {}
            kept = {k: v for k, v in own.items() if k not in chosen and not (k in ("mem", "mem_gb") and
                                                                              {"mem", "mem_gb"} & set(chosen))}
            ledger.retry(i, fixes, request=kept if own else None)
        for i in indices:
            if fixes:
                pair = _move_aside(record, record.points[i])
                if pair:
                    record.points[i].setdefault("attempts", []).append(str(pair[1].relative_to(record.path)))
        waiting = sorted(set(ledger.waiting()) | set(indices))
        ledger.note_resume(len(indices), fixes)
        try:
            out = submit_points(ledger, waiting, executor, entry=record.data.get("entry"), reason="resume", hold=hold,
                                array_parallelism=array_parallelism, log=log, preflight=preflight)
        finally:
            if all(p.get("job_id") for p in record.points):
                ledger.all_submitted()
    if executor.runs_here:
        out.local_failures = executor.run_pending(log)
        out.ran_here = True
    return out


def record_retry_rules(path: Path, rules: dict[str, str]) -> None:
    """Record ``--retry`` rules on a sweep (under its lock): later failures are retried by them."""
    with sr.locked(path) as ledger:
        ledger.add_retry_rules(rules)


def set_submit_budget(path: Path, calls: int) -> sr.SweepRecord:
    """Set the sweep's budget of submit calls in all (``resume --max-submit-calls N``) under its lock; return the
    record as written."""
    with sr.locked(path) as ledger:
        ledger.set_bound("max_submit_calls", calls)
        return ledger.record


def top_up_waiting(target: Target, log: Callable[[str], None] = print) -> int:
    """Submit the sweep's waiting points into the free submit slots (``resume`` with nothing to resubmit)."""
    return top_up(target.path, log) if target.record is not None else 0


def resume_run(
    target: Target,
    profile: ClusterProfile,
    *,
    hold: bool = False,
    log: Callable[[str], None] = print,
    preflight: bool = True,
) -> Submitted:
    """Submit a single failed run dir again; it continues from its newest checkpoint."""
    executor = executor_for(profile)
    executor.check_time()
    executor.check_site()  # what `cluster check` found that this job depends on, said before queueing
    if preflight:  # the recorded config must still start (targets, $ lines, input paths)

        cfg, record = load_recorded_config(target.path)
        cwd = (record.get("command") or {}).get("cwd")  # where the job runs: relative paths start there
        config_preflight.check_config(cfg, cwd=Path(cwd) if cwd else None, entry=record.get("entry") or "run")
    rd = RunDir(target.path)
    rec = rd.record()
    old = rec.get("job") or {}
    previous = [p for p in [*(old.get("previous") or []), old.get("id")] if p]
    job_record = {"cluster": profile.to_record(), "submitted": now_iso(), "previous": previous}

    if recorded_safe(target.path):  # a --safe run goes on in its sandbox (its mark grants nothing), with the grants
        # its submission when run.yaml is this account's own (a received run.yaml grants nothing)
        found = received_grants(old.get("sandbox") or {"writable": [], "readable": []}, rd.file("run.yaml"))
        job_record["sandbox"] = recorded_grants(found, str(rd.file("run.yaml"))).to_record()
    name = (rec.get("bundle") or {}).get("name", "run")
    # a job folder that is a link out of the run dir would get the job script and the arguments the job reads
    # (jobs/, or slurm/ in a run dir submitted before the folder had its neutral name)
    folder_name = sr.job_folder_of(target.path).name
    folder = inside(target.path, folder_name, f"the job folder {folder_name}/", rd.file("run.yaml"))
    request = JobRequest(job_name=f"hpcr-run-{name}", folder=folder, chdir=(rec.get("command") or {}).get("cwd"),
                         hold=hold)
    if preflight:
        executor.check_resources(request, 1, "the resumed job")
    with outside_the_job():
        job = executor.submit(run_submitted, [[str(target.path.resolve())], [rec.get("entry")], [job_record]],
                              request)[0]
    rd.update_record(status="submitted", job={**job_record, "id": job.job_id, **job.logs})
    out = Submitted(target.path, {0: job.job_id}, [{"job_id": job.job_id, "points": [0]}])
    if executor.runs_here:
        out.local_failures = executor.run_pending(log)
        out.ran_here = True
    return out

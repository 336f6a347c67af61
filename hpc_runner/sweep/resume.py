"""Resubmit the failed and missing points of a sweep (never a completed or a still-queued one)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpc_runner.config.overrides import Override
from hpc_runner.errors import ClusterError
from hpc_runner.records.rundir import now_iso
from hpc_runner.scheduler.profiles import ClusterProfile
from hpc_runner.sweep import ledger as sr
from hpc_runner.sweep import states as tracking
from hpc_runner.sweep.governor import waiting_indices
from hpc_runner.sweep.submission import Submitted, submit_points
from hpc_runner.sweep.targets import Target


@dataclass
class ResumePlan:
    """Which points go again, and which stay (with why)."""

    resubmit: list[tracking.PointState] = field(default_factory=list)
    completed: list[int] = field(default_factory=list)
    active: list[int] = field(default_factory=list)


def still_queued(job_ids: Sequence[str]) -> set[str]:
    """Job ids squeue still lists as pending/running (for points sacct does not know yet)."""
    ids = tracking.array_ids(job_ids)
    if not ids:
        return set()
    try:
        res = subprocess.run(
            ["squeue", "-h", "-r", "-j", ",".join(ids), "-o", "%i"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError):
        return set(job_ids)  # cannot tell: do not risk running a point twice
    if res.returncode != 0:
        return set() if "Invalid job id" in res.stderr else set(job_ids)
    listed = set(res.stdout.split())
    return {j for j in job_ids if j in listed or j.split("_")[0] in listed}


def plan_resume(target: Target, only: Sequence[int] | None = None) -> ResumePlan:
    """Sort the points into resubmit / completed / active; ``only`` limits the resubmitted ones."""
    states, _ = target.states()
    unknown = [s for s in states if s.state in (tracking.UNKNOWN,) and s.job_id]
    queued = still_queued([s.job_id for s in unknown]) if unknown else set()
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
) -> Submitted:
    """Submit the planned points again, and the points still waiting for a slot, through the governor.

    With ``extra`` fixes the planned points' old run dirs go to attempts/. The sweep's lock is held from
    the first sbatch until the record is saved, so no task of the sweep tops up in between.
    """
    assert target.record is not None
    planned = {s.index: s.job_id for s in plan.resubmit}
    fixes = {o.spelling(): o.value for o in extra}
    if preflight:  # the recorded base config plus each point's values and fixes, before any sbatch
        from hpc_runner.config.preflight import check_points
        from hpc_runner.config.recorded import load_recorded_config
        from hpc_runner.sweep.check import make_override

        record = target.record
        base, _ = load_recorded_config(record.base_dir)
        cwd = (record.data.get("command") or {}).get("cwd")  # where the jobs run: relative paths start there
        check_points(base, [[make_override(k, v) for k, v in {**record.effective_overrides(record.points[i]),
                                                                **fixes}.items()] for i in planned],
                     cwd=Path(cwd) if cwd else None)
    with sr.locked(target.path) as record:
        target.record, target.points = record, record.points
        # a point a task submitted since the plan was made (it was waiting) is not sent twice
        indices = [i for i, job in planned.items() if record.points[i].get("job_id") == job]
        fixed = set(indices)
        waiting = [i for i in waiting_indices(record) if i not in fixed]
        try:
            out = submit_points(
                record,
                indices + waiting,
                profile,
                entry=record.data.get("entry"),
                reason="resume",
                hold=hold,
                array_parallelism=array_parallelism,
                before_chunk=_apply_fixes(record, fixes, fixed),
                log=log,
                preflight=preflight,
            )
        finally:
            record.data.setdefault("resumed", []).append({"at": now_iso(), "points": len(indices), "fixes": fixes})
            if all(p.get("job_id") for p in record.points):
                record.data["state"] = "submitted"
            record.save()  # also when an sbatch failed (the lock saves only on success)
    return out


def top_up_waiting(target: Target, log: Callable[[str], None] = print) -> int:
    """Submit the sweep's waiting points into the free submit slots (``resume`` with nothing to resubmit)."""
    from hpc_runner.sweep.governor import top_up

    return top_up(target.path, log) if target.record is not None else 0


def _apply_fixes(
    record: sr.SweepRecord, fixes: dict[str, Any], fixed: set[int]
) -> Callable[[list[int]], Callable[[], None]]:
    """Return the governor's ``before_chunk``: put the fixes on the resumed points, undone if sbatch fails."""
    saved: dict[int, dict[str, Any]] = {}

    def before(idx: list[int]) -> Callable[[], None]:
        moved: list[tuple[int, Path, Path]] = []
        mine = [i for i in idx if i in fixed]
        for i in mine:
            p = record.points[i]
            saved[i] = dict(p.get("extra", {}))
            if fixes:
                p["extra"] = {**p.get("extra", {}), **fixes}
                pair = _move_aside(record, p)
                if pair:
                    moved.append((i, *pair))
                    p.setdefault("attempts", []).append(str(pair[1].relative_to(record.path)))

        def undo() -> None:  # that sbatch failed: the points are as they were
            for i, src, dst in moved:
                dst.rename(src)
                record.points[i]["attempts"].pop()
            for i in mine:
                record.points[i]["extra"] = saved[i]
                if not saved[i]:
                    record.points[i].pop("extra")

        return undo

    return before


def resume_run(
    target: Target,
    profile: ClusterProfile,
    *,
    hold: bool = False,
    log: Callable[[str], None] = print,
    preflight: bool = True,
) -> Submitted:
    """Submit a single failed run dir again; it continues from its newest checkpoint."""
    from hpc_runner.records.rundir import RunDir
    from hpc_runner.scheduler.slurm_executor import make_executor, slurm_parameters, submit_one
    from hpc_runner.sweep.job import run_submitted

    if preflight:  # the recorded config must still start (targets, $ lines, input paths)
        from hpc_runner.config.preflight import check_config
        from hpc_runner.config.recorded import load_recorded_config

        cfg, record = load_recorded_config(target.path)
        cwd = (record.get("command") or {}).get("cwd")  # where the job runs: relative paths start there
        check_config(cfg, cwd=Path(cwd) if cwd else None)
    rd = RunDir(target.path)
    rec = rd.record()
    old = rec.get("job") or {}
    previous = [p for p in [*(old.get("previous") or []), old.get("id")] if p]
    job_record = {"cluster": profile.to_record(), "submitted": now_iso(), "previous": previous}
    if profile.executor == "local":
        out = Submitted(target.path, {0: "local"})
        try:
            run_submitted(str(target.path.resolve()), rec.get("entry"), {**job_record, "id": "local"})
        except Exception as exc:  # run.yaml and error.txt say what failed
            out.local_failures = 1
            log(f"hpc-runner: the run failed: {exc}")
        return out
    name = (rec.get("bundle") or {}).get("name", "run")
    cwd = (rec.get("command") or {}).get("cwd")
    params = slurm_parameters(profile, job_name=f"hpcr-run-{name}", hold=hold, chdir=cwd)
    if preflight:
        from hpc_runner.scheduler.resource_check import check_resources

        check_resources(profile, target.path / sr.RUN_JOB_FOLDER, params, what="the resumed job")
    executor = make_executor(profile, target.path / sr.RUN_JOB_FOLDER, params)
    job = submit_one(executor, run_submitted, str(target.path.resolve()), rec.get("entry"), job_record)
    logs = {"stdout": str(job.paths.stdout), "stderr": str(job.paths.stderr)}
    rd.update_record(status="submitted", job={**job_record, "id": job.job_id, **logs})
    return Submitted(target.path, {0: job.job_id}, [{"job_id": job.job_id, "points": [0]}])

"""``resume DIR`` of a pipeline: queue again only what failed or never ran; keep every completed stage and point.

Refused while a stage is still queued or running (``cancel DIR`` stops it first). Each stage, in order:

- completed (a select stage that chose, a run or sharded stage whose work completed, a search every
  point of which completed, or a search its select stage already chose from): kept;
- a search (sweep, tune) that did not complete: its failed and missing points are resubmitted as
  ``resume`` does for a sweep dir (completed points kept; bounded by the sweep's retries), or its
  workers restarted for a tune;
- a select stage that did not choose: a new job, waiting (``afterany``) on what its input queued now;
- a run or sharded stage that already took its choice (its config holds it) and failed: resumed as
  its folder would be (a run from its newest checkpoint, a sharded stage's failed shards, skipping
  the outputs already complete); one that never started with the choice: its folder moves to
  ``attempts/<stage>-N`` and it is queued anew (with the choice when it is known, else waiting on its
  select stage as at the start);
- an export stage that did not complete: queued anew.

Every stage is queued at most ``MAX_SUBMISSIONS`` times in all (pipeline/record.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpc_runner.config.ids import get_by_id
from hpc_runner.config.loader import load_file
from hpc_runner.errors import ClusterError
from hpc_runner.jobs import ledger as sr
from hpc_runner.jobs.targets import RunTarget, TuneTarget, load_target
from hpc_runner.pipeline import record as pr
from hpc_runner.pipeline.configs import build_configs, stage_profile
from hpc_runner.pipeline.model import COMPLETED, DEFAULT_WEIGHTS_ID, StageView
from hpc_runner.pipeline.propagate import cancel_never_satisfied
from hpc_runner.pipeline.spec import parse_spec
from hpc_runner.pipeline.stages.registry import kind_of
from hpc_runner.pipeline.submit import Started, dependency_of, queue_stages
from hpc_runner.pipeline.view import view
from hpc_runner.scheduler.executor import LOCAL_JOB_ID
from hpc_runner.scheduler.profiles import ClusterProfile, checked_from_record
from hpc_runner.scheduler.select import executor_for
from hpc_runner.sweep.resume import plan_resume, resume_run, resume_sweep
from hpc_runner.tune.resume import resume_tune

Log = Callable[[str], None]
ATTEMPTS = "attempts"
KEEP, POINTS, FRESH, AGAIN = "keep", "points", "fresh", "again"


@dataclass
class PipelinePlan:
    """What resume does with each stage (``keep``, ``points``: resume its folder, ``fresh``, ``again``)."""

    actions: dict[str, str] = field(default_factory=dict)

    def todo(self) -> list[str]:
        """Return the stages that are queued again, in order."""
        return [n for n, a in self.actions.items() if a != KEEP]


def recorded_profile(record: pr.PipelineRecord) -> ClusterProfile:
    """Return the cluster profile the pipeline was started with."""
    return checked_from_record(record.data.get("cluster"), f"the profile recorded in {record.file}")


def plan_pipeline(record: pr.PipelineRecord, views: list[StageView]) -> PipelinePlan:
    """Decide what resume does with each stage (module doc); ClusterError while a stage is active."""
    active = [v.name for v in views if v.active]
    if active:
        raise ClusterError(f"stage(s) {', '.join(active)} of the pipeline are still queued or running",
                           where=str(record.path),
                           expected="a pipeline that has stopped: resume queues again what failed or never ran",
                           hint=f"`hpc-runner status {record.path}` shows them; `hpc-runner cancel {record.path}` "
                           "stops them")
    plan = PipelinePlan()
    again: set[str] = set()
    by_view = {v.name: v for v in views}
    for s in record.stages:
        name, kind, v = s["name"], s.get("kind"), by_view[s["name"]]
        consumed = any(c.get("state") == pr.DONE for c in record.consumers(name) if kind_of(c.get("kind")).chooses)
        inputs_again = bool(set(s.get("inputs") or []) & again)
        if (v.state == COMPLETED or consumed) and not inputs_again:
            plan.actions[name] = KEEP
            continue
        again.add(name)
        plan.actions[name] = kind_of(kind).resume_action(record, name, inputs_again)
    return plan


def took_choice(record: pr.PipelineRecord, name: str, prepared: Path) -> bool:
    """Whether a run or sharded stage's prepared config (in ``prepared``) holds its select stage's choice (or needs
    none): its weights id names the chosen run dir."""
    s = record.stage(name)
    if not (prepared / "config.yaml").is_file():
        return False
    if not s.get("inputs"):
        return True
    choice = record.choice(s["inputs"][0])
    if choice is None:
        return False
    weights_id = (s.get("spec") or {}).get("weights_id") or DEFAULT_WEIGHTS_ID
    try:
        return str(get_by_id(load_file(prepared / "config.yaml").data, weights_id)) == str(choice.get("run_dir"))
    except Exception:  # an unreadable config: the stage starts anew
        return False


def _move_aside(record: pr.PipelineRecord, name: str) -> Path | None:
    folder = record.stage_dir(name)
    if not folder.exists():
        return None
    n = 1
    while (dst := record.path / ATTEMPTS / f"{name}-{n}").exists():
        n += 1
    dst.parent.mkdir(parents=True, exist_ok=True)
    folder.rename(dst)
    return dst


def resume_pipeline(directory: Path, profile: ClusterProfile | None = None, *, log: Log = print,
                    dry_run: bool = False, preflight: bool = True) -> tuple[PipelinePlan, Started]:
    """Queue again what failed or never ran (module doc); return the plan and what was queued (``preflight``:
    check the configs of the folders resumed, as ``resume --no-preflight`` turns off)."""
    cancel_never_satisfied(directory, log)
    record, views = view(directory)
    plan = plan_pipeline(record, views)
    profile = profile or recorded_profile(record)

    out = Started(directory, ran_here=executor_for(profile).runs_here, dry_run=dry_run)
    if dry_run or not plan.todo():
        return plan, out
    configs = _configs(record, profile, directory)

    for name in plan.todo():
        record = pr.PipelineRecord.load(directory)
        if out.ran_here and _input_failed(record, name):
            continue  # ran here, and its input failed again: the select stage cancelled it
        if plan.actions[name] == POINTS:
            _resume_folder(directory, record, name, profile, out, log, preflight)
            continue
        if plan.actions[name] == FRESH:
            moved = _move_aside(record, name)
            if moved:
                log(f"hpc-runner: stage {name}: its folder moves to {moved}; it is queued anew")
        queue_stages(directory, [name], configs, out, log=log, reserve={}, argv=None)
    return plan, out


def _input_failed(record: pr.PipelineRecord, name: str) -> bool:
    """Whether a stage's input ended failed or cancelled (a local run: nothing of it will come)."""
    return any(record.stage(i).get("state") in (pr.FAILED, pr.CANCELLED)
               for i in record.stage(name).get("inputs") or [])


def _configs(record: pr.PipelineRecord, profile: ClusterProfile, directory: Path) -> dict[str, Any]:
    """Every stage's config as at the start, with the choices already made."""
    spec = parse_spec(record.data["pipeline"], Path(record.data.get("file") or record.file))
    choices = {s["name"]: record.choice(s["name"]) for s in record.stages  # the chosen run dir is checked
               if s.get("state") == pr.DONE and s.get("chosen")}
    return build_configs(spec, profile, directory, choices)


def _resume_folder(directory: Path, record: pr.PipelineRecord, name: str, profile: ClusterProfile, out: Started,
                   log: Log, preflight: bool = True) -> None:
    """Resume a stage's own folder (a sweep's failed points, a tune's workers, a failed run) and record its jobs."""
    spec = parse_spec(record.data["pipeline"], Path(record.data.get("file") or record.file))
    stage = spec.stage(name)
    sprofile = stage_profile(profile, stage, str(record.file))
    folder = record.stage_dir(name)
    target = load_target(folder)
    dependency = dependency_of(record, stage)
    if isinstance(target, RunTarget):
        res = resume_run(target, sprofile, preflight=preflight)
        jobs = [res.job_ids[0]] if not res.ran_here else [LOCAL_JOB_ID]
    elif isinstance(target, TuneTarget):
        _, res = resume_tune(folder, target.record, sprofile, log=log, preflight=preflight)
        jobs = [a["job_id"] for a in res.arrays] if res is not None and not res.ran_here else [LOCAL_JOB_ID]
    else:
        if dependency:
            with sr.locked(folder) as ledger:
                ledger.wait_on(dependency)
        points = plan_resume(target)
        res = resume_sweep(target, points, sprofile, log=log, preflight=preflight)
        jobs = [a["job_id"] for a in res.arrays] if not res.ran_here else [LOCAL_JOB_ID]
    with pr.locked(directory) as led:
        led.queue(name, jobs, dependency, profile=sprofile.to_record())
    out.jobs[name] = jobs
    log(f"hpc-runner: stage {name}: resumed its folder ({', '.join(jobs) or 'nothing to resubmit'})")

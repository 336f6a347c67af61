"""Start a pipeline: check everything, write the record, then queue every stage, each waiting on its inputs.

Order of work: the pipeline file is checked (pipeline/spec.py: names, kinds, ``from``, cycles), every
stage's config is loaded and pre-flighted, ``sbatch --test-only`` accepts each stage's jobs, and the
free submit slots can hold one job of each stage (pipeline/preflight.py). Nothing is written before
that. Then ``DIR/pipeline.yaml`` is written (every stage ``planned``) and the stages are queued in
order, each through the code that queues it alone (jobs/submit_run.py, sweep/submission.py, tune/submit.py), with SLURM
dependencies:

- a select stage: ``afterany`` on every job of the stage it chooses from (it runs however they end);
- a stage ``from`` a select stage: ``afterok`` on the select stage's job, ``--kill-on-invalid-dep=yes``;
- a sweep or sharded stage's points go through the governor (a sharded stage's top-ups keep its
  dependency: it is in its sweep.yaml); a sweep stage counts with the slots of the later stages kept.

Each stage is queued holding the pipeline's lock, so a job that starts at once finds its id recorded.
If an sbatch fails, what was queued is cancelled, the stage is ``not-submitted``, the rest ``cancelled``
(the record says why) and the error names ``hpc-runner resume DIR``, which queues them again.

With the local executor (``--cluster local``) the stages run here, in order, each when it is queued;
a stage ``from`` a select stage is then prepared with the choice itself.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpc_runner.errors import ClusterError, UserError
from hpc_runner.pipeline import record as pr
from hpc_runner.pipeline.configs import build_configs
from hpc_runner.pipeline.model import PipelineSpec, StageConfig, StageSpec
from hpc_runner.pipeline.preflight import check_configs, check_resources, keeping, plan_slots
from hpc_runner.pipeline.propagate import INPUT_FAILED, stop_stages
from hpc_runner.pipeline.spec import parse_spec
from hpc_runner.records.rundir import check_folder_path, command_line, now_iso
from hpc_runner.scheduler.dependency import after
from hpc_runner.scheduler.executor import LOCAL_JOB_ID, array_ids
from hpc_runner.scheduler.profiles import ClusterProfile
from hpc_runner.scheduler.select import executor_for
from hpc_runner.sweep.submission import submit_sweep

Log = Callable[[str], None]
LOCAL_JOB = LOCAL_JOB_ID


@dataclass
class Started:
    """What starting (or resuming) a pipeline did."""

    directory: Path
    jobs: dict[str, list[str]] = field(default_factory=dict)  # stage -> the job ids it was queued as
    dependencies: dict[str, str | None] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    ran_here: bool = False
    failed: list[str] = field(default_factory=list)  # stages that failed here (local executor)
    dry_run: bool = False

    def to_json(self, profile: str) -> dict[str, Any]:
        """Return what a script reads (``--json``): the folder, each stage's job ids and what it waits on."""
        return {
            "dir": str(self.directory.resolve()), "profile": profile, "dry_run": self.dry_run,
            "ran_here": self.ran_here, "failed_here": list(self.failed),
            "stages": {name: {"job_ids": list(jobs), "waits": self.dependencies.get(name)}
                       for name, jobs in self.jobs.items()},
            **({"notes": list(self.notes)} if self.dry_run else {}),
        }


def check_new_dir(directory: Path) -> None:
    """Refuse a pipeline dir that exists and is not empty (``resume DIR`` continues one)."""
    check_folder_path(directory, "the pipeline dir")
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise ClusterError(f"the pipeline dir {directory} already exists and is not empty",
                           expected="a new --output_dir (or `hpc-runner resume DIR` to continue a pipeline)")


def new_record(spec: PipelineSpec, configs: dict[str, StageConfig], directory: Path, profile: ClusterProfile,
               argv: Sequence[str] | None, note: str) -> pr.PipelineRecord:
    """Return the record of a new pipeline: every stage planned, in submission order."""
    data = {"kind": pr.KIND, "version": 1, "created": now_iso(), "file": str(spec.file.resolve()),
            "bundle": spec.bundle, "command": command_line(argv), "cwd": os.getcwd(),
            "cluster": profile.to_record(), "checked": note, "pipeline": spec.raw, "history": []}
    stages = [{"name": s.name, "kind": s.kind.name, "dir": s.name, "inputs": s.inputs, "state": pr.PLANNED,
               "jobs": [], "dependency": None, "spec": s.raw, "profile": configs[s.name].profile.to_record(),
               **s.kind.record_fields(configs[s.name])}
              for s in spec.order()]
    return pr.PipelineRecord(directory, data, stages)


def start_pipeline(
    spec: PipelineSpec,
    profile: ClusterProfile,
    directory: Path,
    *,
    argv: Sequence[str] | None = None,
    log: Log = print,
    dry_run: bool = False,
    preflight: bool = True,
) -> Started:
    """Check every stage, write the pipeline dir and queue every stage (module doc)."""
    executor = executor_for(profile)
    executor.check_time()
    executor.check_site()  # what `cluster check` found that this job depends on, said before queueing
    check_new_dir(directory)
    configs = build_configs(spec, profile, directory)
    order = [configs[s.name] for s in spec.order()]
    note = check_configs(order, configs) if preflight else "pre-flight skipped (--no-preflight)"
    if preflight:
        check_resources(order, directory, os.getcwd())
    reserve = plan_slots(order, None if executor.runs_here else executor.limits())
    if dry_run:
        return _dry_run(spec, order, directory, note, profile)
    record = new_record(spec, configs, directory, profile, argv, note)
    pr.write_new(record)
    out = Started(directory, ran_here=executor.runs_here)
    out.notes.append(note)
    queue_stages(directory, [s.name for s in order], configs, out, log=log, reserve=reserve, argv=argv)
    return out


def queue_stages(directory: Path, names: Sequence[str], configs: dict[str, StageConfig], out: Started, *,
                 log: Log = print, reserve: dict[str, int] | None = None, argv: Sequence[str] | None = None) -> None:
    """Queue the stages ``names`` in order (their configs in ``configs``); on an sbatch failure cancel what was
    queued by this call and raise."""
    queued: list[str] = []
    for name in names:
        record = pr.PipelineRecord.load(directory)
        inputs = record.stage(name).get("inputs") or []
        if out.ran_here and any(record.stage(i).get("state") in (pr.FAILED, pr.CANCELLED) for i in inputs):
            continue  # ran here, and its input failed: the select stage cancelled this one
        sc = configs[name]
        try:
            _queue_stage(directory, record, sc, configs, out, log, (reserve or {}).get(name, 0), argv)
        except BaseException as exc:
            message = exc.paragraph() if isinstance(exc, UserError) else f"{type(exc).__name__}: {exc}"
            _undo(directory, name, queued, names, message)
            stop_stages(pr.PipelineRecord.load(directory), queued, log)
            if not isinstance(exc, Exception):
                raise
            left = [n for n in names if n not in queued]
            raise ClusterError(
                f"queueing stage '{name}' failed: {message.rstrip('.')}. "
                + (f"Stage(s) {', '.join(queued)} were queued and are cancelled again; " if queued else "")
                + f"stage(s) {', '.join(left)} are not queued",
                hint=f"`hpc-runner resume {directory}` queues them again") from None
        queued.append(name)


def _undo(directory: Path, failed: str, queued: list[str], names: Sequence[str], message: str) -> None:
    """Record the failed stage as not-submitted and every other stage of this call as cancelled."""
    with pr.locked(directory) as led:
        s = led.record.stage(failed)
        if s.get("state") == pr.PLANNED:
            led.refuse(failed, message)
        for name in names:
            if name != failed and led.record.stage(name).get("state") in (pr.PLANNED, pr.QUEUED):
                led.cancel(name, INPUT_FAILED, f"stage '{failed}' could not be queued: {message}")


def _queue_stage(directory: Path, record: pr.PipelineRecord, sc: StageConfig, configs: dict[str, StageConfig],
                 out: Started, log: Log, reserve: int, argv: Sequence[str] | None) -> None:
    """Queue one stage: under the pipeline's lock for the scheduler; recorded first for the local executor
    (its work runs inside the call, and takes the lock itself)."""
    executor = executor_for(sc.profile)
    if executor.runs_here:
        sc = _with_choice(directory, record, sc, configs)
        with pr.locked(directory) as led:
            led.queue(sc.name, [LOCAL_JOB], None, profile=sc.profile.to_record())
        log(f"hpc-runner: stage {sc.name} ({sc.stage.kind.name}) runs here")
        ok = sc.stage.kind.submit(directory, sc, executor, None, log, reserve, argv)
        out.jobs[sc.name] = [LOCAL_JOB]
        if not ok:
            out.failed.append(sc.name)
        return
    with pr.locked(directory) as led:
        # read under the lock: a select stage that has chosen already (resume) gives its choice now, and one that
        # has not cannot choose before this stage is recorded as waiting on it (it then writes the choice in)
        sc = _with_choice(directory, led.record, sc, configs)
        dependency = dependency_of(led.record, sc.stage)
        jobs = sc.stage.kind.submit(directory, sc, executor, dependency, log, reserve, argv)
        led.queue(sc.name, jobs, dependency, profile=sc.profile.to_record())
    sc.stage.kind.after_queued(directory, sc, jobs)  # a select stage: the sweep's top-ups make it wait on them too
    out.jobs[sc.name] = jobs
    out.dependencies[sc.name] = dependency


def dependency_of(record: pr.PipelineRecord, stage: StageSpec) -> str | None:
    """Return the SLURM dependency a stage is queued with (module doc), None for a stage with no input."""
    if not stage.inputs:
        return None
    source = record.stage(stage.inputs[0])
    jobs = array_ids(source.get("jobs") or [])
    if source.get("state") == pr.DONE or not jobs:
        return None  # chosen already (resume): nothing to wait for
    return after(stage.kind.dependency, jobs)  # afterok; a select stage afterany


def _with_choice(directory: Path, record: pr.PipelineRecord, sc: StageConfig,
                 configs: dict[str, StageConfig]) -> StageConfig:
    """The stage's config with its select stage's choice, once it is known (local executor, resume)."""
    if sc.stage.source is None or not sc.stage.kind.takes_choice:
        return sc
    choice = record.choice(sc.stage.source)
    if choice is None:
        return sc

    spec = parse_spec(record.data["pipeline"], Path(record.data["file"]))
    profile = ClusterProfile.from_record(record.data.get("cluster"))
    return build_configs(spec, profile, directory, {sc.stage.source: choice})[sc.name]


def one_job(executor: Any, job: str, log: Log) -> Any:
    """Return what queueing a stage's one job gave: its id, or (the local executor) whether it ran well."""
    if executor.runs_here:
        return executor.run_pending(log) == 0
    return [job]


def submitted(res: Any) -> Any:
    """Return what queueing a stage's arrays gave (a sweep's, a tune's): their job ids, or (the local executor)
    whether its work ran well."""
    if res.ran_here:
        return res.local_failures == 0
    return [a["job_id"] for a in res.arrays]


def submit_points(directory: Path, sc: StageConfig, sweep: Any, dependency: str | None, log: Log, reserve: int,
                  argv: Sequence[str] | None, **extra: Any) -> Any:
    """Queue the points of ``sweep`` as a sweep dir, through the governor with ``reserve`` slots kept for the later
    stages (a sweep stage, a sharded stage; ``extra`` goes into its sweep.yaml); return as ``submitted``."""
    stage = sc.stage
    record_extra: dict[str, Any] = {"pipeline": {"dir": str(directory.resolve()), "stage": sc.name}, **extra}
    if dependency:
        record_extra["dependency"] = dependency
    res = submit_sweep(sc.cfg, stage.entry, sweep, sc.profile, directory / sc.name, argv=argv, log=log,
                       preflight=False, pack=stage.pack, pack_parallel=stage.pack_parallel, record_extra=record_extra,
                       limits_reader=keeping(reserve))
    if res.waiting:
        log(f"hpc-runner: stage {sc.name}: {len(res.waiting)} point(s) wait for a free submit slot "
            f"({res.limits.describe() if res.limits else 'no slot free'}); they are topped up as usual")
    return submitted(res)


def _dry_run(spec: PipelineSpec, order: list[StageConfig], directory: Path, note: str,
             profile: ClusterProfile) -> Started:
    out = Started(directory, dry_run=True)
    out.notes.append(f"pipeline {spec.file}: {len(order)} stage(s), all checked ({note})")
    for sc in order:
        s = sc.stage
        waits = s.kind.waits_note(s)
        what = s.kind.describe(sc)
        out.notes.append(f"  {s.name:<12} {s.kind.name:<7} {what}; folder {directory / s.name}"
                         + (f"; {waits}" if waits else "") + f"; profile {profile.name}")
    return out

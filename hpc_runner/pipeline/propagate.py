"""A failed stage cancels the stages that depend on it: in the pipeline record first (with the cause), then
their jobs (one scancel per stage) and the points of theirs that wait for a submit slot (their sweep ledger),
so nothing of the pipeline is left pending and nothing waiting is submitted later.

Who does it, with nobody at the terminal: the select stage's job, when it finds nothing to choose
(pipeline/select_job.py); SLURM itself for a stage whose ``afterok`` can never be met (its jobs are
submitted with ``--kill-on-invalid-dep=yes``); and ``status``/``resume``/``cancel`` of the pipeline dir,
which also cancel any job of the pipeline SLURM left pending with reason DependencyNeverSatisfied
(a cluster that ignores kill-on-invalid-dep).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hpc_runner.jobs.cancel import cancel_target
from hpc_runner.jobs.ledger import SWEEP_FILE
from hpc_runner.jobs.targets import load_target
from hpc_runner.pipeline import record as pr
from hpc_runner.scheduler.executor import Executor
from hpc_runner.scheduler.profiles import checked_from_record
from hpc_runner.scheduler.select import executor_for

Log = Callable[[str], None]
INPUT_FAILED = "INPUT_FAILED"  # the cause kind of a stage cancelled because a stage it waits on failed
USER_CANCELLED = "CANCELLED"
NEVER_SATISFIED = "DependencyNeverSatisfied"


def stage_executor(record: pr.PipelineRecord, name: str | None = None) -> Executor:
    """Return the executor of the profile a stage was queued with (else the pipeline's)."""
    recorded = (record.stage(name).get("profile") if name else None) or record.data.get("cluster") or {}
    return executor_for(checked_from_record(recorded, f"the profile recorded in {record.file}"))


def cancel_dependents(directory: Path, failed: str, message: str, log: Log = print) -> list[str]:
    """Cancel every stage that waits, directly or not, on stage ``failed`` (not those already final); return them."""
    with pr.locked(directory) as led:
        victims = [s["name"] for s in led.record.descendants(failed)
                   if s.get("state") in (pr.PLANNED, pr.QUEUED, pr.NOT_SUBMITTED)]
        for name in victims:
            led.cancel(name, INPUT_FAILED, f"stage '{failed}' failed: {message}")
        record = led.record
    stop_stages(record, victims, log)
    return victims


def stop_stages(record: pr.PipelineRecord, names: Sequence[str], log: Log = print) -> list[str]:
    """Cancel the jobs of the stages ``names`` and their points that wait for a slot; return the job ids asked
    to stop. Best effort: a stage whose jobs cannot be cancelled is logged, the others go on."""
    asked: list[str] = []
    for name in names:
        try:
            asked += _stop_stage(record, name)
        except Exception as exc:  # one stage's scancel must not keep the others queued
            log(f"hpc-runner: could not cancel the jobs of stage '{name}': {exc}")
    return asked


def _stop_stage(record: pr.PipelineRecord, name: str) -> list[str]:
    folder = record.stage_dir(name)
    if (folder / SWEEP_FILE).is_file():  # a sweep, tune or sharded stage: its ledger cancels the waiting points

        return cancel_target(load_target(folder)).job_ids
    jobs = [j for j in record.stage(name).get("jobs") or [] if j]
    return stage_executor(record, name).cancel(jobs) if jobs else []


def never_satisfied(record: pr.PipelineRecord) -> dict[str, list[str]]:
    """Return, per queued stage, its jobs SLURM keeps pending with reason DependencyNeverSatisfied (one squeue)."""
    queued = {s["name"]: [j for j in s.get("jobs") or [] if j] for s in record.stages if s.get("state") == pr.QUEUED}
    ids = [j for jobs in queued.values() for j in jobs]
    if not ids:
        return {}
    reasons = stage_executor(record).pending_reasons(ids)
    stuck = {j.split("_")[0] for j, r in reasons.items() if NEVER_SATISFIED in r}
    return {name: jobs for name, jobs in queued.items() if {j.split("_")[0] for j in jobs} & stuck}


def cancel_never_satisfied(directory: Path, log: Log = print) -> list[str]:
    """Cancel the stages whose jobs wait on a dependency that can never be met (their input failed); return them."""
    record = pr.PipelineRecord.load(directory)
    stuck = never_satisfied(record)
    if not stuck:
        return []
    with pr.locked(directory) as led:
        names = []
        for name in stuck:
            s = led.record.stage(name)
            if s.get("state") != pr.QUEUED:
                continue
            inputs = ", ".join(s.get("inputs") or []) or "its input"
            led.cancel(name, INPUT_FAILED, f"stage {inputs} ended without success (SLURM: {NEVER_SATISFIED})")
            names.append(name)
            for d in led.record.descendants(name):
                if d.get("state") in (pr.PLANNED, pr.QUEUED, pr.NOT_SUBMITTED):
                    led.cancel(d["name"], INPUT_FAILED, f"stage '{name}' was cancelled: its input ended without "
                               "success")
                    names.append(d["name"])
        record = led.record
    stop_stages(record, names, log)
    log(f"hpc-runner: cancelled stage(s) {', '.join(names)}: SLURM kept them pending with reason {NEVER_SATISFIED}")
    return names


def describe(stage: dict[str, Any]) -> str:
    """Return a stage's cause as one line (empty when it has none)."""
    cause = stage.get("cause") or {}
    return f"{cause.get('kind')}: {cause.get('message')}" if cause else ""

"""What a select stage's job runs: look at the stage it chooses from, choose, record why, and hand the choice on.

The select stage is queued when the pipeline starts with ``afterany`` on every job of the stage it chooses
from, so it runs whatever way they ended (SLURM never leaves it pending), with one CPU and no GPU. The
stages that take ``from`` it wait on it with ``afterok`` (and ``--kill-on-invalid-dep=yes``). Its job:

1. reads where every point of its input stands (one sacct call, jobs/states.py);
2. if some point is still queued, running, or waiting for a submit slot, it does not choose. The
   governor's top-ups make this job wait on the arrays they add (it is the sweep's ``waiters``), so
   this happens only when the input's last task ended with points still waiting (no slot was free
   then): it submits them (the governor's top-up), then a copy of itself that waits (``afterany``) on
   the input's jobs queued now, points the stages waiting on it at the copy (``scontrol update
   Dependency=afterok:<copy>``), and ends. When no slot is free for the copy either, it keeps its own
   and looks again every POLL_S seconds until a minute before its time limit. Bounded: at most
   MAX_DEFERRALS copies, and the job's own time limit;
3. chooses (pipeline/selection.py) and writes choice.json (every point considered, why);
4. chose: records the choice (pipeline.yaml), then writes it into the prepared config of each stage
   that takes from it (pipeline/choice.py) before it ends, so they start with it;
   nothing to choose: records why, cancels every stage that depends on it (pipeline/propagate.py)
   and ends FAILED.

With the local executor the same function runs in-process, after its input ran.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpc_runner.errors import UserError
from hpc_runner.jobs import ledger as sr
from hpc_runner.jobs.governor import outside_the_job
from hpc_runner.jobs.states import UNKNOWN, WAITING, failure_text
from hpc_runner.jobs.targets import load_target
from hpc_runner.pipeline import record as pr
from hpc_runner.pipeline.choice import apply_choice
from hpc_runner.pipeline.model import DEFAULT_WEIGHTS_ID
from hpc_runner.pipeline.propagate import INPUT_FAILED, cancel_dependents, stage_executor, stop_stages
from hpc_runner.pipeline.selection import Candidate, Decision, decide, has_weights, metric_value, read_summary
from hpc_runner.pipeline.stages.registry import kind_of
from hpc_runner.progress_bars import no_bars_without_a_terminal
from hpc_runner.quick_exit import freeze_at_exit
from hpc_runner.records.atomic import write_text_atomic
from hpc_runner.records.json_out import dumps_json
from hpc_runner.scheduler.dependency import after_any, after_ok
from hpc_runner.scheduler.executor import JobRequest, array_ids, job_entry
from hpc_runner.scheduler.job_env import job_end_time, own_job_id
from hpc_runner.sweep.submission import top_up

Log = Callable[[str], None]
CHOICE_FILE = "choice.json"
NO_CHOICE = "NO_CHOICE"
STALLED = "STALLED"
CHOICE_REFUSED = "CHOICE_REFUSED"
POLL_S = 15.0  # between two looks at an input that is not final and cannot be waited on by a new job
MAX_POLL_S = 600.0  # how long a select job with no time limit (or the local executor) polls at most


class SelectFailed(RuntimeError):
    """Nothing could be chosen; the message says why (the job ends FAILED, its dependents are cancelled)."""


@dataclass
class Examined:
    """The input stage as the select job sees it."""

    candidates: list[Candidate] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)  # "point 3 RUNNING", "point 4 WAITING"
    jobs: list[str] = field(default_factory=list)  # every job id of the input
    waiting: int = 0  # points waiting for a submit slot (no job yet)


def examine(folder: Path) -> Examined:
    """Return the points of the input stage in ``folder`` (a sweep, tune or run dir): chooseable or not, finished
    or not (one scheduler call)."""
    target = load_target(folder)
    states, _ = target.states()
    out = Examined(jobs=[j for j in [p.get("job_id") for p in target.points] + target._worker_jobs() if j])
    for s in states:
        if s.active or s.state == UNKNOWN:
            out.unfinished.append(f"point {s.index} {s.state}")
            out.waiting += s.state == WAITING
            continue
        summary = read_summary(s.run_dir) if s.state == "COMPLETED" else {}
        cause = None
        if s.state != "COMPLETED":
            try:
                cause = f"{s.cause_kind or s.state}: {failure_text(s, target.job_logs)}".strip(": ")
            except Exception:  # a cause that cannot be read is no reason not to choose
                cause = s.cause_kind
        out.candidates.append(Candidate(s.index, s.run_dir, {**s.params, **s.extra}, s.state, cause=cause,
                                        has_weights=has_weights(s.run_dir), summary=summary))
    return out


def metric_and_mode(record: pr.PipelineRecord, stage: dict[str, Any]) -> tuple[str | None, str]:
    """Return the metric and mode of a select stage (a tune's own when the stage names none)."""
    sel = (stage.get("spec") or {}).get("select") or {}
    metric, mode = sel.get("metric"), sel.get("mode", "max")
    source = record.stage(sel["from"])
    own = kind_of(source.get("kind")).own_metric(source.get("spec") or {})
    if metric is None and own is not None:
        metric = own[0]
        if "mode" not in sel:
            mode = own[1]
    return metric, mode


def choose(folder: Path, metric: str | None, mode: str) -> tuple[Decision, Examined]:
    """Examine the input and decide (values read from each completed point's summary.json)."""
    look = examine(folder)
    for c in look.candidates:
        c.value = metric_value(c.summary, metric)
    return decide(look.candidates, metric, mode), look


def submit_select(executor: Any, directory: Path, name: str, dependency: str | None, cwd: str | None = None) -> str:
    """Queue the job of select stage ``name`` (waiting on ``dependency``); return its job id."""
    request = JobRequest(job_name=f"hpcr-select-{name}", folder=directory / name / sr.JOB_FOLDER,
                         chdir=cwd or os.getcwd(), dependency=dependency)
    (directory / name / sr.JOB_FOLDER).mkdir(parents=True, exist_ok=True)
    with outside_the_job():
        job = executor.submit(run_select_stage, [[str(directory.resolve())], [name]], request)[0]
    return job.job_id


@job_entry
def run_select_stage(pipeline_dir: str, name: str) -> dict[str, Any]:
    """The select stage's job (module doc); raise SelectFailed when nothing can be chosen."""
    freeze_at_exit()
    no_bars_without_a_terminal()
    directory = Path(pipeline_dir)
    record = pr.read_settled(directory)
    stage = record.stage(name)
    me = own_job_id()
    if stage.get("state") != pr.QUEUED or (me and me not in (stage.get("jobs") or [])):
        print(f"hpc-runner: select stage {name} is {stage.get('state')} (jobs {stage.get('jobs')}); nothing to do",
              flush=True)
        return {"status": "skipped", "state": stage.get("state")}
    source = stage["inputs"][0]
    metric, mode = metric_and_mode(record, stage)
    folder = record.stage_dir(source)
    print(f"hpc-runner: select stage {name} chooses from {source} by {metric or 'completion'} ({mode})", flush=True)
    decision, look = choose(folder, metric, mode)
    deadline = _deadline(me)
    while look.unfinished:
        deferred = _wait_again(directory, record, name, source, look)
        if deferred is not None:
            return deferred
        if time.time() + POLL_S > deadline:
            message = (f"stage '{source}' did not finish while this job could wait, and no job could be queued to wait "
                       f"for it: {', '.join(look.unfinished[:8])}; `hpc-runner resume {directory}` goes on")
            _fail(directory, name, STALLED, message)
        time.sleep(POLL_S)
        decision, look = choose(folder, metric, mode)
    _write_choice(directory / name, name, source, decision)
    if decision.chosen is None:
        _fail(directory, name, NO_CHOICE, f"nothing to choose from stage '{source}': {decision.why}")
    choice = {"stage": name, "from": source, **decision.to_record()}
    choice.pop("considered", None)  # the whole table is choice.json's
    with pr.locked(directory) as led:
        led.finish(name, chosen=choice)
        if led.record.stage(source).get("state") == pr.QUEUED:
            led.finish(source)
        record = led.record
    print(f"hpc-runner: {name} chose point {decision.chosen.index} of {source}: {decision.why}", flush=True)
    hand_on(directory, record, name, choice)
    return {"status": "chosen", "point": decision.chosen.index, "run_dir": str(decision.chosen.run_dir)}


def _deadline(job: str | None) -> float:
    """Until when this job may poll its input: a minute before SLURM ends it, else MAX_POLL_S from now."""
    end = job_end_time(job) if job else None
    return end - 60.0 if end is not None else time.time() + MAX_POLL_S


def _fail(directory: Path, name: str, kind: str, message: str) -> None:
    """Record the failure, cancel what depends on the stage, and end the job FAILED."""
    with pr.locked(directory) as led:
        led.fail(name, kind, message)
    cancelled = cancel_dependents(directory, name, message, log=lambda m: print(m, flush=True))
    print(f"hpc-runner: {name} failed ({kind}): {message}", flush=True)
    if cancelled:
        print(f"hpc-runner: cancelled the stage(s) that depend on it: {', '.join(cancelled)}", flush=True)
    raise SelectFailed(message)


def _write_choice(folder: Path, name: str, source: str, decision: Decision) -> None:
    data = {"stage": name, "from": source, **decision.to_record()}
    folder.mkdir(parents=True, exist_ok=True)
    write_text_atomic(folder / CHOICE_FILE, dumps_json(data, indent=2, default=str) + "\n")


def hand_on(directory: Path, record: pr.PipelineRecord, name: str, choice: dict[str, Any]) -> list[str]:
    """Write the choice into the prepared config of each queued stage that takes from ``name``; a stage whose
    config refuses it is cancelled (with the cause) and so is what depends on it. Return the stages given it."""
    given = []
    for c in record.consumers(name):
        kind = kind_of(c.get("kind"))
        if c.get("state") != pr.QUEUED or not kind.takes_choice:  # an export stage reads it from the record
            continue
        prepared = kind.prepared_dir(record.stage_dir(c["name"]))
        spec = c.get("spec") or {}
        try:
            applied = apply_choice(prepared, choice, spec.get("weights_id") or DEFAULT_WEIGHTS_ID,
                                   own=set(spec.get("overrides") or {}))
        except UserError as exc:
            message = f"its config does not take the choice of '{name}': {exc.paragraph()}"
            with pr.locked(directory) as led:
                led.cancel(c["name"], CHOICE_REFUSED, message)
                victims = [d["name"] for d in led.record.descendants(c["name"])
                           if d.get("state") in (pr.PLANNED, pr.QUEUED, pr.NOT_SUBMITTED)]
                for v in victims:
                    led.cancel(v, INPUT_FAILED, f"stage '{c['name']}' was cancelled: {message}")
                record = led.record
            stop_stages(record, [c["name"], *victims], log=lambda m: print(m, flush=True))
            print(f"hpc-runner: stage {c['name']} cancelled: {message}", flush=True)
            continue
        print(f"hpc-runner: stage {c['name']} takes {applied['values']}", flush=True)
        given.append(c["name"])
    return given


def _wait_again(directory: Path, record: pr.PipelineRecord, name: str, source: str,
                look: Examined) -> dict[str, Any] | None:
    """The input is not finished: queue a copy of this job that waits on its jobs queued now and point the
    stages waiting on this job at the copy; None when nothing of the input is queued (the caller polls)."""
    executor = stage_executor(record, source)
    live = sorted(executor.still_queued(look.jobs)) if look.jobs else []
    if not live and look.waiting:
        _top_up(record.stage_dir(source))
        look.jobs = examine(record.stage_dir(source)).jobs
        live = sorted(executor.still_queued(look.jobs)) if look.jobs else []
    if not live:
        return None
    with pr.locked(directory) as led:
        if not led.can_defer(name):
            message = (f"stage '{source}' still runs after {pr.MAX_DEFERRALS} waits: "
                       f"{', '.join(look.unfinished[:8])}; `hpc-runner resume {directory}` goes on")
            led.fail(name, STALLED, message)
            stalled = message
        else:
            stalled = None
    if stalled:
        cancel_dependents(directory, name, stalled)
        raise SelectFailed(stalled)
    dependency = after_any(array_ids(live))
    own = stage_executor(record, name)
    try:
        job = submit_select(own, directory, name, dependency, record.data.get("cwd"))
    except UserError as exc:
        if not own.is_limit_refusal(exc.message):
            raise
        # no submit slot for a new job: this one keeps its slot and looks again (the caller polls, bounded)
        print(f"hpc-runner: no submit slot to wait for stage {source} in a new job ({exc.message[:160]}); "
              f"this job looks again in {POLL_S:g} s", flush=True)
        return None
    waiting_on_me = [c for c in record.consumers(name) if c.get("state") == pr.QUEUED]
    for c in waiting_on_me:
        _point_at(record, c, after_ok([job]))
    wait_on_sweep(record.stage_dir(source), job)
    with pr.locked(directory) as led:
        led.defer(name, job, dependency)
        for c in waiting_on_me:
            led.record.stage(c["name"])["dependency"] = after_ok([job])
    print(f"hpc-runner: stage {source} is not finished ({', '.join(look.unfinished[:8])}); select stage {name} "
          f"waits again as job {job} ({dependency})", flush=True)
    return {"status": "deferred", "job": job, "dependency": dependency}


def _point_at(record: pr.PipelineRecord, consumer: dict[str, Any], dependency: str) -> None:
    """Make a waiting stage's jobs (and its points' top-ups) wait on ``dependency``."""
    folder = record.stage_dir(consumer["name"])
    jobs = [j for j in consumer.get("jobs") or [] if j]
    if (folder / sr.SWEEP_FILE).is_file():
        with sr.locked(folder) as ledger:
            ledger.wait_on(dependency)
            jobs = sorted({p["job_id"] for p in ledger.points if p.get("job_id")} | set(jobs))
    if jobs:
        stage_executor(record, consumer["name"]).set_dependency(jobs, dependency)


def _top_up(folder: Path) -> None:
    try:
        top_up(folder, lambda m: print(m, flush=True))
    except Exception as exc:  # the points keep waiting; the caller polls, then says so
        print(f"hpc-runner: could not submit the waiting points of {folder}: {exc}", flush=True)


def wait_on_sweep(folder: Path, job: str) -> None:
    """Make the select job ``job`` a waiter of the sweep in ``folder``: when the governor queues more of its points
    (a top-up), it makes the job wait on those arrays too (jobs/governor.py), so it does not start early."""
    if not (folder / sr.SWEEP_FILE).is_file():
        return
    with sr.locked(folder) as ledger:
        ledger.set_waiter(job)

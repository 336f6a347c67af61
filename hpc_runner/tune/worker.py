"""What one worker of a tune runs (one array task, or a local process): ask, run, report, tell, repeat.

Order of events in a worker:

1. Under the sweep lock: a trial this worker left running (it was preempted, requeued or killed) is
   taken up again; otherwise, while fewer than ``trials`` have started, ``study.ask()`` gives a new
   one and its point (index, run dir, typed params, trial number and id, worker, state running) is
   appended to sweep.yaml. Asking under the lock keeps the count exact, and means any Optuna trial
   still running that sweep.yaml does not know was asked by a worker killed before it could record
   it: it is told FAIL (it never ran).
2. The trial runs in this process in its point dir (the sweep's base + its params; an existing run
   dir with checkpoints resumes exactly). A validation listener reports the metric at each
   validation with step = epochs trained, and raises Pruned when the pruner says so.
3. ``study.tell``: the last validation value, or PRUNED (Optuna keeps the last reported value), or
   FAIL; then the point's state in sweep.yaml. A worker killed between the two finds the trial
   finished in Optuna and only records it; one killed after the run ended but before the tell
   tells from the run dir (run.yaml status, metrics.jsonl). So no trial is lost or run twice.
4. A stop request (SIGUSR2/SIGTERM) checkpoints the running trial and leaves it running in
   sweep.yaml; the worker asks SLURM to requeue it and the requeued worker continues that trial.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hpc_runner.engine import validation_hooks
from hpc_runner.engine.stop import Pruned, clear_stop, install_stop_handlers, stop_requested
from hpc_runner.jobs.job import RunFailed, finish_job, materialize_point, run_keeping_overrides, stderr_into_log
from hpc_runner.jobs.ledger import SweepRecord
from hpc_runner.progress_bars import no_bars_without_a_terminal
from hpc_runner.quick_exit import freeze_at_exit
from hpc_runner.records.metrics_log import read_metrics
from hpc_runner.records.rundir import LOG_FILE, METRICS_FILE, RunDir
from hpc_runner.resources.shares import device_binding
from hpc_runner.resources.threads import use_cpu_budget
from hpc_runner.scheduler.executor import job_entry
from hpc_runner.scheduler.job_env import own_job_id, requeue_job
from hpc_runner.tune import trials
from hpc_runner.tune.settings import TuneSettings
from hpc_runner.tune.space import parse_space
from hpc_runner.tune.study import open_study
from hpc_runner.tune.trials import COMPLETED, FAILED, FINISHED, PRUNED, RUNNING

PREEMPTED = "preempted"  # the worker's outcome when a stop request checkpointed its trial


@job_entry
def run_tune_worker(
    sweep_dir: str | Path, worker_index: int, job_record: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Run trials of the tune in ``sweep_dir`` until its budget is started; return this worker's counts."""
    freeze_at_exit()
    no_bars_without_a_terminal()
    sweep_dir = str(Path(sweep_dir).resolve())
    record = SweepRecord.load(sweep_dir)
    settings = TuneSettings.from_record(record.data.get("tune"), str(record.file))
    space = parse_space(settings.space)
    entry = record.data.get("entry")
    task = own_job_id()
    # its own random stream per worker and per start (a requeued worker must not replay its first asks)
    study = open_study(sweep_dir, settings.direction, settings.sampler, settings.pruner, settings.seed,
                       pruner_options=settings.pruner_options,
                       sampler_options=settings.sampler_options, stream=(worker_index, _claimed(record)))
    use_cpu_budget()
    clear_stop()
    restore = install_stop_handlers()  # a stop between two trials must not kill the worker
    counts = {COMPLETED: 0, PRUNED: 0, FAILED: 0}
    stopped = False
    try:
        while True:
            if stop_requested():
                stopped = True
                break
            point = _claim_trial(sweep_dir, study, space, settings.trials, worker_index, task)
            if point is None:
                break
            state = _finish_trial(sweep_dir, study, point, settings, entry, job_record, worker_index)
            if state == PREEMPTED:
                stopped = True
                break
            counts[state] += 1
    finally:
        if task is None:
            restore()
    out: dict[str, Any] = {"status": COMPLETED, "worker": worker_index, "trials": counts}
    if stopped:
        out["status"] = PREEMPTED
        requeued = requeue_job() if task else None
        if requeued:
            out["requeued"] = requeued
    print(f"hpc-runner: tune worker {worker_index} {out['status']}: {counts[COMPLETED]} completed, "
          f"{counts[PRUNED]} pruned, {counts[FAILED]} failed", flush=True)
    return out


def _claimed(record: Any) -> int:
    """Return how many trials of the budget workers have claimed so far."""
    return sum(1 for p in record.points if p.get("trial") is not None)


def _claim_trial(
    sweep_dir: str, study: Any, space: Any, budget: int, worker_index: int, task: str | None
) -> dict[str, Any] | None:
    """Return the trial this worker must run next (its unfinished one first), or None when the budget is spent."""
    with trials.locked(sweep_dir) as ledger:
        for p in ledger.points:
            if p.get("worker") == worker_index and p.get("state") == RUNNING:
                return dict(ledger.resume_trial(p["index"], task))
        _fail_orphans(study, ledger.points)
        if not ledger.unclaimed_trials():
            return None
        trial = study.ask(space.distributions())
        # Trial(study, id) takes the trial up again after a requeue: the ledger keeps its id
        point = ledger.claim_trial(worker_index, task, space.typed(trial.params), trial)
        return dict(point) if point is not None else None


def _fail_orphans(study: Any, points: list[dict[str, Any]]) -> None:
    """Tell FAIL for running Optuna trials that sweep.yaml does not know (their worker died between ask and record)."""
    from optuna.trial import TrialState

    known = {p.get("trial") for p in points if p.get("trial") is not None}
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if t.number not in known:
            study.tell(t.number, state=TrialState.FAIL)


def _finish_trial(
    sweep_dir: str, study: Any, point: dict[str, Any], settings: Any, entry: str | None,
    job_record: dict[str, Any] | None, worker_index: int,
) -> str:
    """Run (or continue) one trial, tell Optuna how it ended and record it; return its state or PREEMPTED."""
    frozen = _frozen(study, point["trial"])
    if frozen.state.is_finished():  # told before the worker was killed: only sweep.yaml is behind
        state = {"COMPLETE": COMPLETED, "PRUNED": PRUNED}.get(frozen.state.name, FAILED)
        _record(sweep_dir, point, state, frozen.value, _epochs(sweep_dir, point), None)
        return state
    run_dir = Path(sweep_dir) / point["dir"]
    ended = RunDir(run_dir).record().get("status") if run_dir.is_dir() else None
    error = None
    if ended in FINISHED:  # the run ended before the worker could tell: tell from the run dir
        state = ended
        if state == FAILED:
            error = ((RunDir(run_dir).record().get("error") or {}).get("message")) or "the run failed"
    else:
        state, error = _run_trial(sweep_dir, study, point, settings, entry, job_record, worker_index)
        if state == PREEMPTED:
            return state
    value = _last_value(run_dir, settings.metric)
    if state == COMPLETED and value is None:
        state, error = FAILED, f"the run reported no validation '{settings.metric}' (the trainer's metric_name)"
    _tell(study, point["trial"], state, value)
    _record(sweep_dir, point, state, value, _epochs(sweep_dir, point), error)
    return state


def _run_trial(
    sweep_dir: str, study: Any, point: dict[str, Any], settings: Any, entry: str | None,
    job_record: dict[str, Any] | None, worker_index: int,
) -> tuple[str, str | None]:
    """Run the trial's point dir in this process with the pruning listener; return (state, error)."""
    import optuna

    trial = optuna.trial.Trial(study, point["trial_id"])  # the same trial after a requeue, not a new one
    reported = set(_frozen(study, point["trial"]).intermediate_values)

    def report(epoch: int, metric_name: str, value: float) -> None:
        if metric_name != settings.metric:
            return
        step = epoch + 1  # the pruner's resource: epochs trained
        if step not in reported:  # a resumed run validates an epoch again only if it was killed before saving
            trial.report(value, step)
            reported.add(step)
        if trial.should_prune():
            raise Pruned(epoch, metric_name, value)

    tune = {"trial": point["trial"], "worker": worker_index}
    try:
        path = materialize_point(sweep_dir, Path(sweep_dir) / point["dir"], point["params"], entry)
    except Exception as exc:  # a params set the pre-flight corners did not cover
        return FAILED, f"cannot write the trial's run dir: {exc}"
    print(f"hpc-runner: tune trial {point['trial']} (point {point['index']}) runs in {path}", flush=True)
    sweep = {"dir": sweep_dir, "index": point["index"], "overrides": point["params"]}
    RunDir(path).update_record(binding=device_binding(), tune=tune, sweep=sweep)  # before it runs: what it reads
    with validation_hooks.listening(report), stderr_into_log(path / LOG_FILE):
        outcome = run_keeping_overrides(path, entry)
    extra = {"sweep": sweep, "tune": tune, "job": job_record or {}}
    try:
        result = finish_job(outcome, extra, requeue=False)  # the worker requeues once, after the loop
    except RunFailed as exc:
        return FAILED, str(exc).splitlines()[0] if str(exc) else "the run failed"
    return result["status"], None


def _frozen(study: Any, number: int) -> Any:
    """Return the FrozenTrial of trial ``number`` as the journal has it now (numbers count from 0 in a study)."""
    trial = study.get_trials(deepcopy=False)[number]
    assert trial.number == number
    return trial


def _tell(study: Any, number: int, state: str, value: float | None) -> None:
    from optuna.trial import TrialState

    if state == COMPLETED:
        study.tell(number, value)
    elif state == PRUNED:
        study.tell(number, state=TrialState.PRUNED)  # Optuna keeps the last reported value
    else:
        study.tell(number, state=TrialState.FAIL)


def _record(sweep_dir: str, point: dict[str, Any], state: str, value: float | None, epochs: int | None,
            error: str | None) -> None:
    """Write the trial's end into its point (the ledger's transition)."""
    with trials.locked(sweep_dir) as ledger:
        ledger.finish_trial(point["index"], state, value, epochs, error)


def _metrics(run_dir: Path) -> list[dict[str, Any]]:
    return read_metrics(run_dir / METRICS_FILE)


def _last_value(run_dir: Path, metric: str) -> float | None:
    """Return the run's last validation value of ``metric`` (what the trial is told), or None."""
    values = [r[metric] for r in _metrics(run_dir) if r.get("kind") == "val" and metric in r]
    return float(values[-1]) if values else None


def _epochs(sweep_dir: str, point: dict[str, Any]) -> int | None:
    """Return the epochs the trial trained (its compute cost), from its metrics.jsonl."""
    epochs = [r["epoch"] for r in _metrics(Path(sweep_dir) / point["dir"]) if r.get("kind") == "epoch"]
    return max(epochs) + 1 if epochs else None


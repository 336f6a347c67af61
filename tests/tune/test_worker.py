"""A tune worker run locally (in this process, no SLURM) on the example bundle: trials, pruning, kill and resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpc_runner.jobs.ledger import SweepRecord
from hpc_runner.records.rundir import RunDir
from hpc_runner.tune.study import open_study
from hpc_runner.tune.worker import run_tune_worker

ROOT = Path(__file__).resolve().parents[2]


def _claimed(sweep: Path) -> list[dict]:
    """Return the trial points a worker has claimed (a tune's budget is all in sweep.yaml from the start)."""
    return [p for p in SweepRecord.load(sweep).points if p.get("trial") is not None]


def _optuna_states(sweep: Path) -> dict[int, str]:
    return {t.number: t.state.name for t in open_study(sweep, "maximize", "random", "none").get_trials()}


@pytest.mark.slow
@pytest.mark.parametrize(("pruner", "options"), [("median", {"n_startup_trials": 1}),
                                                 ("asha", {"min_resource": 1, "reduction_factor": 2})])
def test_worker_runs_the_budget_and_the_pruner_stops_hopeless_trials(tmp_path: Path, make_tune, pruner,
                                                                     options) -> None:
    sweep = make_tune(tmp_path / "tune", ["learning_rate=choice(0.01,1e-6)"], trials=4, pruner=pruner,
                      pruner_options=options, seed=5)
    out = run_tune_worker(sweep, 0)
    points = SweepRecord.load(sweep).points
    assert [p["trial"] for p in points] == [0, 1, 2, 3]
    assert points[0]["params"] == {"learning_rate": 0.01}, "seed 5 draws a good first trial: the pruner's baseline"
    for p in points:
        run = RunDir(sweep / p["dir"]).record()
        if p["params"]["learning_rate"] == 0.01:
            assert (p["state"], run["status"], p["epochs"]) == ("completed", "completed", 3)
        else:  # lr 1e-6 barely moves from the initial weights: worse than the median at the first validation
            assert (p["state"], run["status"], p["epochs"]) == ("pruned", "pruned", 1)
            assert run["pruned"]["epoch"] == 1 and run["pruned"]["metric"] == "val_dice"
            assert not (sweep / p["dir"] / "error.txt").exists()
            records = [json.loads(x) for x in (sweep / p["dir"] / "metrics.jsonl").read_text().splitlines()]
            assert [r["kind"] for r in records][-2:] == ["val", "epoch"]  # its last epoch is recorded whole
    pruned = [p for p in points if p["state"] == "pruned"]
    assert len(pruned) == 2 and out["trials"] == {"completed": 2, "pruned": 2, "failed": 0}
    states = _optuna_states(sweep)
    assert states == {p["trial"]: {"completed": "COMPLETE", "pruned": "PRUNED"}[p["state"]] for p in points}
    study = open_study(sweep, "maximize", "random", "none")
    assert study.best_trial.params == {"learning_rate": 0.01}
    assert study.best_value == pytest.approx(points[0]["value"])
    assert sorted(study.trials[0].intermediate_values) == [1, 2, 3]  # step = epochs trained


@pytest.mark.slow
def test_a_worker_asked_for_more_finds_the_budget_spent_and_an_orphan_trial_is_failed(tmp_path: Path,
                                                                                        make_tune) -> None:
    from optuna.distributions import FloatDistribution

    sweep = make_tune(tmp_path / "tune", ["learning_rate=uniform(0.005,0.02)"], trials=1)
    orphan = open_study(sweep, "maximize", "random", "none").ask({"learning_rate": FloatDistribution(0.005, 0.02)})
    assert orphan.number == 0  # a worker asked, then died before sweep.yaml knew: the trial never ran
    run_tune_worker(sweep, 0)
    again = run_tune_worker(sweep, 1)
    assert again["trials"] == {"completed": 0, "pruned": 0, "failed": 0}
    points = SweepRecord.load(sweep).points
    assert [(p["trial"], p["state"]) for p in points] == [(1, "completed")]
    assert _optuna_states(sweep) == {0: "FAIL", 1: "COMPLETE"}


WORKER = """
import sys
from hpc_runner.tune.worker import run_tune_worker
run_tune_worker(sys.argv[1], 0)
"""


@pytest.mark.slow
def test_a_worker_killed_mid_trial_continues_that_trial_from_its_checkpoint(tmp_path: Path, make_tune) -> None:
    sweep = make_tune(tmp_path / "tune", ["learning_rate=loguniform(0.005,0.02)"], trials=2,
                      extra=["--max_epochs", "5"])
    first = sweep / "points" / "0000"
    log = (tmp_path / "worker.log").open("w")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", WORKER, str(sweep)], env=env, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 120
        while not list((first / "checkpoints").glob("ckpt_*.pt")) and proc.poll() is None:
            assert time.monotonic() < deadline, "no checkpoint after 120 s"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)  # after its first validation and checkpoint, mid-trial
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL, (tmp_path / "worker.log").read_text()[-3000:]
    killed = _claimed(sweep)
    assert [(p["trial"], p["state"]) for p in killed] == [(0, "running")]
    assert RunDir(first).record()["status"] == "running"  # SIGKILL: nothing could record the end

    out = run_tune_worker(sweep, 0)  # the same worker index, as a requeued array task would be

    assert out["trials"] == {"completed": 2, "pruned": 0, "failed": 0}
    points = SweepRecord.load(sweep).points
    assert [(p["trial"], p["state"], p["epochs"]) for p in points] == [(0, "completed", 5), (1, "completed", 5)]
    assert points[0]["resumed"] == 1 and points[0]["params"] == killed[0]["params"]
    summary = json.loads((first / "summary.json").read_text())
    assert summary["resumed_from"], "the trial continued from its checkpoint, not from scratch"
    assert RunDir(first).record()["attempts"] == 2
    assert _optuna_states(sweep) == {0: "COMPLETE", 1: "COMPLETE"}  # no trial lost, none asked twice
    trial0 = open_study(sweep, "maximize", "random", "none").trials[0]
    assert sorted(trial0.intermediate_values) == [1, 2, 3, 4, 5]
    assert trial0.value == pytest.approx(points[0]["value"])


@pytest.mark.slow
def test_a_stop_request_checkpoints_the_trial_and_the_next_start_finishes_it(tmp_path: Path, make_tune) -> None:
    from hpc_runner.engine import validation_hooks
    from hpc_runner.engine.stop import clear_stop, request_stop

    sweep = make_tune(tmp_path / "tune", ["learning_rate=uniform(0.005,0.02)"], trials=2)

    def stop_after_first_validation(epoch: int, name: str, value: float) -> None:
        if epoch == 0:
            request_stop("SIGUSR2")  # as SLURM's signal before a preemption or the time limit

    try:
        with validation_hooks.listening(stop_after_first_validation):
            out = run_tune_worker(sweep, 3)
    finally:
        clear_stop()
    assert out["status"] == "preempted" and "requeued" not in out  # no SLURM job to requeue here
    points = _claimed(sweep)
    assert [(p["trial"], p["state"], p["worker"]) for p in points] == [(0, "running", 3)]
    assert RunDir(sweep / points[0]["dir"]).record()["status"] == "preempted"
    assert _optuna_states(sweep) == {0: "RUNNING"}
    out = run_tune_worker(sweep, 3)
    assert out["trials"] == {"completed": 2, "pruned": 0, "failed": 0}
    assert _optuna_states(sweep) == {0: "COMPLETE", 1: "COMPLETE"}
    summary = json.loads((sweep / points[0]["dir"] / "summary.json").read_text())
    assert summary["resumed_from"] and summary["epochs"] == 3


TWO_WORKERS = """
import sys
from hpc_runner.tune.worker import run_tune_worker
print(run_tune_worker(sys.argv[1], int(sys.argv[2]))["trials"], flush=True)
"""


@pytest.mark.slow
def test_two_workers_at_once_share_the_budget_exactly(tmp_path: Path, make_tune) -> None:
    sweep = make_tune(tmp_path / "tune", ["learning_rate=loguniform(0.001,0.02)"], trials=5, sampler="tpe",
                      extra=["--max_epochs", "1"])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", TWO_WORKERS, str(sweep), str(i)], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for i in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[-2000:] for o in outs]
    points = SweepRecord.load(sweep).points
    assert sorted(p["trial"] for p in points) == [0, 1, 2, 3, 4]  # exactly the budget, each trial once
    assert [p["index"] for p in points] == [0, 1, 2, 3, 4] and {p["state"] for p in points} == {"completed"}
    assert len({p["dir"] for p in points}) == 5
    assert _optuna_states(sweep) == dict.fromkeys(range(5), "COMPLETE")
    assert {p["worker"] for p in points} == {0, 1}  # both took trials while the other ran one


@pytest.mark.slow
def test_a_trial_told_before_the_worker_died_is_only_recorded_not_run_again(tmp_path: Path, make_tune) -> None:
    from hpc_runner.jobs import ledger as sr

    sweep = make_tune(tmp_path / "tune", ["learning_rate=uniform(0.005,0.02)"], trials=1, extra=["--max_epochs", "1"])
    run_tune_worker(sweep, 0)
    with sr.locked(sweep) as record:  # as a kill between study.tell and the sweep.yaml update leaves it
        told = dict(record.points[0])
        record.points[0].update(state="running", value=None)
    out = run_tune_worker(sweep, 0)
    point = SweepRecord.load(sweep).points[0]
    assert out["trials"]["completed"] == 1 and point["state"] == "completed"
    assert point["value"] == pytest.approx(told["value"])
    assert RunDir(sweep / point["dir"]).record()["attempts"] == 1  # not run a second time

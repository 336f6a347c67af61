"""``hpc-runner tune`` on the example bundle: --cluster local runs the workers here; bad input writes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpc_runner.cli import main
from hpc_runner.jobs.ledger import SweepRecord
from tests.tune.conftest import BUNDLE


def _tune(out: Path, tiny: list[str], *extra: str) -> int:
    return main(["tune", "--bundle", str(BUNDLE), "--space", "learning_rate=loguniform(1e-4,1e-1)",
                 "--metric", "val_dice", "--sampler", "random", "--sampler-seed", "0", "--cluster", "local",
                 "--output_dir", str(out), *extra, *tiny])


@pytest.mark.slow  # whole CLI runs or several processes: the full suite runs it
def test_tune_local_runs_the_budget_with_two_workers_and_records_the_submission(tmp_path: Path, tiny) -> None:
    out = tmp_path / "t"
    assert _tune(out, tiny, "--trials", "3", "--parallel", "2", "--pruner", "none") == 0
    record = SweepRecord.load(out)
    assert [p["state"] for p in record.points] == ["completed"] * 3
    assert all(p["value"] is not None and p["epochs"] == 3 for p in record.points)
    assert record.submissions()[-1]["workers"] == {"0": "local", "1": "local"}
    assert record.data["tune"]["trials"] == 3


def test_tune_with_a_bad_space_exits_2_and_writes_nothing(tmp_path: Path, tiny, capsys) -> None:
    out = tmp_path / "t"
    code = main(["tune", "--bundle", str(BUNDLE), "--space", "learning_rate=logunifrm(1e-4,1e-1)", "--trials", "2",
                 "--metric", "val_dice", "--cluster", "local", "--output_dir", str(out), *tiny])
    assert code == 2
    assert "Did you mean loguniform()" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.slow
def test_sampler_options_are_recorded_for_every_worker_and_a_bad_value_exits_2_writing_nothing(
        tmp_path: Path, tiny, capsys) -> None:
    bad = tmp_path / "bad"
    assert _tune(bad, tiny, "--trials", "2", "--sampler", "tpe", "--sampler-option", "n_startup_trials=two") == 2
    err = capsys.readouterr().err
    assert "fails on a trial with these options" in err and "n_startup_trials" in err, err
    assert not bad.exists()
    out = tmp_path / "t"
    assert main(["tune", "--bundle", str(BUNDLE), "--space", "learning_rate=loguniform(1e-4,1e-1)", "--metric",
                 "val_dice", "--sampler", "tpe", "--sampler-option", "n_startup_trials=1", "--pruner", "none",
                 "--sampler-seed", "0", "--trials", "2", "--cluster", "local", "--output_dir", str(out), *tiny]) == 0
    record = SweepRecord.load(out)
    assert record.data["tune"]["sampler_options"] == {"n_startup_trials": 1}  # what each worker builds its TPE with
    assert [p["state"] for p in record.points] == ["completed"] * 2


def test_tune_with_a_metric_the_trainer_does_not_report_exits_2_and_writes_nothing(tmp_path: Path, tiny) -> None:
    out = tmp_path / "t"
    assert main(["tune", "--bundle", str(BUNDLE), "--space", "learning_rate=loguniform(1e-4,1e-1)", "--trials", "2",
                 "--metric", "val_loss", "--cluster", "local", "--output_dir", str(out), *tiny]) == 2
    assert not out.exists()


@pytest.mark.slow
def test_resume_restarts_the_worker_whose_trial_was_left_running_and_it_finishes_it(tmp_path: Path, make_tune,
                                                                                    capsys) -> None:
    """A stop request leaves worker 3's trial running; `resume` restarts worker 3, which continues it."""
    import json

    from hpc_runner.engine import validation_hooks
    from hpc_runner.engine.stop import clear_stop, request_stop
    from hpc_runner.tune.worker import run_tune_worker

    sweep = make_tune(tmp_path / "tune", ["learning_rate=uniform(0.005,0.02)"], trials=2)

    def stop_after_first_validation(epoch: int, name: str, value: float) -> None:
        if epoch == 0:
            request_stop("SIGUSR2")

    try:
        with validation_hooks.listening(stop_after_first_validation):
            run_tune_worker(sweep, 3)
    finally:
        clear_stop()
    claimed = [p for p in SweepRecord.load(sweep).points if p.get("trial") is not None]  # the budget's others wait
    assert [(p["state"], p["worker"]) for p in claimed] == [("running", 3)]
    capsys.readouterr()
    assert main(["resume", str(sweep), "--cluster", "local"]) == 0
    said = capsys.readouterr().out
    assert "restart [3] (trial left running)" in said and "ran 1 worker(s) here" in said, said
    points = SweepRecord.load(sweep).points
    assert [(p["trial"], p["state"]) for p in points] == [(0, "completed"), (1, "completed")]
    summary = json.loads((sweep / points[0]["dir"] / "summary.json").read_text())
    assert summary["resumed_from"] and summary["epochs"] == 3  # continued from its checkpoint, not rerun
    assert main(["resume", str(sweep), "--cluster", "local"]) == 0
    assert "nothing to restart" in capsys.readouterr().out

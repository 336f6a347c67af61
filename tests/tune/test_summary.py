"""What status and collect say of a tune dir: trials, the best so far, pruning per rung, importances."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from hpc_runner.cli import main
from hpc_runner.jobs.ledger import SweepRecord
from hpc_runner.tune.summary import rungs
from tests.tune.conftest import BUNDLE


def _trial(state: TrialState, values: dict[int, float], value: float | None = None):
    return create_trial(state=state, value=value, params={"x": 0.5}, distributions={"x": FloatDistribution(0, 1)},
                        intermediate_values=values)


def test_a_rung_counts_who_reported_who_stopped_there_and_the_weakest_who_went_on():
    trials = [
        _trial(TrialState.PRUNED, {1: 0.1}),
        _trial(TrialState.PRUNED, {1: 0.2}),
        _trial(TrialState.PRUNED, {1: 0.5, 2: 0.3}),  # went on at step 1, stopped at step 2
        _trial(TrialState.COMPLETE, {1: 0.4, 2: 0.6, 3: 0.7}, 0.7),
    ]
    r1, r2 = rungs(trials, "maximize")
    assert (r1.step, r1.reported, r1.pruned, r1.best, r1.worst_kept) == (1, 4, 2, 0.5, 0.4)
    assert (r2.step, r2.reported, r2.pruned, r2.best, r2.worst_kept) == (2, 2, 1, 0.6, 0.6)
    low = rungs(trials, "minimize")[0]
    assert (low.best, low.worst_kept) == (0.1, 0.5)  # minimizing: the best is the lowest, the weakest kept the highest


@pytest.mark.slow
def test_status_and_collect_of_a_tune_dir_show_trials_best_rungs_and_importances(tmp_path: Path, tiny, capsys):
    out = tmp_path / "t"
    tiny4 = [*tiny[:tiny.index("--max_epochs")], "--max_epochs", "4", *tiny[tiny.index("--max_epochs") + 2:]]
    assert main(["tune", "--bundle", str(BUNDLE), "--space", "learning_rate=loguniform(1e-4,1e-1)",
                 "--space", "network_def::channels=choice([4,8],[8,16])", "--trials", "5", "--metric", "val_dice",
                 "--pruner", "asha", "--sampler", "random", "--sampler-seed", "0", "--cluster", "local",
                 "--output_dir", str(out), *tiny4]) == 0
    points = SweepRecord.load(out).points
    states = [p["state"] for p in points]
    assert set(states) <= {"completed", "pruned"} and "pruned" in states, states
    capsys.readouterr()

    assert main(["status", str(out)]) == 0
    text = capsys.readouterr().out
    done = [p for p in points if p["state"] == "completed"]
    best = max(done, key=lambda p: p["value"])
    assert f"best so far: trial {best['trial']} (point {best['index']:04d}) val_dice {best['value']:.4g}" in text, text
    assert f"{states.count('pruned')} pruned" in text and "step 1:" in text, text

    assert main(["status", "--json", str(out)]) == 0
    tune = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["tune"]
    assert sum(r["pruned"] for r in tune["rungs"]) == states.count("pruned")
    assert tune["epochs"] == sum(p["epochs"] for p in points)
    assert len(done) < 2 or set(tune["importances"]) == {"learning_rate", "network_def::channels"}, tune

    assert main(["collect", str(out), "--quiet"]) == 0
    md = (out / "tune.md").read_text()
    assert md.count("| pruned |") == states.count("pruned") and md.count("| completed |") == len(done), md
    assert json.loads((out / "tune.json").read_text())["best"]["number"] == best["trial"]
    rows = {int(r["point"]): r for r in csv.DictReader((out / "results.csv").open())}
    for p in points:  # a pruned trial's row has the epochs it trained and its last validation, as a completed one
        row = rows[p["index"]]
        assert (row["state"].lower(), int(row["epochs"])) == (p["state"], p["epochs"]), row
        assert float(row["val_dice"]) == pytest.approx(p["value"]), row  # the last validation, told to Optuna

    assert main(["report", str(out)]) == 0
    html = (out / "report.html").read_text()
    assert "<h2>Tune</h2>" in html and html.count("<td>pruned</td>") == states.count("pruned"), html[-2000:]

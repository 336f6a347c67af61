"""The study's journal file in the sweep dir: shared by processes, samplers and pruners by name."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpc_runner.errors import UserError
from hpc_runner.tune.study import journal_path, make_pruner, make_sampler, open_study

ROOT = Path(__file__).resolve().parents[2]

ASKER = """
import sys, time
from pathlib import Path
from hpc_runner.tune.study import open_study
from hpc_runner.tune.space import parse_space
sweep, go, n, me = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
study = open_study(sweep, "maximize", "random", "none", seed=0, stream=(me,))
space = parse_space(["x=uniform(0,1)"])
while not go.exists():
    time.sleep(0.01)
for _ in range(n):
    trial = study.ask(space.distributions())
    study.tell(trial, trial.params["x"])
    print(trial.number, flush=True)
"""


def test_two_processes_asking_at_once_get_distinct_trial_numbers(tmp_path: Path) -> None:
    import optuna

    go, n = tmp_path / "go", 15
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    procs = [subprocess.Popen([sys.executable, "-c", ASKER, str(tmp_path), str(go), str(n), str(i)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    time.sleep(3)  # both have imported optuna and opened the study: now they ask at the same time
    go.touch()
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    numbers = [int(x) for out, _ in outs for x in out.split()]
    assert sorted(numbers) == list(range(2 * n))  # no number given twice, none lost
    assert journal_path(tmp_path).is_file()
    study = open_study(tmp_path, "maximize", "random", "none")
    trials = study.get_trials()
    assert len(trials) == 2 * n and all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    assert len({t.params["x"] for t in trials}) == 2 * n  # their own random streams: no repeated draws


def test_study_is_created_once_and_loaded_after(tmp_path: Path) -> None:
    first = open_study(tmp_path, "minimize", "tpe", "asha", seed=3)
    first.tell(first.ask({"x": __import__("optuna").distributions.FloatDistribution(0, 1)}), 0.5)
    again = open_study(tmp_path, "minimize", "qmc", "median", seed=3)
    assert len(again.trials) == 1 and again.direction.name == "MINIMIZE"


def test_samplers_and_pruners_by_name_and_unknown_names_are_refused() -> None:
    import optuna

    assert isinstance(make_sampler("tpe", 0), optuna.samplers.TPESampler)
    assert isinstance(make_sampler("random", 0), optuna.samplers.RandomSampler)
    assert isinstance(make_sampler("qmc", 0), optuna.samplers.QMCSampler)
    assert isinstance(make_pruner("asha"), optuna.pruners.SuccessiveHalvingPruner)
    assert isinstance(make_pruner("hyperband"), optuna.pruners.HyperbandPruner)
    assert isinstance(make_pruner("median", n_startup_trials=1), optuna.pruners.MedianPruner)
    assert isinstance(make_pruner("none"), optuna.pruners.NopPruner)
    with pytest.raises(UserError, match="Did you mean 'asha'"):
        make_pruner("ahsa")
    with pytest.raises(UserError, match="unknown sampler"):
        make_sampler("grid")
    with pytest.raises(UserError, match="bad options"):
        make_pruner("median", n_startup=1)


def test_sampler_options_reach_the_optuna_class_and_a_bad_one_is_refused() -> None:
    tpe = make_sampler("tpe", 0, n_startup_trials=3)
    assert tpe._n_startup_trials == 3 and tpe._constant_liar  # ours kept unless the user sets it
    assert make_sampler("tpe", 0, constant_liar=False)._constant_liar is False
    with pytest.raises(UserError, match="bad options for the tpe sampler") as err:
        make_sampler("tpe", 0, n_startup=3)
    assert "optuna.samplers.TPESampler" in str(err.value)


def test_a_bad_option_value_fails_in_the_rehearsal_not_in_a_queued_worker() -> None:
    from hpc_runner.tune.settings import TuneSettings
    from hpc_runner.tune.space import parse_space
    from hpc_runner.tune.study import rehearse

    space = parse_space(["learning_rate=loguniform(1e-4,1e-1)"]).distributions()
    good = TuneSettings(space=[], trials=4, metric="val_dice", sampler_options={"n_startup_trials": 2},
                        pruner_options={"min_resource": 1})
    rehearse(good, space)
    bad = TuneSettings(space=[], trials=4, metric="val_dice", sampler_options={"n_startup_trials": "two"})
    with pytest.raises(UserError, match="fails on a trial with these options: TypeError") as err:
        rehearse(bad, space)
    assert "'n_startup_trials': 'two'" in str(err.value)

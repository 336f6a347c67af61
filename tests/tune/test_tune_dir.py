"""A tune dir is checked before it is written: every corner of the space against the config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpc_runner.errors import UserError
from hpc_runner.sweep.ledger import SweepRecord
from hpc_runner.tune.settings import TuneSettings


def test_tune_dir_holds_the_base_config_and_the_tune_section(tmp_path: Path, make_tune) -> None:
    sweep = make_tune(tmp_path / "tune", ["learning_rate=loguniform(1e-4,1e-1)",
                                          "network_def::channels=choice([8,16,32,64],[16,32,64,128])"], trials=8)
    record = SweepRecord.load(sweep)
    # one point per trial of the budget from the start (status lists them), none claimed by a worker yet
    assert len(record.points) == 8 and all(p["params"] == {} and "trial" not in p for p in record.points)
    assert record.param_ids == ["learning_rate", "network_def::channels"]
    assert TuneSettings.from_record(record.data["tune"]).trials == 8
    assert "corner point(s)" in record.data["checked"]
    assert (sweep / "base" / "config.yaml").is_file()
    json.loads(record.file.read_text())  # the fast JSON form every sweep tool reads


@pytest.mark.parametrize(
    ("space", "settings", "needle"),
    [
        (["learning_rat=uniform(0.001,0.01)"], {}, "learning_rate"),  # no such id: the close one is named
        (["network_def::channels=choice([8,16,32,64],fast)"], {}, "network_def::channels"),  # a str for a list
        (["learning_rate=uniform(0.001,0.01)"], {"trials": 0}, "--trials"),
        (["learning_rate=uniform(0.001,0.01)"], {"pruner": "asah"}, "Did you mean 'asha'"),
        (["learning_rate=uniform(0.001,0.01)"], {"metric": "val_loss"}, "--metric val_dice (the config's"),
    ],
)
def test_a_space_or_setting_that_cannot_run_is_refused_and_nothing_is_written(
    tmp_path: Path, make_tune, space, settings, needle
) -> None:
    with pytest.raises(UserError) as err:
        make_tune(tmp_path / "tune", space, **{"trials": 4, **settings})
    assert needle in err.value.paragraph()
    assert not (tmp_path / "tune").exists()


def _base_config(sweep: Path) -> str:
    return (sweep / "base" / "config.yaml").read_text()


def test_the_direction_is_decided_once_and_the_trainer_is_told_it(tmp_path: Path, make_tune) -> None:
    space = ["learning_rate=uniform(0.001,0.01)"]
    # no --direction, no metric_mode: Dice is maximised, as ever, and the base config is left as written
    sweep = make_tune(tmp_path / "up", space, trials=2, direction=None)
    assert TuneSettings.from_record(SweepRecord.load(sweep).data["tune"]).direction == "maximize"
    assert "metric_mode" not in _base_config(sweep)
    # --direction minimize: the trainer keeps the checkpoint with the lowest value too, not the highest
    sweep = make_tune(tmp_path / "down", space, trials=2, direction="minimize")
    assert TuneSettings.from_record(SweepRecord.load(sweep).data["tune"]).direction == "minimize"
    assert "metric_mode: min" in _base_config(sweep)
    # a trainer that states metric_mode decides when --direction is left out ...
    sweep = make_tune(tmp_path / "stated", space, trials=2, extra=["--trainer::metric_mode", "min"], direction=None)
    assert TuneSettings.from_record(SweepRecord.load(sweep).data["tune"]).direction == "minimize"


def test_a_direction_that_contradicts_the_trainer_is_refused(tmp_path: Path, make_tune) -> None:
    with pytest.raises(UserError) as err:
        make_tune(tmp_path / "tune", ["learning_rate=uniform(0.001,0.01)"], trials=2,
                  extra=["--trainer::metric_mode", "min"], direction="maximize")
    text = err.value.paragraph()
    assert "trainer::metric_mode" in text and "--direction minimize" in text
    assert not (tmp_path / "tune").exists()

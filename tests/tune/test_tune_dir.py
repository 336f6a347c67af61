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

"""A tune dir is checked before it is written: every corner of the space against the config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpc_runner.errors import UserError
from hpc_runner.jobs.ledger import SweepRecord
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


def test_workers_past_the_free_submit_slots_are_not_queued_and_none_free_queues_nothing(
        make_tune, make_cluster, tmp_path: Path) -> None:
    """`tune --parallel K` goes through the governor's count: K workers past the QOS limit are not submitted
    (the trials are shared, so fewer workers spend the same budget); no free slot queues nothing, naming it."""
    from hpc_runner.errors import ClusterError
    from hpc_runner.jobs import ledger as sr
    from hpc_runner.jobs.submitted import Submitted
    from hpc_runner.scheduler.profile import ClusterProfile
    from hpc_runner.scheduler.select import executor_for
    from hpc_runner.tune.submit import send_workers

    cluster = make_cluster(max_submit=3)
    executor = executor_for(ClusterProfile("mem", [], {"executor": "memory", "time": 10, "mem_gb": 1}))
    tune = make_tune(tmp_path / "tune", ["learning_rate=loguniform(0.001,0.01)"], trials=6)
    out = Submitted(tune)
    send_workers(tune, list(range(5)), executor, reason="tune", out=out, preflight=False)
    assert sorted(out.job_ids) == [0, 1, 2] and len(cluster.queued()) == 3 and cluster.refused == []
    (submission,) = sr.SweepRecord.load(tune).submissions()
    assert submission["limit"].startswith("3 of 5 worker(s) started, within the limit (3 free submit slot(s): ")
    assert out.notes == [submission["limit"]]

    full = make_tune(tmp_path / "full", ["learning_rate=loguniform(0.001,0.01)"], trials=6)
    with pytest.raises(ClusterError, match="no submit slot is free for the tune's 2 worker"):
        send_workers(full, [0, 1], executor, reason="tune", out=Submitted(full), preflight=False)
    assert len(cluster.queued()) == 3 and sr.SweepRecord.load(full).submissions() == []

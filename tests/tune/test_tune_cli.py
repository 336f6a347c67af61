"""``hpc-runner tune`` on the example bundle: --cluster local runs the workers here; bad input writes nothing."""

from __future__ import annotations

from pathlib import Path

from hpc_runner.cli import main
from hpc_runner.slurm.sweep_record import SweepRecord
from tests.tune.conftest import BUNDLE


def _tune(out: Path, tiny: list[str], *extra: str) -> int:
    return main(["tune", "--bundle", str(BUNDLE), "--space", "learning_rate=loguniform(1e-4,1e-1)",
                 "--metric", "val_dice", "--sampler", "random", "--seed", "0", "--cluster", "local",
                 "--output_dir", str(out), *extra, *tiny])


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


def test_tune_with_a_metric_the_trainer_does_not_report_exits_2_and_writes_nothing(tmp_path: Path, tiny) -> None:
    out = tmp_path / "t"
    assert main(["tune", "--bundle", str(BUNDLE), "--space", "learning_rate=loguniform(1e-4,1e-1)", "--trials", "2",
                 "--metric", "val_loss", "--cluster", "local", "--output_dir", str(out), *tiny]) == 2
    assert not out.exists()

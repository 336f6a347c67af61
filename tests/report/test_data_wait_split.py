"""The data wait of a real tiny run, split into reading (the file loads: LoadImaged) and transforming (issue 46), from
the timings the data path takes; and the bytes its loads read, measured per load, in data_io.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from report_helpers import BUNDLE, tiny_overrides

from hpc_runner.pages.bottleneck import is_reading, wait_split
from hpc_runner.report.build import build_report


@pytest.fixture(scope="module")
def uncached_run(tmp_path_factory: pytest.TempPathFactory, dataset_dir: Path) -> Path:
    """A real tiny run that loads its volumes every epoch (no cache): its data wait has both parts."""
    from hpc_runner.config.bundle_config import load_bundle_config
    from hpc_runner.config.overrides import parse_cli_overrides
    from hpc_runner.engine.runner import run_bundle

    overrides = [*tiny_overrides(dataset_dir), "--train_dataset::cache_rate", "0", "--val_dataset::cache_rate", "0"]
    cfg = load_bundle_config(bundle=BUNDLE, cli_overrides=parse_cli_overrides(overrides))
    out = tmp_path_factory.mktemp("runs") / "uncached"
    outcome = run_bundle(cfg, None, out)
    assert outcome.status == "completed", outcome.error
    return out


def test_the_report_splits_the_data_wait_into_reading_and_transforming(uncached_run: Path) -> None:
    summary = json.loads((uncached_run / "summary.json").read_text())
    report = summary["bottleneck"]
    wait, read, rest = report["data_wait_s"], report["data_read_s"], report["data_transform_s"]
    assert read > 0 and rest > 0, report  # the tiny bundle loads its volumes (LoadImaged) every epoch
    assert abs(read + rest - wait) < 1e-6
    loads = [r for r in summary["transforms"] if is_reading(r["name"])]
    assert {r["name"] for r in loads} == {"LoadImaged"}
    text = build_report(uncached_run).html.read_text(encoding="utf-8")
    shown = f"Of the data wait, {read:.2f} s reading (file loads) and {rest:.2f} s transforming"
    assert shown in text
    assert abs(round(read, 2) + round(rest, 2) - round(wait, 2)) <= 0.011  # as shown: sums within rounding


def test_an_older_summary_without_the_split_is_split_from_its_transform_rows(run_copy: Path) -> None:
    path = run_copy / "summary.json"
    summary = json.loads(path.read_text())
    for key in ("data_read_s", "data_transform_s"):
        summary["bottleneck"].pop(key)
    path.write_text(json.dumps(summary))
    read, rest = wait_split(summary["bottleneck"]["data_wait_s"], summary["transforms"])
    text = build_report(run_copy).html.read_text(encoding="utf-8")
    assert f"Of the data wait, {read:.2f} s reading (file loads) and {rest:.2f} s transforming" in text


def test_wait_split_by_the_every_epoch_share_and_none_without_timings() -> None:
    rows = [{"name": "LoadImaged", "stage": "every epoch", "total_s": 1.0},
            {"name": "RandFlipd", "stage": "every epoch", "total_s": 3.0},
            {"name": "Spacingd", "stage": "cached", "total_s": 50.0}]
    assert wait_split(2.0, rows) == (0.5, 1.5)
    assert wait_split(2.0, []) is None


def test_a_run_that_reads_in_place_records_the_bytes_its_loads_read(uncached_run: Path, dataset_dir: Path) -> None:
    io = json.loads((uncached_run / "data_io.json").read_text())
    task = io["tasks"][-1]
    assert task["measured"] and io["measured"]
    files = {p.name: p.stat().st_size for p in dataset_dir.rglob("*.nii.gz")}
    # 4 training items (image, label) over 2 epochs, 2 validation items over 2 validations: each load counted
    assert task["loads"] == 2 * (4 + 2) * 2, task
    assert task["shared_loads"] == task["loads"] and task["shared_load_bytes"] == task["loaded_bytes"]
    assert min(files.values()) * task["loads"] <= task["loaded_bytes"] <= max(files.values()) * task["loads"]
    assert io["shared_bytes"] == task["shared_bytes"] == task["loaded_bytes"]  # no hash or copy: only its loads

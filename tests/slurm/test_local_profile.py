"""The `local` profile: no scheduler, the points run here one after another; status/collect/resume work."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from hpc_runner.jobs.ledger import SweepRecord, write_new

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = str(ROOT / "bundles" / "synthetic_seg")


def test_local_sweep_status_collect_resume(offline_cli, tiny):
    out = offline_cli("sweep", "training", "--bundle", BUNDLE, "--cluster", "local", "--output_dir", "sw",
                      "--zip", "--sweep", "learning_rate=1e-3,2e-3", "--sweep", "batch_size=1,0", *tiny)
    assert out.returncode == 1, out.stderr  # one point failed
    assert "1 of 2 points completed here" in out.stdout and "1 of 1 point(s) failed: point 1: " in out.stdout
    status = offline_cli("status", "sw")
    assert "COMPLETED 1" in status.stdout and "FAILED 1" in status.stdout
    assert "batch_size should be a positive integer" in status.stdout
    assert "right-size" not in status.stdout  # nothing asked of a scheduler: nothing to right-size

    resumed = offline_cli("resume", "sw", "--batch_size", "1")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "1 to resubmit" in resumed.stdout and "ran 1 point(s) here, 0 failed" in resumed.stdout

    assert offline_cli("collect", "sw").returncode == 0
    rows = list(csv.DictReader((offline_cli.cwd / "sw" / "results.csv").open()))
    assert [r["state"] for r in rows] == ["COMPLETED"] * 2 and all(float(r["val_dice"]) >= 0 for r in rows)
    assert [r["job_id"] for r in rows] == ["local"] * 2
    assert offline_cli.calls() == {"sbatch": 0, "sacct": 0, "squeue": 0, "scancel": 0}


def test_local_submit_runs_in_the_foreground(offline_cli, tiny):
    out = offline_cli("submit", "training", "--bundle", BUNDLE, "--cluster", "local", "--output_dir", "one", *tiny)
    assert out.returncode == 0, out.stderr
    run = yaml.safe_load((offline_cli.cwd / "one" / "run.yaml").read_text())
    assert run["status"] == "completed" and run["job"]["id"] == "local"
    assert run["job"]["cluster"]["profile"] == "local"
    overrides = {o["id"] for o in yaml.safe_load((offline_cli.cwd / "one" / "overrides.yaml").read_text())}
    assert {"num_train", "max_epochs", "dataset_dir"} <= overrides  # kept although run_recorded rewrites it


def test_sweep_record_round_trip_is_json_and_yaml(tmp_path):
    from hpc_runner.config.values import Yaml12Loader

    rec = SweepRecord(tmp_path, {"kind": "hpc-runner sweep", "params": ["a"], "x": {"y": [1, 2]}},
                      [{"index": i, "dir": f"points/{i:04d}", "params": {"a": 1e-5 * i}} for i in range(3)])
    write_new(rec)  # the first sweep.yaml; later ones only through the ledger
    text = (tmp_path / "sweep.yaml").read_text()
    assert len(text.splitlines()) == 1 + 3 + 1 + 3 + 2  # one key a line, one point a line
    as_json, as_yaml = json.loads(text), yaml.load(text, Loader=Yaml12Loader)
    assert as_json == as_yaml
    back = SweepRecord.load(tmp_path)
    assert back.points == rec.points and back.data == rec.data

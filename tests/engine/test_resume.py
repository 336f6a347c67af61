"""A run stopped by SIGUSR2 mid-epoch checkpoints, and resuming gives bit-identical weights."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml


def _weights(run_dir: Path) -> dict:
    return torch.load(run_dir / "model.pt", weights_only=True)


def _steps_done(run_dir: Path) -> int:
    try:
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return 0
    return sum(1 for line in lines if '"iter"' in line)


@pytest.mark.slow
def test_stop_signal_checkpoints_and_resume_is_bit_identical(tiny_bundle: Path, tmp_path: Path, cli) -> None:
    common = ["--bundle", str(tiny_bundle), "--checkpoint_interval", "0", "--train_dataset::n", "48"]
    straight = tmp_path / "straight"
    res = cli("run", *common, "--output_dir", str(straight), cwd=tmp_path)
    assert res.returncode == 0, res.stderr

    stopped = tmp_path / "stopped"
    proc = subprocess.Popen(
        [sys.executable, "-m", "hpc_runner", "run", *common, "--output_dir", str(stopped)],
        cwd=tmp_path, env=cli.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 240
    while _steps_done(stopped) < 26 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # early in epoch 2 of 3 (24 steps an epoch): mid-epoch even if the signal lands late
    proc.send_signal(signal.SIGUSR2)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, err
    assert "stopped by SIGUSR2" in err and "--resume" in err
    record = yaml.safe_load((stopped / "run.yaml").read_text())
    assert record["status"] == "preempted"
    (ckpt,) = sorted((stopped / "checkpoints").glob("ckpt_*.pt"))[-1:]
    state = torch.load(ckpt, weights_only=True)
    assert 0 < state["batch_in_epoch"] < 24, "the checkpoint is taken mid-epoch, at the step that was running"

    res = cli("run", "--resume", str(stopped), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "resuming from" in res.stdout
    a, b = _weights(straight), _weights(stopped)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    # the metrics file holds each step once, as if the run had never stopped
    steps = [json.loads(line)["step"] for line in (stopped / "metrics.jsonl").read_text().splitlines()
             if '"iter"' in line]
    assert steps == list(range(1, 73))
    assert yaml.safe_load((stopped / "run.yaml").read_text())["attempts"] == 2
    # the interrupted epoch reports the mean over all its steps, not only those after the restart
    assert _epoch_losses(stopped) == _epoch_losses(straight)


def _epoch_losses(run_dir: Path) -> list[float]:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in records if r["kind"] == "epoch"]


def test_amp_on_cpu_trains_in_bfloat16(tiny_bundle: Path, tmp_path: Path, cli) -> None:
    res = cli("run", "--bundle", str(tiny_bundle), "--amp", "true", "--max_epochs", "1", "--output_dir", "r",
              cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["steps"] == 6 and summary["final_loss"] == summary["final_loss"]  # finite, not NaN


def test_restart_in_the_same_dir_continues_instead_of_starting_over(tiny_bundle: Path, tmp_path: Path, cli) -> None:
    args = ["run", "--bundle", str(tiny_bundle), "--output_dir", "r", "--max_epochs", "1"]
    assert cli(*args, cwd=tmp_path).returncode == 0
    # the same command again (a requeued job): the run is complete, nothing is trained twice
    res = cli(*args, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "resuming from" in res.stdout
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["steps"] == 6


def test_a_different_config_in_an_existing_run_dir_is_refused(tiny_bundle: Path, tmp_path: Path, cli) -> None:
    assert cli("run", "--bundle", str(tiny_bundle), "--output_dir", "r", "--max_epochs", "1",
               cwd=tmp_path).returncode == 0
    res = cli("run", "--bundle", str(tiny_bundle), "--output_dir", "r", "--max_epochs", "2", cwd=tmp_path)
    assert res.returncode == 2 and "different config" in res.stderr and "--resume" in res.stderr


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs POSIX")
def test_checkpoint_files_appear_whole(tmp_path: Path) -> None:
    from hpc_runner.engine.checkpoint import list_checkpoints, load_latest_checkpoint, save_checkpoint

    for step in range(1, 6):
        save_checkpoint(tmp_path, step, {"w": torch.full((3,), float(step))}, keep=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["ckpt_00000004.pt", "ckpt_00000005.pt"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files left
    (tmp_path / "ckpt_00000006.pt").write_bytes(b"cut short")  # a file written by something else, broken
    path, state = load_latest_checkpoint(tmp_path)
    assert path.name == "ckpt_00000005.pt" and state["w"][0] == 5


def test_resume_keeps_the_recorded_bundle_root_and_overrides(tiny_bundle: Path, tmp_path: Path, cli) -> None:
    res = cli("run", "--bundle", str(tiny_bundle), "--output_dir", "r", "--max_epochs", "1",
              "--+bundle_root", str(tmp_path), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    before = yaml.safe_load((tmp_path / "r" / "overrides.yaml").read_text())
    res = cli("run", "--resume", "r", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert yaml.safe_load((tmp_path / "r" / "config.yaml").read_text())["bundle_root"] == str(tmp_path)
    after = yaml.safe_load((tmp_path / "r" / "overrides.yaml").read_text())
    assert [o["id"] for o in after] == [o["id"] for o in before]

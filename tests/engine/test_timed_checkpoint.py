"""Checkpoints timed to the limit: the trainer saves once, mid-epoch, when the time left before the job's
end falls below one epoch plus a save (decisions with a fake clock, then one real short run)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from hpc_runner.scheduler.job_clock import CheckpointTimer, checkpoint_due
from hpc_runner.scheduler.slurm.job_clock import training_job_end

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "tests" / "slurm" / "data" / "usage_point"
END = 10_000.0


def test_a_save_is_due_when_less_than_an_epoch_and_a_save_are_left():
    assert not checkpoint_due(END - 130, END, epoch_s=120, save_s=5)
    assert not checkpoint_due(END - 125, END, epoch_s=120, save_s=5)  # exactly enough for the epoch's own save
    assert checkpoint_due(END - 124, END, epoch_s=120, save_s=5)


def test_no_end_or_no_epoch_measured_yet_means_no_timed_save():
    assert not checkpoint_due(END - 1, None, epoch_s=120, save_s=5)
    assert not checkpoint_due(END - 1, END, epoch_s=None, save_s=5)


def test_the_timer_fires_once_with_the_longest_epoch_and_save_so_far_and_says_why():
    timer = CheckpointTimer(END)
    assert timer.due(END - 50) is None  # nothing measured
    timer.epoch_took(30)
    timer.epoch_took(20)
    timer.save_took(4)
    assert timer.due(END - 40) is None
    assert timer.due(END - 40, epoch_s=45) is not None  # this epoch, stretched from its steps, is longer
    timer = CheckpointTimer(END, epoch_s=30, save_s=4)
    why = timer.due(END - 33)
    assert why == ("33 s left before the job's time limit, less than one epoch (30 s) plus a save (4.0 s): "
                   "the epoch's own checkpoint would come too late")
    assert timer.due(END - 20) is None  # once per run: the stop signal takes it from here


def test_the_job_end_comes_from_slurm_job_end_time_or_one_squeue_call_and_not_outside_a_job():
    assert training_job_end({"SLURM_JOB_END_TIME": "1764100000"}) == 1764100000.0
    asked = []

    def squeue(cmd: list[str]) -> str:
        asked.append(cmd)
        return "2026-11-23T17:05:00\n"

    assert training_job_end({"SLURM_JOB_ID": "12"}, run=squeue) is not None and asked[0][:2] == ["squeue", "-h"]
    assert training_job_end({}, run=squeue) is None and len(asked) == 1


@pytest.mark.slow
def test_a_real_run_saves_mid_epoch_before_its_end_and_says_why(tmp_path: Path, monkeypatch) -> None:
    from hpc_runner.config.bundle_config import load_bundle_config
    from hpc_runner.config.overrides import parse_cli_overrides
    from hpc_runner.engine.runner import run_bundle

    # 5 epochs of 4 steps of 0.25 s; the "job" ends 4 s after the config is loaded: mid-training
    overrides = ["--mode", "train", "--max_epochs", "5", "--n_items", "4", "--item_s", "0.25"]
    cfg = load_bundle_config(bundle=BUNDLE, cli_overrides=parse_cli_overrides(overrides))
    monkeypatch.setenv("SLURM_JOB_END_TIME", str(int(time.time() + 4)))
    outcome = run_bundle(cfg, None, tmp_path / "run")
    assert outcome.status == "completed", outcome.error
    log = (tmp_path / "run" / "log.txt").read_text()
    line = next(ln for ln in log.splitlines() if "before the job's time limit" in ln)
    assert line.startswith("hpc-runner: checkpoint ") and "less than one epoch" in line
    assert log.count("before the job's time limit") == 1
    step = int(line.split(" at step ")[1].split()[0])
    assert f"ckpt_{step:08d}.pt at step {step} " in line
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["epochs"] == 5  # no limit was enforced here: the run goes on after the save

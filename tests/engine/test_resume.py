"""A run stopped by SIGUSR2 mid-epoch checkpoints, and resuming gives bit-identical weights."""

from __future__ import annotations

import json
import math
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


def _catches_sigusr2(pid: int) -> bool:
    """Whether process ``pid`` has a handler for SIGUSR2 (bit 12 of SigCgt in /proc/PID/status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    mask = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(mask, 16) & (1 << (signal.SIGUSR2 - 1)))


def test_a_stop_signal_during_start_up_is_a_stop_request_not_a_kill(tiny_bundle: Path, tmp_path: Path, cli) -> None:
    """SLURM's --signal can come while python imports torch: the job must checkpoint and stop, not die."""
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "hpc_runner", "run", "--bundle", str(tiny_bundle), "--output_dir", str(out)],
        cwd=tmp_path, env=cli.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 60
    while not _catches_sigusr2(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert not out.exists(), "the handler is installed before the config is loaded and the run dir made"
    proc.send_signal(signal.SIGUSR2)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, err  # a kill by SIGUSR2 would be -12
    assert "stopped by SIGUSR2; checkpoint written" in err, err
    assert yaml.safe_load((out / "run.yaml").read_text())["status"] == "preempted"
    assert sorted((out / "checkpoints").glob("ckpt_*.pt")), "a checkpoint to resume from"


@pytest.mark.slow
def test_stop_signal_checkpoints_and_resume_is_bit_identical(tiny_bundle: Path, tmp_path: Path, cli) -> None:
    common = ["--bundle", str(tiny_bundle), "--checkpoint_interval", "0", "--train_dataset::n", "48"]
    straight = tmp_path / "straight"
    res = cli("run", *common, "--output_dir", str(straight), cwd=tmp_path)
    assert res.returncode == 0, res.stderr

    stopped = tmp_path / "stopped"
    # SIGUSR2 arrives while the 62nd training item loads (batch 7 of epoch 2, step 31): polling metrics.jsonl
    # and signalling from here raced the epoch's end under load (validation takes longer than 20 steps)
    stop_at = ["--+train_dataset::stop_after", "62", "--+train_dataset::stop_marker", str(tmp_path / "signalled")]
    proc = subprocess.Popen(
        [sys.executable, "-m", "hpc_runner", "run", *common, *stop_at, "--output_dir", str(stopped)],
        cwd=tmp_path, env=cli.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 3, err
    assert "stopped by SIGUSR2" in err and "--resume" in err
    record = yaml.safe_load((stopped / "run.yaml").read_text())
    assert record["status"] == "preempted"
    (ckpt,) = sorted((stopped / "checkpoints").glob("ckpt_*.pt"))[-1:]
    state = torch.load(ckpt, weights_only=True)
    assert (state["step"], state["batch_in_epoch"]) == (31, 7), "mid-epoch, at the step that was running"

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


def test_amp_on_cpu_trains_in_bfloat16(tiny_bundle: Path, tmp_path: Path, monkeypatch) -> None:
    from monai.bundle import ConfigParser

    # the bundle's scripts package, imported from this bundle only
    monkeypatch.syspath_prepend(str(tiny_bundle))
    for name in [m for m in sys.modules if m == "scripts" or m.startswith("scripts.")]:
        monkeypatch.delitem(sys.modules, name)
    parser = ConfigParser()
    parser.read_config(str(tiny_bundle / "configs" / "train.yaml"))
    # the CPU's autocast on any machine: a GPU machine would pick cuda and float16 (the H100 run did)
    parser.update({"amp": True, "max_epochs": 1, "output_dir": str(tmp_path / "r"), "trainer#device": "cpu"})
    trainer = parser.get_parsed_content("trainer")
    seen: list[tuple[bool, torch.dtype]] = []
    trainer.network.register_forward_hook(lambda module, args, out: seen.append((module.training, out.dtype)))
    summary = trainer.run()
    train_dtypes = [dtype for training, dtype in seen if training]
    assert len(train_dtypes) == 6 and set(train_dtypes) == {torch.bfloat16}  # every training step
    assert all(p.dtype == torch.float32 for p in trainer.network.parameters())  # fp32 master weights
    assert summary["steps"] == 6 and math.isfinite(summary["final_loss"])


@pytest.mark.slow  # several training runs in a row: the full suite's, not the inner loop's
def test_restart_in_the_same_dir_continues_instead_of_starting_over(tiny_bundle: Path, tmp_path: Path, cli) -> None:
    args = ["run", "--bundle", str(tiny_bundle), "--output_dir", "r", "--max_epochs", "1"]
    assert cli(*args, cwd=tmp_path).returncode == 0
    # the same command again (a requeued job): the run is complete, nothing is trained twice
    res = cli(*args, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "resuming from" in res.stdout
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["steps"] == 6


@pytest.mark.slow  # whole CLI runs or several processes: the full suite runs it
def test_a_different_config_in_an_existing_run_dir_is_refused(tiny_bundle: Path, tmp_path: Path, cli) -> None:
    assert cli("run", "--bundle", str(tiny_bundle), "--output_dir", "r", "--max_epochs", "1",
               cwd=tmp_path).returncode == 0
    res = cli("run", "--bundle", str(tiny_bundle), "--output_dir", "r", "--max_epochs", "2", cwd=tmp_path)
    assert res.returncode == 2 and "different config" in res.stderr and "--resume" in res.stderr


@pytest.mark.slow  # several training runs in a row: the full suite's, not the inner loop's
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


def _steps(run_dir: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()
            if '"iter"' in line]


@pytest.mark.slow  # several training runs in a row: the full suite's, not the inner loop's
def test_resume_names_a_damaged_checkpoint_and_never_silently_starts_over(tiny_bundle: Path, tmp_path: Path, cli):
    run = tmp_path / "r"
    res = cli("run", "--bundle", str(tiny_bundle), "--output_dir", str(run), "--max_epochs", "2",
              "--checkpoint_interval", "0", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    ckpts = sorted((run / "checkpoints").glob("ckpt_*.pt"))
    assert [p.name for p in ckpts] == ["ckpt_00000006.pt", "ckpt_00000012.pt"]
    ckpts[1].write_bytes(ckpts[1].read_bytes()[:200])  # the newest damaged (a disk error, a partial copy)
    res = cli("run", "--resume", str(run), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    # the fall-back is said, with both files; epoch 2 is redone and counted once
    assert "ckpt_00000012.pt" in res.stderr and "ckpt_00000006.pt" in res.stderr and "older" in res.stderr
    assert _steps(run) == list(range(1, 13))

    for p in (run / "checkpoints").glob("ckpt_*.pt"):
        p.write_bytes(b"not a checkpoint")
    metrics_before = (run / "metrics.jsonl").read_text()
    res = cli("run", "--resume", str(run), cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert "ckpt_00000006.pt" in res.stderr and "ckpt_00000012.pt" in res.stderr and "--restart" in res.stderr
    assert (run / "metrics.jsonl").read_text() == metrics_before  # refused before anything ran

    res = cli("run", "--resume", str(run), "--restart", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "resuming from" not in res.stdout and _steps(run) == list(range(1, 13))  # step 0, each step once
    (aside,) = run.glob("restarted-*")
    assert (aside / "checkpoints" / "ckpt_00000012.pt").read_bytes() == b"not a checkpoint"


@pytest.mark.slow  # several training runs in a row: the full suite's, not the inner loop's
def test_a_moved_run_dir_resumes_where_it_is_now(tiny_bundle: Path, tmp_path: Path, cli):
    scratch, project = tmp_path / "scratch" / "r", tmp_path / "project" / "r"
    res = cli("run", "--bundle", str(tiny_bundle), "--output_dir", str(scratch), "--max_epochs", "1",
              cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    project.parent.mkdir()
    scratch.rename(project)  # what users do: scratch space to project storage
    res = cli("run", "--resume", str(project), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert f"resuming from {project / 'checkpoints'}" in res.stdout
    assert yaml.safe_load((project / "config.yaml").read_text())["output_dir"] == str(project)
    assert not scratch.exists()  # nothing written to the old place


@pytest.mark.slow  # several training runs in a row: the full suite's, not the inner loop's
def test_resume_checks_the_manifest_and_safe_mode_before_importing_the_bundle(tiny_bundle: Path, tmp_path: Path, cli):
    from hpc_runner.registry.manifest import MANIFEST_NAME, compute_manifest, format_manifest

    (tiny_bundle / MANIFEST_NAME).write_text(format_manifest(compute_manifest(tiny_bundle)))
    run = tmp_path / "r"
    res = cli("run", "--bundle", str(tiny_bundle), "--output_dir", str(run), "--max_epochs", "1", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    # --safe refuses the bundle's own scripts.tiny dataset, on resume as on a first run
    res = cli("run", "--resume", str(run), "--safe", cwd=tmp_path)
    assert res.returncode == 2 and "--safe refuses" in res.stderr and "scripts.tiny" in res.stderr, res.stderr
    with open(tiny_bundle / "scripts" / "tiny.py", "a") as f:
        f.write("\nprint('changed after packing')\n")
    res = cli("run", "--resume", str(run), cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert "no longer match its MANIFEST" in res.stderr and "scripts/tiny.py" in res.stderr
    assert "changed after packing" not in res.stdout  # refused before the bundle's code was imported
    res = cli("run", "--resume", str(run), "--trust", cwd=tmp_path)
    assert res.returncode == 0, res.stderr

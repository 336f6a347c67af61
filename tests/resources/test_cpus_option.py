"""``--cpus N`` on run, submit and sweep: the run records the decision, the jobs ask SLURM for N CPUs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hpc_runner.resources.threads import THREAD_VARIABLES

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = str(ROOT / "bundles" / "synthetic_seg")


def hpcr(*args: str, cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    """The CLI in a fresh process, without the caller's CPU, SLURM job or thread settings."""
    drop = ("SLURM_JOB", "SLURM_ARRAY", "SLURM_CPUS", "SLURM_TRES", "HPCR_", "TORCHELASTIC")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop) and k not in THREAD_VARIABLES}
    env.update(PYTHONPATH=str(ROOT), XDG_CONFIG_HOME=str(cwd / "config-home"), **extra)
    return subprocess.run([sys.executable, "-m", "hpc_runner", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def tiny(tmp_path: Path) -> list[str]:
    """Overrides that make the example bundle train in a few seconds."""
    return ["--num_train", "2", "--num_val", "1", "--image_size", "16", "--max_epochs", "1", "--val_interval", "1",
            "--batch_size", "1", "--dataset_dir", str(tmp_path / "data")]


@pytest.mark.parametrize("command", ["submit", "sweep"])
def test_submit_and_sweep_cpus_become_sbatch_cpus_per_task(tmp_path, command):
    fake = tmp_path / "bin"  # a dry run asks scontrol for MaxArraySize and must never reach sbatch
    fake.mkdir()
    (fake / "scontrol").write_text("#!/bin/sh\necho 'MaxArraySize            = 1001'\n")
    (fake / "sbatch").write_text("#!/bin/sh\necho 'sbatch must not run' >&2\nexit 99\n")
    for f in fake.iterdir():
        f.chmod(0o755)
    sweep = ["--sweep", "seed=1,2"] if command == "sweep" else []
    out = hpcr(command, "--bundle", BUNDLE, "--cluster", "slurm", "--cpus", "3", "--dry-run", *sweep, cwd=tmp_path,
               PATH=f"{fake}{os.pathsep}{os.environ['PATH']}")
    assert out.returncode == 0, out.stderr
    assert "#SBATCH --cpus-per-task=3" in out.stdout and "--cpus-per-task=1" not in out.stdout


@pytest.mark.slow
def test_run_cpus_one_records_the_decision_and_trains_on_one_thread(tmp_path):
    out = hpcr("run", "training", "--bundle", BUNDLE, "--cpus", "1", "--output_dir", "r", *tiny(tmp_path),
               cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    cpus = yaml.safe_load((tmp_path / "r" / "run.yaml").read_text())["cpus"]
    assert {k: cpus[k] for k in ("count", "source", "detail", "torch_threads", "interop_threads")} == {
        "count": 1, "source": "--cpus", "detail": "--cpus 1", "torch_threads": 1, "interop_threads": 1}
    assert cpus["variables"] == {name: "1" for name in THREAD_VARIABLES}


@pytest.mark.slow
def test_run_without_a_setting_records_the_affinity_mask(tmp_path):
    out = hpcr("run", "training", "--bundle", BUNDLE, "--output_dir", "r", *tiny(tmp_path), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    cpus = yaml.safe_load((tmp_path / "r" / "run.yaml").read_text())["cpus"]
    mask = len(os.sched_getaffinity(0))
    assert (cpus["count"], cpus["source"], cpus["torch_threads"]) == (mask, "affinity", mask)


@pytest.mark.slow
def test_a_local_sweep_with_cpus_one_runs_every_point_on_one_thread(tmp_path):
    out = hpcr("sweep", "training", "--bundle", BUNDLE, "--cluster", "local", "--cpus", "1", "--output_dir", "s",
               "--sweep", "learning_rate=1e-3,2e-3", *tiny(tmp_path), cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    records = [yaml.safe_load(p.read_text()) for p in sorted((tmp_path / "s" / "points").glob("*/run.yaml"))]
    assert len(records) == 2
    for record in records:
        assert record["status"] == "completed"
        cpus = record["cpus"]
        assert (cpus["count"], cpus["source"], cpus["torch_threads"]) == (1, "--cpus", 1), cpus


def test_a_bad_hpcr_cpus_stops_run_before_a_run_dir_is_made(tmp_path):
    out = hpcr("run", "--bundle", BUNDLE, "--output_dir", "r", cwd=tmp_path, HPCR_CPUS="zero")
    assert out.returncode == 2 and "HPCR_CPUS='zero' is not a number of CPUs" in out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "r").exists()

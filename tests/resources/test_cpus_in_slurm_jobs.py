"""On the real local SLURM: a job of the built-in `slurm` profile (1 CPU per task) runs one thread."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hpc_runner.resources.threads import THREAD_VARIABLES

pytestmark = [pytest.mark.slow, pytest.mark.slurm]
ROOT = Path(__file__).resolve().parents[2]
BUNDLE = str(ROOT / "bundles" / "synthetic_seg")


def test_a_job_with_one_cpu_per_task_records_slurms_grant_and_runs_one_torch_thread(slurm_cluster, tmp_path):
    drop = ("SLURM_JOB", "SLURM_ARRAY", "SLURM_CPUS", "SLURM_TRES", "HPCR_", "TORCHELASTIC")
    env = {k: v for k, v in slurm_cluster.env.items() if not k.startswith(drop) and k not in THREAD_VARIABLES}
    env.update(PYTHONPATH=str(ROOT), XDG_CONFIG_HOME=str(tmp_path / "config-home"))
    tiny = ["--num_train", "2", "--num_val", "1", "--image_size", "16", "--max_epochs", "1", "--val_interval", "1",
            "--batch_size", "1", "--dataset_dir", str(tmp_path / "data")]
    out = subprocess.run(
        [sys.executable, "-m", "hpc_runner", "submit", "training", "--bundle", BUNDLE, "--cluster", "slurm",
         "--slurm", "time=10", "--output_dir", "one", "--wait", *tiny],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )
    record_file = tmp_path / "one" / "run.yaml"
    record = yaml.safe_load(record_file.read_text()) if record_file.is_file() else {}
    job = str(record.get("job", {}).get("id", ""))
    assert out.returncode == 0, f"{out.stdout}\n{out.stderr}\n{slurm_cluster.explain(tmp_path / 'one', [job])}"
    assert record["status"] == "completed" and job.isdigit()
    cpus = record["cpus"]
    assert (cpus["count"], cpus["source"], cpus["detail"]) == (1, "SLURM_CPUS_PER_TASK", "SLURM_CPUS_PER_TASK=1")
    assert (cpus["torch_threads"], cpus["interop_threads"]) == (1, 1)
    assert cpus["variables"] == {name: "1" for name in THREAD_VARIABLES} and "user_set" not in cpus
    assert "note" not in cpus

"""`sweep --container` on the real local SLURM: every point trains inside a real Charliecloud image, and a point
stopped by SLURM's USR2 checkpoints inside, is requeued from the host side and resumes: no SLURM command in the
image (it has none)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from hpc_runner.jobs import ledger as sr

pytestmark = [pytest.mark.slow, pytest.mark.slurm]
ROOT = Path(__file__).resolve().parents[2]


def test_a_sweep_in_an_image_completes_and_a_preempted_point_resumes_from_its_checkpoint(
        cli, slurm_cluster, dataset_dir: Path, charliecloud_image: Path) -> None:
    env = {**os.environ, "USER": os.environ.get("USER") or "root"}
    which = subprocess.run(["ch-run", str(charliecloud_image), "--", "sh", "-c", "command -v scontrol sbatch"],
                           capture_output=True, text=True, env=env, timeout=60)
    assert which.returncode != 0 and not which.stdout.strip()  # the image has no SLURM command at all
    bundle = cli.cwd / "bundle"
    shutil.copytree(ROOT / "bundles/synthetic_seg", bundle, ignore=shutil.ignore_patterns("data", "runs", "MANIFEST"))
    train = ["--num_train", "8", "--num_val", "1", "--image_size", "16", "--batch_size", "1", "--max_epochs", "4",
             "--val_interval", "1", "--dataset_dir", str(dataset_dir)]
    res = cli("sweep", "--bundle", str(bundle), "--container", str(charliecloud_image), "--cluster", "testcluster",
              "--output_dir", "sw", "--sweep", "learning_rate=1e-3,2e-3", *train)
    assert res.returncode == 0, res.stdout + res.stderr
    sweep = cli.cwd / "sw"
    points = json.loads((sweep / sr.SWEEP_FILE).read_text())["points"]
    jobs = [p["job_id"] for p in points]
    metrics = sweep / "points/0000/metrics.jsonl"
    deadline = time.monotonic() + 240
    while not (metrics.is_file() and '"iter"' in metrics.read_text()):
        assert time.monotonic() < deadline, slurm_cluster.explain(sweep, jobs)
        time.sleep(0.1)
    assert slurm_cluster.run("scancel", "--signal=USR2", jobs[0]).returncode == 0
    slurm_cluster.wait_for_jobs(jobs, timeout=300)
    for index in (0, 1):
        record = yaml.safe_load((sweep / f"points/{index:04d}/run.yaml").read_text())
        assert record["status"] == "completed", slurm_cluster.explain(sweep, jobs)
        assert record["command"]["argv"][0].startswith("/opt/venv/")  # ran by the image's hpc-runner
        assert record["container"]["image"] == str(charliecloud_image)
    first = yaml.safe_load((sweep / "points/0000/run.yaml").read_text())
    assert first["attempts"] == 2, slurm_cluster.explain(sweep, jobs)  # stopped once, requeued from outside
    steps = [json.loads(line)["step"] for line in metrics.read_text().splitlines() if '"iter"' in line]
    assert steps == list(range(1, 33))  # resumed from its checkpoint: every step once
    logs = "".join(p.read_text() for p in (sweep / sr.JOB_FOLDER).glob("*_log.*"))
    assert "the run goes inside the container image" in logs and "scontrol: not found" not in logs

"""``hpc-runner submit ckpt_export ...`` on the local SLURM: one job runs the same export as the command."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.monai_commands.conftest import DATA, ROOT, assert_same_torchscript, save_random_checkpoint

pytestmark = [pytest.mark.slow, pytest.mark.slurm]


def test_ckpt_export_as_a_job_writes_a_torchscript_that_loads(slurm_cluster, tmp_path: Path) -> None:
    import torch
    from monai.bundle import ckpt_export

    shutil.copytree(DATA, tmp_path / "data", ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    save_random_checkpoint(tmp_path / "run" / "model.pt")
    (tmp_path / "out").mkdir()
    env = {**slurm_cluster.env, "PYTHONPATH": str(ROOT)}
    res = subprocess.run(
        [sys.executable, "-m", "hpc_runner", "submit", "ckpt_export", "network_def", "--filepath", "out/model.ts",
         "--ckpt_file", "run", "--meta_file", "data/metadata.json", "--config_file", "data/inference.json",
         "--cluster", "slurm", "--job-dir", "job"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    job_id = re.search(r"submitted job (\d+)", res.stdout).group(1)
    slurm_cluster.wait_for_jobs([job_id], timeout=300)
    assert slurm_cluster.sacct_states([job_id]) == {job_id: "COMPLETED"}, slurm_cluster.explain(tmp_path, [job_id])
    assert isinstance(torch.jit.load(str(tmp_path / "out" / "model.ts")), torch.jit.ScriptModule)
    data = tmp_path / "data"
    ckpt_export("network_def", filepath=str(tmp_path / "monai.ts"), ckpt_file=str(tmp_path / "run" / "model.pt"),
                meta_file=str(data / "metadata.json"), config_file=str(data / "inference.json"))
    assert_same_torchscript(tmp_path / "monai.ts", tmp_path / "out" / "model.ts", ["inference.json"])
    log = next((tmp_path / "job" / "jobs").glob("*_log.out")).read_text()
    assert "exported to file: out/model.ts." in log

"""The local SLURM cluster (scripts/local-slurm.sh) offers what hpc-runner relies on."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.slurm]


def _sbatch(cluster, *args: str, cwd: Path) -> str:
    res = cluster.run("sbatch", "--parsable", f"--chdir={cwd}", *args)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip().split(";")[0]


def test_array_of_three_completes_in_sacct(slurm_cluster, tmp_path):
    job = _sbatch(
        slurm_cluster, "--array=0-2", "-o", "arr-%A_%a.out", "--wrap", "echo $SLURM_ARRAY_TASK_ID", cwd=tmp_path
    )
    slurm_cluster.wait_for_jobs([job], timeout=60)
    outputs = sorted((tmp_path / f"arr-{job}_{i}.out").read_text().strip() for i in range(3))
    assert outputs == ["0", "1", "2"]
    states = slurm_cluster.sacct_states([job], timeout=60)
    assert states == {f"{job}_{i}": "COMPLETED" for i in range(3)}


def test_export_all_with_param_reaches_the_job(slurm_cluster, tmp_path):
    job = _sbatch(slurm_cluster, "--export=ALL,PARAM=100", "-o", "exp.out", "--wrap", "echo $PARAM", cwd=tmp_path)
    slurm_cluster.wait_for_jobs([job], timeout=60)
    assert (tmp_path / "exp.out").read_text().strip() == "100"


def test_gres_gpu_sets_cuda_visible_devices(slurm_cluster, tmp_path):
    if "gpu" not in slurm_cluster.partitions:
        pytest.skip(f"no gpu partition in {slurm_cluster.partitions}")
    job = _sbatch(
        slurm_cluster,
        "-p",
        "gpu",
        "--gres=gpu:1",
        "-o",
        "gpu.out",
        "--wrap",
        "echo $CUDA_VISIBLE_DEVICES",
        cwd=tmp_path,
    )
    slurm_cluster.wait_for_jobs([job], timeout=60)
    assert (tmp_path / "gpu.out").read_text().strip() == "0"
    # Only two fake GPUs: asking for more is refused at submission, not left pending.
    res = slurm_cluster.run("sbatch", "--test-only", "-p", "gpu", "--gres=gpu:3", "--wrap", "true")
    assert res.returncode != 0


def test_submitit_map_array_returns_results(slurm_cluster, tmp_path):
    submitit = pytest.importorskip("submitit")

    # Nested on purpose: pytest imports this file as a top-level module `test_local_cluster`
    # that the job's python cannot import, and cloudpickle sends nested functions by value.
    def _square(x: int) -> tuple[int, str | None]:
        return x * x, os.environ.get("SLURM_ARRAY_TASK_ID")

    ex = submitit.AutoExecutor(folder=tmp_path / "%j", cluster="slurm")
    ex.update_parameters(timeout_min=5, slurm_partition=slurm_cluster.default_partition, cpus_per_task=1)
    jobs = ex.map_array(_square, [1, 2, 3])
    assert len({j.job_id.split("_")[0] for j in jobs}) == 1, "map_array must submit one sbatch array"
    assert [j.result() for j in jobs] == [(1, "0"), (4, "1"), (9, "2")]


def test_max_array_size_is_the_configured_one(slurm_cluster):
    conf = Path(slurm_cluster.env.get("SLURM_CONF", "/etc/slurm/slurm.conf"))
    m = re.search(r"^MaxArraySize=(\d+)", conf.read_text(), re.M)
    assert m, f"no MaxArraySize in {conf}"
    assert slurm_cluster.max_array_size == int(m.group(1))
    top = slurm_cluster.max_array_size - 1  # indices must stay below MaxArraySize
    ok = slurm_cluster.run("sbatch", "--test-only", f"--array=0-{top}", "--wrap", "true")
    assert ok.returncode == 0, ok.stderr
    over = slurm_cluster.run("sbatch", "--test-only", f"--array=0-{top + 1}", "--wrap", "true")
    assert over.returncode != 0 and "array" in over.stderr.lower(), over.stderr

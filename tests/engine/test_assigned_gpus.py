"""A run given GPUs that sees none is an error at its start, not hours on the CPU."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml


def test_given_gpus_and_none_visible_is_a_problem_and_the_rest_is_not():
    from hpc_runner.engine.assigned_gpus import assigned_gpu_problem, assigned_gpus

    env = {"HPCR_ASSIGNED_GPUS": "4,5", "CUDA_VISIBLE_DEVICES": "4,5"}
    assert assigned_gpus(env) == ["4", "5"]
    assert "given GPU 4,5 (HPCR_ASSIGNED_GPUS) but torch sees no GPU" in assigned_gpu_problem(env, 0)
    assert assigned_gpu_problem(env, 2) is None
    assert assigned_gpu_problem({}, 0) is None  # a CPU run nobody gave a GPU


@pytest.mark.slow
def test_a_point_given_gpus_that_it_cannot_see_stops_with_exit_2_and_says_so_in_run_yaml(tiny_bundle, tmp_path, cli):
    env = {**cli.env, "HPCR_ASSIGNED_GPUS": "4,5", "CUDA_VISIBLE_DEVICES": "4,5"}  # global ids under cgroup limits
    out = tmp_path / "run"
    res = subprocess.run([sys.executable, "-m", "hpc_runner", "run", "--bundle", str(tiny_bundle), "--output_dir",
                          str(out)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert res.returncode == 2, res.stderr[-3000:]
    assert "torch sees no GPU" in res.stderr and "Traceback" not in res.stderr
    record = yaml.safe_load((out / "run.yaml").read_text())
    assert record["status"] == "failed" and record["error"]["user_error"] is True
    assert not (out / "checkpoints").exists()

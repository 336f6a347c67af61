"""default_num_workers with real SLURM_CPUS_PER_TASK values and a real affinity mask."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hpc_runner.data import available_cpus, default_num_workers


def affinity() -> int:
    return len(os.sched_getaffinity(0))


def test_without_slurm_uses_affinity_less_one(monkeypatch):
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    assert available_cpus() == affinity()
    assert default_num_workers() == max(1, affinity() - 1)


@pytest.mark.parametrize("value", ["1", "2", "64"])
def test_slurm_cpus_per_task_never_oversubscribes(monkeypatch, value):
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", value)
    assert available_cpus() == min(int(value), affinity())
    assert default_num_workers() == max(1, min(int(value), affinity()) - 1)


def test_invalid_slurm_value_warns_and_uses_affinity(monkeypatch):
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "four")
    with pytest.warns(UserWarning, match="SLURM_CPUS_PER_TASK"):
        assert available_cpus() == affinity()


def test_minimum_is_one(monkeypatch):
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "1")
    assert default_num_workers() == 1
    assert default_num_workers(reserve=0) == 1


def test_narrowed_affinity_mask_in_a_real_process():
    import hpc_runner.data.workers as workers

    # Load workers.py alone (stdlib only): the package __init__ would import torch, ~5 s here.
    code = (
        "import os, importlib.util; os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]});"
        f"spec = importlib.util.spec_from_file_location('w', {workers.__file__!r});"
        "w = importlib.util.module_from_spec(spec); spec.loader.exec_module(w);"
        "print(w.available_cpus(), w.default_num_workers(), w.default_num_workers(reserve=0))"
    )
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CPUS_PER_TASK"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == ["1", "1", "1"]

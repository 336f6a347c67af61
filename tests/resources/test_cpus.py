"""decide_cpus: the explicit setting, then SLURM's grant, then the affinity mask; never above the mask."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpc_runner.errors import ConfigError
from hpc_runner.resources.cpus import cgroup_cpu_quota, decide_cpus, set_explicit_cpus

MASK = len(os.sched_getaffinity(0))
needs_two = pytest.mark.skipif(MASK < 2, reason="needs an affinity mask of 2 CPUs or more")


def test_without_any_setting_the_affinity_mask_decides():
    budget = decide_cpus({})
    assert (budget.count, budget.source) == (MASK, "affinity")
    assert budget.detail.startswith(f"affinity mask: {MASK} CPUs")


def test_slurm_cpus_per_task_beats_the_affinity_mask():
    budget = decide_cpus({"SLURM_CPUS_PER_TASK": "1"})
    assert (budget.count, budget.source, budget.detail) == (1, "SLURM_CPUS_PER_TASK", "SLURM_CPUS_PER_TASK=1")


@needs_two
def test_hpcr_cpus_beats_slurm_and_the_flag_beats_hpcr_cpus():
    env = {"SLURM_CPUS_PER_TASK": "2", "HPCR_CPUS": "1"}
    assert (decide_cpus(env).count, decide_cpus(env).source) == (1, "HPCR_CPUS")
    flagged = decide_cpus({"HPCR_CPUS": "1"}, explicit=2)
    assert (flagged.count, flagged.source, flagged.detail) == (2, "--cpus", "--cpus 2")


def test_a_grant_above_the_affinity_mask_is_capped_by_it_and_says_so():
    budget = decide_cpus({"SLURM_CPUS_PER_TASK": "64"})
    assert (budget.count, budget.source) == (MASK, "SLURM_CPUS_PER_TASK")
    assert "capped by affinity mask" in budget.detail


def test_an_explicit_setting_above_slurms_grant_is_capped_by_the_grant():
    budget = decide_cpus({"SLURM_CPUS_PER_TASK": "1", "HPCR_CPUS": "8"})
    assert (budget.count, budget.source) == (1, "HPCR_CPUS")
    assert "capped by SLURM_CPUS_PER_TASK=1" in budget.detail


def test_tres_per_task_and_cpus_on_node_stand_in_when_cpus_per_task_is_missing():
    tres = decide_cpus({"SLURM_TRES_PER_TASK": "cpu=1,gres/gpu=1"})
    assert (tres.count, tres.source) == (1, "SLURM_TRES_PER_TASK")
    on_node = decide_cpus({"SLURM_JOB_ID": "7", "SLURM_CPUS_ON_NODE": "4", "SLURM_NTASKS_PER_NODE": "4"})
    assert (on_node.count, on_node.source) == (1, "SLURM_CPUS_ON_NODE")
    # outside a job SLURM_CPUS_ON_NODE says nothing about this process
    assert decide_cpus({"SLURM_CPUS_ON_NODE": "1"}).source == "affinity"


@needs_two
def test_ranks_that_torchrun_started_in_one_task_share_its_cpus():
    budget = decide_cpus({"TORCHELASTIC_RUN_ID": "r1", "LOCAL_WORLD_SIZE": "2", "SLURM_CPUS_PER_TASK": "2"})
    assert budget.count == 1 and "shared by 2 torchrun ranks" in budget.detail


def test_a_malformed_slurm_value_warns_and_the_affinity_mask_decides():
    with pytest.warns(UserWarning, match="SLURM_CPUS_PER_TASK='two'"):
        assert decide_cpus({"SLURM_CPUS_PER_TASK": "two"}).source == "affinity"


@pytest.mark.parametrize("value", ["0", "many", "-2"])
def test_a_bad_hpcr_cpus_is_a_config_error_naming_the_variable(value):
    with pytest.raises(ConfigError, match=f"HPCR_CPUS='{value}' is not a number of CPUs"):
        decide_cpus({"HPCR_CPUS": value})


def test_the_record_names_the_flag_when_cpus_set_the_variable():
    env: dict[str, str] = {}
    set_explicit_cpus(1, "--cpus", environ=env)
    assert env == {"HPCR_CPUS": "1"}
    assert decide_cpus(env).record() == {"count": 1, "source": "--cpus", "detail": "--cpus 1"}


def test_cgroup_quotas_round_up_to_whole_cpus_and_max_means_none(tmp_path: Path):
    v2 = tmp_path / "cpu.max"
    v2.write_text("150000 100000\n")
    assert cgroup_cpu_quota((v2,)) == (2, str(v2))
    v2.write_text("max 100000\n")
    assert cgroup_cpu_quota((v2,)) is None
    v1 = tmp_path / "v1" / "cpu.cfs_quota_us"
    v1.parent.mkdir()
    v1.write_text("50000\n")
    (v1.parent / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_quota((tmp_path / "missing", v1)) == (1, str(v1))


def test_a_process_pinned_to_one_cpu_decides_one():
    code = (
        "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))});"
        "from hpc_runner.resources.cpus import decide_cpus; b = decide_cpus(); print(b.count, b.source)"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "HPCR_", "TORCHELASTIC"))}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == ["1", "affinity"]


def test_data_and_cache_workers_follow_the_budget(monkeypatch, tmp_path: Path):
    from monai.transforms import Lambdad

    from hpc_runner.data.cached import CachedDataset
    from hpc_runner.data.workers import cache_fill_workers, default_num_workers

    monkeypatch.setenv("HPCR_CPUS", "1")
    assert default_num_workers() == 1 and cache_fill_workers(None) == 1 and cache_fill_workers(3) == 3
    for cache_dir in (None, tmp_path):
        ds = CachedDataset([{"x": 1}], [Lambdad("x", lambda v: v + 1)], cache_dir=cache_dir, num_workers=None,
                           progress=False)
        assert ds.dataset.num_workers == 1, cache_dir  # not os.cpu_count()

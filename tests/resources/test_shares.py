"""How a packed job's GPUs and CPUs are split among the points it runs at once."""

from __future__ import annotations

import os

import pytest

from hpc_runner.resources.shares import (
    accessible_gpu_minors,
    cpu_shares,
    describe_shares,
    gpu_shares,
    job_gpus,
    slot_gpu_plan,
    slot_shares,
    visible_gpu_ids,
)


def test_eight_gpus_for_eight_slots_give_one_gpu_each():
    assert gpu_shares([str(i) for i in range(8)], 8) == [[str(i)] for i in range(8)]


def test_shares_are_contiguous_and_the_first_slots_take_the_remainder():
    assert gpu_shares(["0", "1", "2", "3", "4", "5", "6", "7"], 3) == [["0", "1", "2"], ["3", "4", "5"], ["6", "7"]]
    assert cpu_shares(list(range(10)), 4) == [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]


def test_every_cpu_is_given_to_exactly_one_slot_when_there_are_enough():
    for n in range(1, 13):
        for p in range(1, n + 1):
            parts = cpu_shares(list(range(n)), p)
            assert sorted(c for part in parts for c in part) == list(range(n))
            assert max(map(len, parts)) - min(map(len, parts)) <= 1
            assert all(part == list(range(part[0], part[-1] + 1)) for part in parts)


def test_cpu_shares_follow_the_mask_not_the_numbering():
    assert cpu_shares([7, 3, 5, 1], 2) == [[1, 3], [5, 7]]


def test_fewer_gpus_than_slots_share_a_gpu_between_neighbouring_slots_and_say_so():
    assert gpu_shares(["0", "1"], 4) == [["0"], ["0"], ["1"], ["1"]]
    shares = slot_shares(["0", "1"], [0, 1, 2, 3], 4)
    assert [s.gpu_shared for s in shares] == [True] * 4
    assert not shares[0].cpu_shared
    assert shares[0].record() == {"slot": 0, "gpus": ["0"], "cpus": "0", "shared": ["gpu"]}
    assert "slots share a GPU" in describe_shares(shares)


def test_a_job_without_gpus_gives_every_slot_none():
    assert gpu_shares([], 3) == [[], [], []]
    assert not slot_shares([], [0, 1], 2)[0].gpu_shared


def test_parallel_below_one_is_refused():
    with pytest.raises(ValueError):
        cpu_shares([0, 1], 0)


def test_job_gpus_prefers_cuda_visible_devices_then_the_step_then_the_job():
    assert job_gpus({"CUDA_VISIBLE_DEVICES": "2,3", "SLURM_JOB_GPUS": "0,1,2,3"}) == ["2", "3"]
    assert job_gpus({"SLURM_STEP_GPUS": "1", "SLURM_JOB_GPUS": "0,1"}) == ["1"]
    assert job_gpus({"SLURM_JOB_GPUS": "0,1"}) == ["0", "1"]
    assert job_gpus({"CUDA_VISIBLE_DEVICES": "", "SLURM_JOB_GPUS": "0"}) == []  # CUDA told: no GPU
    assert job_gpus({}) == []


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no affinity mask on this platform")
def test_record_names_the_cpu_mask_as_ranges():
    share = slot_shares(["0"], [0, 1, 2, 5], 1)[0]
    assert share.record()["cpus"] == "0-2,5"


# ---------------------------------------------------------------- the GPU ids a slot's process is given

CGROUP = [4, 5]  # /dev/nvidia4 and /dev/nvidia5 open, the node's other six do not (ConstrainDevices=yes)


def test_a_slot_gets_the_parents_own_cuda_visible_devices_entries():
    ids, source = visible_gpu_ids({"CUDA_VISIBLE_DEVICES": "2,3", "SLURM_JOB_GPUS": "4,5"}, CGROUP)
    assert (ids, source) == (["2", "3"], "CUDA_VISIBLE_DEVICES")


def test_under_cgroup_limits_slurms_global_ids_become_the_indices_this_process_sees():
    # with CUDA_VISIBLE_DEVICES unset a child told "4,5" sees no GPU: inside the cgroup they are 0 and 1
    assert visible_gpu_ids({"SLURM_JOB_GPUS": "4,5"}, accessible=CGROUP)[0] == ["0", "1"]
    assert visible_gpu_ids({"SLURM_STEP_GPUS": "5", "SLURM_JOB_GPUS": "4,5"}, accessible=[5])[0] == ["0"]


def test_without_device_limits_the_global_ids_are_what_cuda_numbers():
    assert visible_gpu_ids({"SLURM_JOB_GPUS": "4,5"}, accessible=list(range(8)))[0] == ["4", "5"]
    assert visible_gpu_ids({"SLURM_JOB_GPUS": "4,5"}, accessible=None)[0] == ["4", "5"]  # cannot tell: kept
    assert visible_gpu_ids({}, None) == ([], "no GPU")


def test_the_devices_a_process_may_open_are_read_from_dev(tmp_path):
    for n in range(8):
        (tmp_path / f"nvidia{n}").touch()
    (tmp_path / "nvidiactl").touch()  # not a GPU
    allowed = {str(tmp_path / f"nvidia{n}") for n in CGROUP}
    assert accessible_gpu_minors(str(tmp_path), can_open=lambda p: p in allowed) == CGROUP
    assert accessible_gpu_minors(str(tmp_path)) == list(range(8))  # plain files: every one opens
    assert accessible_gpu_minors(str(tmp_path / "none")) is None


def test_each_slot_gets_one_gpu_and_the_spare_ones_are_named_idle():
    plan = slot_gpu_plan(2, {"SLURM_JOB_GPUS": "4,5,6,7"}, accessible=[4, 5, 6, 7])
    assert plan.slots == (("0",), ("1",)) and plan.idle == ("2", "3")
    assert plan.slot_environment(1) == {"CUDA_VISIBLE_DEVICES": "1", "HPCR_ASSIGNED_GPUS": "1"}
    assert "GPU 2,3 idle" in plan.line() and "--pack-parallel 4" in plan.line()


def test_fewer_gpus_than_slots_are_shared_and_no_gpu_gives_an_empty_environment():
    plan = slot_gpu_plan(4, {"CUDA_VISIBLE_DEVICES": "0,1"})
    assert plan.slots == (("0",), ("0",), ("1",), ("1",)) and plan.shared and "share a GPU" in plan.line()
    none = slot_gpu_plan(2, {"CUDA_VISIBLE_DEVICES": ""})
    assert none.slots == ((), ()) and none.slot_environment(0) == {}

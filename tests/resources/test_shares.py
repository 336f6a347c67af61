"""How a packed job's GPUs and CPUs are split among the points it runs at once."""

from __future__ import annotations

import os

import pytest

from hpc_runner.resources.shares import cpu_shares, describe_shares, gpu_shares, job_gpus, slot_shares


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

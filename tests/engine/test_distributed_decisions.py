"""Each decision of a multi-process run as a plain function: which device a rank takes, which device a
collective needs, the rendezvous variables and port under srun, a bundle's own process group, one seed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from hpc_runner.engine.distributed import (
    bundle_makes_process_group,
    collective_device_type,
    device_remap_line,
    local_rank,
    master_port,
    rank_device,
    rendezvous_env,
    visible_gpu_count,
)
from hpc_runner.engine.trainer import choose_device, ddp_device_ids
from hpc_runner.errors import ClusterError
from hpc_runner.scheduler.slurm.hostlist import first_host

ROOT = Path(__file__).resolve().parents[2]

# what srun sets in task 1 of a 2-task step on node gpu04 of job 4242 (SLURM 22.05)
SRUN_TASK_1 = {
    "SLURM_JOB_ID": "4242", "SLURM_NTASKS": "4", "SLURM_PROCID": "3", "SLURM_LOCALID": "1",
    "SLURM_STEP_ID": "0", "SLURM_JOB_NODELIST": "gpu[03-04]", "SLURM_STEP_NODELIST": "gpu[03-04]",
    "SLURM_JOB_NUM_NODES": "2", "SLURM_STEP_NUM_NODES": "2", "CUDA_VISIBLE_DEVICES": "0,1",
}


def test_the_local_rank_is_torchruns_local_rank_else_sruns_local_task_id():
    assert local_rank(SRUN_TASK_1) == 1
    assert local_rank({**SRUN_TASK_1, "LOCAL_RANK": "0"}) == 0  # torchrun inside an allocation
    batch_shell = {k: v for k, v in SRUN_TASK_1.items() if k != "SLURM_STEP_ID"}
    assert local_rank({**batch_shell, "SLURM_NTASKS": "1"}) == 0
    assert local_rank({}) == 0


def test_a_rank_takes_the_gpu_of_its_local_rank_among_the_gpus_it_sees():
    assert rank_device(1, cuda_devices=2) == "cuda:1"  # all of the node's GPUs visible
    assert rank_device(1, cuda_devices=1) == "cuda:0"  # --gpus-per-task: each task sees its own GPU
    assert rank_device(1, cuda_devices=0) == "cpu"
    assert rank_device(1, cuda_devices=2, requested="cuda") == "cuda:1"  # a bare 'cuda' gets the index
    assert rank_device(1, cuda_devices=2, requested="cuda:0") == "cuda:0"  # one process: the bundle's index wins
    with pytest.raises(ClusterError, match="two ranks would share one GPU"):
        rank_device(2, cuda_devices=2)


def test_a_bundles_cuda_0_under_several_ranks_becomes_each_ranks_own_gpu_and_says_so():
    # zoo configs say `device: cuda:0`; honoured on every rank, NCCL fails with "Duplicate GPU detected"
    assert [rank_device(lr, cuda_devices=4, requested="cuda:0", ranks=4) for lr in range(4)] == [
        "cuda:0", "cuda:1", "cuda:2", "cuda:3"]
    assert rank_device(0, cuda_devices=1, requested="cuda:3", ranks=2) == "cuda:0"  # --gpus-per-task: its one GPU
    assert rank_device(1, cuda_devices=0, requested="cpu", ranks=2) == "cpu"  # a CPU run stays one
    assert ddp_device_ids(choose_device("cuda:0", rank_on_node=1, cuda_devices=2, ranks=2)) == [1]
    line = device_remap_line("cuda:0", "cuda:1", rank=1, rank_on_node=1)
    assert line == ("hpc-runner: rank 1 (local rank 1) trains on cuda:1, not the bundle's device cuda:0: under "
                    "several ranks each one takes its own GPU")
    assert device_remap_line("cuda:0", "cuda:0", 0, 0) is None and device_remap_line(None, "cuda:1", 1, 1) is None


def test_ddp_device_ids_name_the_ranks_own_gpu_not_gpu_0():
    # the default `device: null` on local rank 1 of a 2-GPU node: the old code passed device_ids=[0]
    device = choose_device(None, rank_on_node=1, cuda_devices=2)
    assert device == torch.device("cuda", 1) and ddp_device_ids(device) == [1]
    assert ddp_device_ids(choose_device("cuda", 3, 4)) == [3]
    assert ddp_device_ids(choose_device(None, 1, 0)) is None  # CPU: DDP wants no device_ids
    with pytest.raises(ValueError):
        ddp_device_ids(torch.device("cuda"))


def test_visible_gpus_are_counted_from_cuda_visible_devices():
    assert visible_gpu_count({"CUDA_VISIBLE_DEVICES": "0,1"}) == 2
    assert visible_gpu_count({"CUDA_VISIBLE_DEVICES": "GPU-5d2e,GPU-77aa,GPU-1"}) == 3
    assert visible_gpu_count({"CUDA_VISIBLE_DEVICES": "NoDevFiles"}) == 0
    assert visible_gpu_count({}) == 0


def test_a_collectives_tensor_goes_where_the_backend_takes_it():
    assert collective_device_type("nccl") == "cuda"  # NCCL takes CUDA tensors only
    assert collective_device_type("gloo") == "cpu"
    assert collective_device_type("mpi") == "cpu"
    assert collective_device_type("xccl") == "xpu"
    assert collective_device_type("cpu:gloo,cuda:nccl") == "cpu"  # a per-device backend: its CPU side
    assert collective_device_type("cuda:nccl") == "cuda"


def by_name(host: str) -> tuple[str, str]:
    """An address finder that keeps the host's name (the name service is tested in test_rendezvous.py)."""
    return host, "kept"


def test_srun_tasks_without_torchrun_get_rendezvous_variables_from_slurm():
    env = rendezvous_env(SRUN_TASK_1, address=by_name)
    assert env == {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0",
                   "MASTER_ADDR": "gpu03", "MASTER_PORT": str(master_port(4242))}


def test_variables_already_set_win_and_torchrun_needs_none():
    assert "MASTER_PORT" not in rendezvous_env({**SRUN_TASK_1, "MASTER_PORT": "29500"}, address=by_name)
    torchrun = {**SRUN_TASK_1, "RANK": "0", "WORLD_SIZE": "8", "LOCAL_RANK": "0"}
    assert rendezvous_env(torchrun) == {}
    batch_shell = {k: v for k, v in SRUN_TASK_1.items() if k != "SLURM_STEP_ID"}
    assert rendezvous_env(batch_shell) == {}  # the batch script itself is no rank


def test_the_master_is_the_first_host_of_the_node_list():
    assert first_host("gpu[03-05,9],cpu1") == "gpu03"
    assert first_host("node7") == "node7"
    assert first_host("a-1,b[1-2]") == "a-1"


def test_the_port_comes_from_the_job_id_so_jobs_sharing_a_node_never_collide():
    ports = [master_port(job) for job in range(1_000_000, 1_012_000)]
    assert len(set(ports)) == len(ports)  # 12000 jobs in a row: all different
    assert all(20000 <= p < 32768 for p in ports)  # below Linux's ephemeral range
    assert master_port("4242") == master_port(4242)  # every rank of a job computes the same one


def test_a_bundle_that_starts_its_own_process_group_is_recognised():
    zoo = ROOT / "tests" / "registry" / "data" / "zoo_spleen_like" / "configs"
    assert bundle_makes_process_group(json.loads((zoo / "multi_gpu_train.json").read_text()))
    assert not bundle_makes_process_group(json.loads((zoo / "train.json").read_text()))
    assert not bundle_makes_process_group({"run": ["$@trainer.run()"], "seed": 0})


RANK_SCRIPT = textwrap.dedent('''
    import json, os, sys
    import torch
    import torch.distributed as dist
    from hpc_runner.data import ThreadDataLoader
    from hpc_runner.engine.distributed import all_ranks_agree, collective_device, shard_loader

    rank = int(os.environ["RANK"])
    torch.manual_seed(1000 + rank)  # what two processes without a bundle seed have: different initial seeds
    dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=rank, world_size=2)
    loader = ThreadDataLoader(list(range(16)), batch_size=2, shuffle=True)  # seed: torch.initial_seed()
    shard_loader(loader)
    seen = [int(i) for epoch in (0, 1) for b in (loader.set_epoch(epoch), loader)[1] for i in b]
    device = str(collective_device())
    stop = all_ranks_agree(rank == 1)  # set on rank 1 only: both must see it
    print(json.dumps({"seen": seen, "seed": loader.seed, "device": device, "stop": stop}))
    dist.destroy_process_group()
''')


@pytest.mark.slow
def test_ranks_without_a_bundle_seed_agree_on_rank_0s_seed_and_split_every_epoch_exactly(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "HPCR"))}
    env.update(OMP_NUM_THREADS="1", WORLD_SIZE="2", PYTHONPATH=str(ROOT))
    store = tmp_path / "store"
    procs = [subprocess.Popen([sys.executable, "-c", RANK_SCRIPT, str(store)], env={**env, "RANK": str(r)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert results[0]["seed"] == results[1]["seed"] == 1000  # rank 0's initial seed
    for epoch in (0, 1):
        both = [i for r in results for i in r["seen"][epoch * 8:(epoch + 1) * 8]]
        assert sorted(both) == list(range(16)), f"epoch {epoch}: samples duplicated or missed: {both}"
    assert [r["device"] for r in results] == ["cpu", "cpu"]  # gloo: a CPU tensor
    assert [r["stop"] for r in results] == [True, True]


SETTLE_SCRIPT = textwrap.dedent('''
    import sys
    import torch
    import torch.distributed as dist
    from hpc_runner.engine.distributed import settle_distributed_threads

    dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 1))  # holds the group
    model(torch.ones(3, 2)).sum().backward()
    settle_distributed_threads(pause=0.01)
    print("initialized after settling:", dist.is_initialized())
''')


def test_settling_destroys_a_group_the_run_left_registered(tmp_path):
    """A bundle that never destroys its group gets it destroyed before the interpreter exits."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "HPCR", "RANK", "WORLD_SIZE"))}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    res = subprocess.run([sys.executable, "-c", SETTLE_SCRIPT, str(tmp_path / "store")], env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "initialized after settling: False" in res.stdout, res.stdout


def test_ranks_that_would_share_the_nodes_only_gpu_are_refused_before_nccl():
    from hpc_runner.engine.distributed import shared_gpu_problem

    assert "2 ranks on this node but it has one GPU" in shared_gpu_problem(2, 1, None)
    assert shared_gpu_problem(2, 1, "0") is None  # set per task (srun --gpus-per-task): each may have its own
    assert shared_gpu_problem(2, 2, None) is None and shared_gpu_problem(1, 1, None) is None

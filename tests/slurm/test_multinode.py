"""DDP across the local cluster's emulated nodes, and a sweep spread over them (scripts/local-slurm.sh: vm1 on
127.0.1.1, vm2 on 127.0.1.2, each its own slurmd, host name and 2 fake GPUs).

`hpc-runner submit --slurm nodes=2 --slurm ntasks_per_node=1`, and the jade profile's whole-node form (2 tasks and
2 GPUs a node), train synthetic_seg with gloo on CPU: every rank records its node, host, address and device in
run.yaml, rank 1 finds rank 0 at vm1's own address, and the per-step losses and final weights equal those of one
process with the whole batch, within the tolerances of tests/slurm/test_ddp.py.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from hpc_runner.records.metrics_log import read_metrics
from hpc_runner.scheduler.slurm.hostlist import expand_hostlist

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "bundles" / "synthetic_seg"
NUM_TRAIN, GLOBAL_BATCH, EPOCHS = 16, 8, 2  # 2 steps an epoch, 4 in all; 2 or 4 samples a rank
RTOL = 1e-5  # tests/slurm/test_ddp.py: float32 sums in another order
WEIGHT_ATOL = 2e-5  # tests/slurm/test_ddp.py: final weights of a network without conv biases
WAIT = ["--wait", "--interval", "2", "--timeout", "300"]
JADE_WHOLE_NODES = """\
extends: jade
partition: gpu
partitions: [small, gpu]
nodes: 2
ntasks_per_node: 2
gpus_per_node: 2
cpus_per_task: 1
mem_gb: null
setup: []
time: 10
"""


def common_args(dataset_dir: Path) -> list[str]:
    """Tiny, and deterministic per sample (DDP then equals one process): no shuffle, augmentation or conv bias."""
    return ["--num_train", str(NUM_TRAIN), "--num_val", "1", "--image_size", "16", "--val_interval", "1",
            "--max_epochs", str(EPOCHS), "--dataset_dir", str(dataset_dir), "--train_loader::shuffle", "false",
            "--augmentation", "[]", "--+network_def::bias", "false"]


def node_addr(cluster, node: str) -> str:
    """The NodeAddr SLURM knows for ``node``."""
    text = cluster.run("scontrol", "show", "node", node).stdout
    return re.search(r"NodeAddr=(\S+)", text).group(1)


def losses(run_dir: Path) -> list[dict]:
    return [r for r in read_metrics(run_dir / "metrics.jsonl") if r.get("kind") == "iter"]


@pytest.fixture(scope="module")
def runs(slurm_cluster, tmp_path_factory, cli_factory):
    """One process outside SLURM, and the two multi-node jobs (submitted together, run one after the other)."""
    cli = cli_factory(tmp_path_factory.mktemp("multinode"))
    data = cli.cwd / "data"
    env = {k: v for k, v in cli.env.items() if not k.startswith("SLURM_")}
    single = cli.cwd / "single"
    res = subprocess.run([sys.executable, "-m", "hpc_runner", "run", "training", "--bundle", str(BUNDLE),
                          "--output_dir", str(single), "--batch_size", str(GLOBAL_BATCH), *common_args(data)],
                         env={**env, "OMP_NUM_THREADS": "1"}, cwd=cli.cwd, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    cli.write_profile("jadenodes", JADE_WHOLE_NODES)
    shapes = {"2x1": ["--cluster", "testcluster", "--slurm", "nodes=2", "--slurm", "ntasks_per_node=1",
                      "--batch_size", str(GLOBAL_BATCH // 2)],
              "2x2": ["--cluster", "jadenodes", "--batch_size", str(GLOBAL_BATCH // 4)]}
    for name, args in shapes.items():
        res = cli("submit", "training", "--bundle", str(BUNDLE), "--output_dir", name, *args, *common_args(data))
        assert res.returncode == 0, res.stdout + res.stderr
    for name in shapes:
        waited = cli("status", name, *WAIT)
        assert waited.returncode == 0, waited.stdout + slurm_cluster.explain(cli.cwd / name)
    return cli, single


def check_ranks(cluster, run_dir: Path, per_node: int) -> list[dict]:
    """Every rank's record: its node (in the job's node order), host name, address, local rank and device."""
    record = yaml.safe_load((run_dir / "run.yaml").read_text())
    assert record["status"] == "completed", record
    job = record["job"]["id"]
    nodes = expand_hostlist(cluster.run("sacct", "-X", "-n", "-P", "-j", job, "-o", "NodeList").stdout.split()[0])
    assert len(nodes) == 2, nodes
    ranks = record["ranks"]
    assert [r["rank"] for r in ranks] == list(range(2 * per_node))
    for r in ranks:
        node = nodes[r["rank"] // per_node]  # SLURM's block distribution: the first tasks on the first node
        assert r["node"] == node and r["node_rank"] == r["rank"] // per_node
        assert r["local_rank"] == r["rank"] % per_node
        assert r["host"] == node, "each emulated node's jobs see its own host name"
        assert r["address"] == node_addr(cluster, node), "and its name resolves to its own address"
        assert r["device"] == "cpu" and r["backend"] == "gloo"  # the fake GPUs leave CUDA unavailable
    assert record["host"]["hostname"] == nodes[0]  # rank 0 wrote the record, on the first node
    return ranks


def check_like_one_process(single: Path, run_dir: Path) -> None:
    """The same steps and losses (RTOL) and final weights (WEIGHT_ATOL) as one process with the whole batch."""
    a, b = losses(single), losses(run_dir)
    assert [(r["epoch"], r["batch"]) for r in a] == [(r["epoch"], r["batch"]) for r in b] and len(a) == 4
    for x, y in zip(a, b):
        assert math.isclose(x["loss"], y["loss"], rel_tol=RTOL), (x, y)
    wa, wb = torch.load(single / "model.pt", weights_only=True), torch.load(run_dir / "model.pt", weights_only=True)
    worst = max((wa[k].double() - wb[k].double()).abs().max().item() for k in wa)
    print(f"{run_dir.name}: final weights max abs diff {worst:.3g} from one process")
    assert wa.keys() == wb.keys() and worst < WEIGHT_ATOL, worst


def status_points(cli, path: Path) -> list[dict]:
    """The point lines of ``status --json`` (a finished sweep's last line is its right-size suggestion)."""
    return [x for x in map(json.loads, cli("status", str(path), "--json").stdout.splitlines()) if "point" in x]


def job_log(run_dir: Path) -> str:
    return "\n".join(p.read_text() for p in sorted((run_dir / "jobs").glob("*_log.out")))


def test_two_nodes_one_task_each_train_like_one_process(slurm_cluster, runs):
    cli, single = runs
    run_dir = cli.cwd / "2x1"
    ranks = check_ranks(slurm_cluster, run_dir, per_node=1)
    check_like_one_process(single, run_dir)
    log = job_log(run_dir)
    vm1, vm2 = ranks[0]["node"], ranks[1]["node"]
    # rank 1 dials rank 0 at vm1's own address, not 127.0.0.1 (SLURM_LAUNCH_NODE_IPADDR here)
    m = re.search(r"rank 1 of 2, local rank 0: .*; rendezvous (\S+):\d+ \((.*)\)", log)
    assert m and m.group(1) == ranks[0]["address"] != "127.0.0.1", log
    assert f"{vm1} is NodeAddr {ranks[0]['address']}" in m.group(2) and "emulated on one machine" in m.group(2)
    assert f"rank 1: gloo uses loopback ({ranks[1]['address']}): this host's name {vm2}" in log, log
    (point,) = status_points(cli, run_dir)
    assert point["state"] == "COMPLETED" and sorted(expand_hostlist(point["node"])) == sorted([vm1, vm2])


def test_two_nodes_two_tasks_each_in_the_jade_whole_node_form_train_like_one_process(slurm_cluster, runs):
    cli, single = runs
    run_dir = cli.cwd / "2x2"
    ranks = check_ranks(slurm_cluster, run_dir, per_node=2)
    assert all(r["cuda_visible_devices"] == "0,1" for r in ranks), ranks  # gpus_per_node: 2 on each node
    check_like_one_process(single, run_dir)
    log = job_log(run_dir)
    for r in ranks:  # the GPU each rank would take if CUDA worked: its local rank's
        assert (f"rank {r['rank']} of 4, local rank {r['local_rank']}: GPU device cuda:{r['local_rank']} "
                "(CUDA_VISIBLE_DEVICES=0,1)") in log, log


PACK_BUNDLE = """\
x: 0
output_dir: .
run:
  - "$print('point x =', @x, flush=True)"
  - "$__import__('time').sleep(1)"
"""


def test_a_sweeps_tasks_spread_over_both_nodes_each_pinning_its_points_within_its_node(slurm_cluster, tmp_path, cli):
    """Two packed tasks of 2 points at a time, each task a whole node (2 CPUs, 2 GPUs): one task per node."""
    bundle = tmp_path / "tinypack"
    (bundle / "configs").mkdir(parents=True)
    (bundle / "configs" / "train.yaml").write_text(PACK_BUNDLE)
    (bundle / "configs" / "metadata.json").write_text((BUNDLE / "configs" / "metadata.json").read_text())
    cli.write_profile("packnodes", "extends: testcluster\ncpus_per_task: 2\ngres: gpu:2\n"
                      "env: {HPCR_FAKE_GPUS: \"1\"}\n")  # the local cluster's GPUs are stand-ins
    res = cli("sweep", "--bundle", str(bundle), "--cluster", "packnodes", "--output_dir", "spread",
              "--sweep", "x=1,2,3,4", "--pack", "2", "--pack-parallel", "2")
    assert res.returncode == 0, res.stdout + res.stderr
    sweep = cli.cwd / "spread"
    waited = cli("status", str(sweep), *WAIT)
    assert waited.returncode == 0, waited.stdout + slurm_cluster.explain(sweep)
    points = status_points(cli, sweep)
    by_task: dict[str, set[str]] = {}
    for p in points:
        by_task.setdefault(p["job_id"], set()).add(p["node"])
    assert len(by_task) == 2 and all(len(n) == 1 for n in by_task.values()), by_task
    assert len({next(iter(n)) for n in by_task.values()}) == 2, f"both tasks on one node: {by_task}"
    for task in by_task:
        recs = [yaml.safe_load((sweep / "points" / f"{p['point']:04d}" / "run.yaml").read_text())
                for p in points if p["job_id"] == task]
        node = next(iter(by_task[task]))
        assert {r["host"]["hostname"] for r in recs} == {node}  # each point ran on its task's node
        # within the node: each of the two points at a time on its own CPU and its own GPU
        assert sorted(r["binding"]["cpus"] for r in recs) == ["0", "1"], recs
        assert sorted(tuple(r["binding"]["gpus"]) for r in recs) == [("0",), ("1",)], recs
    table = cli("status", str(sweep)).stdout
    header = next(line for line in table.splitlines() if line.startswith("point"))
    assert header.split()[:6] == ["point", "state", "cause", "job", "node", "requeues"] and "nodes: 2 (" in table

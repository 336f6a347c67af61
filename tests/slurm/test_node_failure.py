"""Nodes that fail under running points, on the local cluster's two emulated nodes (scripts/local-slurm.sh).

A tiny training bundle whose dataset, at its k-th item, waits while a "hold" file exists (and says so), so the
test acts on a point at a known step: after its first checkpoint, or before it trains at all.

- A node set DOWN (``scontrol update nodename=X state=down``) under a running point: the job ends NODE_FAIL,
  SLURM requeues it (JobRequeue=1) onto the other node, it resumes from its checkpoint and ends with the same
  weights as an uninterrupted point of the same sweep; ``status`` shows the node, the NODE_FAIL and the requeue.
- A point that failed on one node twice (``--no-requeue``: NODE_FAIL ends it; ``resume`` sends it back to the
  same node once) excludes that node on its next submission (``sbatch --exclude``), and ``status`` says so.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
import torch
import yaml

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

ROOT = Path(__file__).resolve().parents[2]
PROFILE = "testcluster"
WAIT = ["--wait", "--interval", "2", "--timeout", "300"]

SCRIPT = '''
import os
import socket
import time
from pathlib import Path

import torch


class HoldingSegDataset(torch.utils.data.Dataset):
    """Squares on noise; with ``hold_at=k`` this process's k-th item waits while ``hold_file`` exists, after
    writing ``<hold_file>-reached-<job id>-<restart count>`` (its host name in it)."""

    def __init__(self, n, size, seed, hold_at=0, hold_file=""):
        self.hold_at, self.hold_file, self.calls = hold_at, hold_file, 0
        g = torch.Generator().manual_seed(seed)
        self.items = []
        for _ in range(n):
            label = torch.zeros(1, size, size, dtype=torch.long)
            x, y = torch.randint(0, size // 2, (2,), generator=g).tolist()
            label[0, x : x + size // 2, y : y + size // 2] = 1
            self.items.append({"image": label.float() + 0.5 * torch.randn(1, size, size, generator=g), "label": label})

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        self.calls += 1
        if self.hold_at and self.calls == self.hold_at and self.hold_file:
            job = os.environ.get("SLURM_JOB_ID", "local")
            if os.environ.get("SLURM_ARRAY_JOB_ID"):
                job = f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ['SLURM_ARRAY_TASK_ID']}"
            attempt = f"{job}-{os.environ.get('SLURM_RESTART_COUNT', '0')}"
            Path(f"{self.hold_file}-reached-{attempt}").write_text(socket.gethostname())
            while os.path.exists(self.hold_file):
                time.sleep(0.2)
        return self.items[i]
'''

TRAIN = """\
seed: 0
output_dir: runs/tiny
max_epochs: 2
network_def: {_target_: UNet, spatial_dims: 2, in_channels: 1, out_channels: 2, channels: [4, 8], strides: [2]}
train_dataset: {_target_: scripts.tiny.HoldingSegDataset, n: 12, size: 16, seed: 1, hold_at: 0, hold_file: ""}
val_dataset: {_target_: scripts.tiny.HoldingSegDataset, n: 2, size: 16, seed: 2}
train_loader: {_target_: torch.utils.data.DataLoader, dataset: "@train_dataset", batch_size: 2}
val_loader: {_target_: torch.utils.data.DataLoader, dataset: "@val_dataset", batch_size: 2}
optimizer: {_target_: torch.optim.SGD, _mode_: callable, lr: 0.05}
loss: {_target_: DiceCELoss, to_onehot_y: true, softmax: true}
trainer:
  _target_: hpc_runner.engine.Trainer
  network: "@network_def"
  optimizer: "@optimizer"
  loss_function: "@loss"
  train_loader: "@train_loader"
  val_loader: "@val_loader"
  max_epochs: "@max_epochs"
  seed: "@seed"
  output_dir: "@output_dir"
  checkpoint_interval: 2
run:
  - "$@trainer.run()"
"""


def make_bundle(root: Path) -> Path:
    bundle = root / "nodefail"
    (bundle / "configs").mkdir(parents=True)
    (bundle / "scripts").mkdir()
    (bundle / "scripts" / "__init__.py").write_text("")
    (bundle / "scripts" / "tiny.py").write_text(SCRIPT)
    (bundle / "configs" / "train.yaml").write_text(TRAIN)
    metadata = ROOT / "bundles" / "synthetic_seg" / "configs" / "metadata.json"
    (bundle / "configs" / "metadata.json").write_text(metadata.read_text())
    return bundle


def wait_for(check, timeout: float, what: str, cluster, sweep: Path) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not seen after {timeout} s\n{cluster.explain(sweep, [job_of(sweep, 0)])}")
        time.sleep(0.3)


def job_of(sweep: Path, index: int) -> str:
    return json.loads((sweep / "sweep.yaml").read_text())["points"][index]["job_id"] or ""


def queue(cluster, job: str, fmt: str) -> str:
    return cluster.run("squeue", "-h", "-t", "all", "-j", job, "-o", fmt).stdout.strip()


def status_json(cli, sweep: Path) -> dict[int, dict]:
    res = cli("status", str(sweep), "--json", "--no-submit")
    assert res.returncode == 0, res.stderr
    return {p["point"]: p for p in map(json.loads, res.stdout.splitlines()) if "point" in p}  # not right_size


def set_node(cluster, node: str, state: str) -> None:
    res = cluster.run("scontrol", "update", f"nodename={node}", f"state={state}", "reason=hpc-runner node test")
    assert res.returncode == 0 or state == "RESUME", res.stderr  # RESUME of a node already back: refused, fine


def reached(hold: Path, job: str) -> list[Path]:
    return sorted(hold.parent.glob(f"{hold.name}-reached-{job}-*"))


def test_a_node_set_down_under_a_point_requeues_it_onto_the_other_node_where_it_resumes_to_the_same_weights(
        slurm_cluster, cli):
    cluster = slurm_cluster
    bundle = make_bundle(cli.cwd)
    hold = cli.cwd / "hold"
    hold.touch()
    # point 0 waits at its 6th item (batch 3, after the checkpoint of step 2); point 1 runs straight through
    res = cli("sweep", "run", "--bundle", str(bundle), "--cluster", PROFILE, "--output_dir", "down", "--zip",
              "--sweep", "train_dataset::hold_at=6,0", "--train_dataset::hold_file", str(hold))
    assert res.returncode == 0, res.stdout + res.stderr
    sweep = cli.cwd / "down"
    first = job_of(sweep, 0)
    ckpts = sweep / "points" / "0000" / "checkpoints"

    def point_1_done() -> bool:
        record = sweep / "points" / "0001" / "run.yaml"  # written atomically: whole or absent
        return record.is_file() and (yaml.safe_load(record.read_text()) or {}).get("status") == "completed"

    wait_for(lambda: reached(hold, first) and ckpts.is_dir() and any(ckpts.iterdir()) and point_1_done(), 240,
             "point 0 held after its first checkpoint, point 1 completed", cluster, sweep)
    node = queue(cluster, first, "%N")
    other = next(n for n in cluster.run("sinfo", "-h", "-N", "-o", "%N").stdout.split() if n != node)
    try:
        set_node(cluster, node, "DOWN")
        set_node(cluster, node, "DRAIN")  # ReturnToService=2 brings a DOWN node back within seconds: keep it out
        wait_for(lambda: queue(cluster, first, "%T") in ("PENDING", "RUNNING", "CONFIGURING"), 60,
                 "the job requeued after NODE_FAIL", cluster, sweep)
        wait_for(lambda: queue(cluster, first, "%T %N") == f"RUNNING {other}", 120,
                 f"the requeued job running on {other}", cluster, sweep)
    finally:
        set_node(cluster, node, "RESUME")
    hold.unlink()
    waited = cli("status", str(sweep), *WAIT)
    assert waited.returncode == 0, waited.stdout + cluster.explain(sweep, [first])

    points = status_json(cli, sweep)
    p0 = points[0]
    assert p0["state"] == "COMPLETED" and p0["job_id"] == first and p0["requeues"] == 1, p0
    assert p0["node"] == other and p0["attempts"] == [{"state": "NODE_FAIL", "node": node}], p0
    assert points[1]["requeues"] == 0 and points[1]["attempts"] == []
    table = cli("status", str(sweep), "--no-submit").stdout
    row = next(line for line in table.splitlines() if line.startswith("0 "))
    assert f"{other} (NODE_FAIL {node})" in row and "requeued: 1 point(s), 1 requeue(s)" in table, table
    log = (sweep / "points/0000/log.txt").read_text()
    m = re.search(r"resuming from \S+ \(epoch \d+, step (\d+)\)", log)
    assert m and int(m.group(1)) >= 2, log  # from the checkpoint written on the failed node
    record = (sweep / "points/0000/run.yaml").read_text()
    assert f"hostname: {other}" in record and "attempts: 2" in record, record
    a = torch.load(sweep / "points/0000/model.pt", weights_only=True)
    b = torch.load(sweep / "points/0001/model.pt", weights_only=True)
    assert a.keys() == b.keys()
    differ = [k for k in a if not torch.equal(a[k], b[k])]
    assert not differ, f"{len(differ)} of {len(a)} tensors differ from the uninterrupted point"


def test_a_point_that_failed_twice_on_a_node_excludes_it_next_time_and_status_says_so(slurm_cluster, cli):
    cluster = slurm_cluster
    bundle = make_bundle(cli.cwd)
    cli.write_profile("norequeue", f"extends: {PROFILE}\nsbatch: {{no-requeue: true}}\n")
    hold = cli.cwd / "hold"
    hold.touch()
    res = cli("sweep", "run", "--bundle", str(bundle), "--cluster", "norequeue", "--output_dir", "twice",
              "--sweep", "train_dataset::hold_at=1", "--train_dataset::hold_file", str(hold), "--max_epochs", "1")
    assert res.returncode == 0, res.stdout + res.stderr
    sweep = cli.cwd / "twice"

    def fail_where_it_runs(job: str) -> str:
        """Wait until the point is held in job ``job``, set its node DOWN, wait for NODE_FAIL; return the node."""
        wait_for(lambda: reached(hold, job), 240, f"job {job} holding", cluster, sweep)
        node = queue(cluster, job, "%N")
        try:
            set_node(cluster, node, "DOWN")
            wait_for(lambda: queue(cluster, job, "%T") == "NODE_FAIL", 60, f"NODE_FAIL of {job}", cluster, sweep)
        finally:
            set_node(cluster, node, "RESUME")
        return node

    first = job_of(sweep, 0)
    node = fail_where_it_runs(first)
    (p,) = status_json(cli, sweep).values()
    assert p["state"] == "NODE_FAIL" and p["cause"] == "NODE_FAIL" and p["node"] == node and not p["excluded"], p
    # back to the same node once (the test's choice: nothing else would put it there), where it fails again
    res = cli("resume", str(sweep), "--slurm", f"sbatch={{nodelist: {node}, no-requeue: true}}")
    assert res.returncode == 0 and "exclude" not in res.stdout, res.stdout + res.stderr
    second = job_of(sweep, 0)
    assert second != first and fail_where_it_runs(second) == node

    res = cli("resume", str(sweep))
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"point 0 failed 2 times on node {node}; its next jobs exclude it" in res.stdout, res.stdout
    third = job_of(sweep, 0)
    shown = cluster.run("scontrol", "show", "job", third).stdout
    assert f"ExcNodeList={node}" in shown, shown
    hold.unlink()
    waited = cli("status", str(sweep), *WAIT)
    assert waited.returncode == 0, waited.stdout + cluster.explain(sweep, [third])
    (p,) = status_json(cli, sweep).values()
    assert p["state"] == "COMPLETED" and p["excluded"] == [node] and p["node"] not in (None, node), p
    record = json.loads((sweep / "sweep.yaml").read_text())
    assert record["points"][0]["node_failures"] == {first: [node], second: [node]}
    assert any(a.get("exclude") == node for s in record["submissions"] for a in s.get("arrays", []))
    table = cli("status", str(sweep), "--no-submit").stdout
    assert f"point 0 excludes node {node} (it failed there twice)" in table, table

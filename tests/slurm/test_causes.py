"""Why each failed point failed, on the real local SLURM: one real failure of each kind it can produce.

One sweep (``kinds``) of a tiny bundle whose ``mode`` id picks what the point does: train ("ok"),
raise a ValueError in the bundle's code ("raise"), miss its input ("bad_input": a hpc-runner
ConfigError), raise torch.cuda.OutOfMemoryError ("oom": the local cluster has no cgroups, so a
cgroup OOM kill cannot be produced here; this is the run-dir path), stop itself with SIGUSR2 mid-run
so the runner checkpoints and requeues it (train_dataset stop_after), or sleep ("sleep") until the
test cancels it or lowers its time limit. Then two small sweeps lose their nodes (the nodes their
sleeping points run on, set DOWN under them): one submitted with ``--no-requeue`` ends NODE_FAIL, one
with SLURM's default (JobRequeue=1) is requeued and completes (on the other node, or once its node is back).
"""

from __future__ import annotations

import csv
import json
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

PROFILE = "testcluster"
WAIT = ["--wait", "--interval", "2", "--timeout", "300"]

SCRIPT = '''
import os
import signal
import time
from pathlib import Path

import torch

from hpc_runner.errors import ConfigError


def act(mode, output_dir, seconds=240):
    """What the point does before it trains."""
    if mode == "raise":
        raise ValueError(f"mode {mode!r}: 42 is not an allowed value")
    if mode == "bad_input":
        image = Path(output_dir) / "inputs" / "image.nii.gz"
        if not image.is_file():
            raise ConfigError("the input image is missing", where=str(image), expected="the image this point reads")
    if mode == "oom":
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
    if mode == "sleep":
        marker = Path(output_dir) / "slept"
        if not marker.exists():  # the first attempt sleeps (to be cancelled, timed out, lose its node)
            marker.touch()
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                time.sleep(0.5)
    return mode


class RandomSegDataset(torch.utils.data.Dataset):
    """Squares on noise; ``stop_after=k`` sends this process SIGUSR2 at its k-th item, once."""

    def __init__(self, n, size, seed, stop_after=0, stop_marker=""):
        self.stop_after, self.stop_marker, self.calls = stop_after, stop_marker, 0
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
        if self.calls == self.stop_after and self.stop_marker and not os.path.exists(self.stop_marker):
            open(self.stop_marker, "w").close()
            os.kill(os.getpid(), signal.SIGUSR2)
        return self.items[i]
'''

TRAIN = """\
seed: 0
mode: ok
output_dir: runs/tiny
max_epochs: 1
network_def:
  _target_: UNet
  spatial_dims: 2
  in_channels: 1
  out_channels: 2
  channels: [4, 8]
  strides: [2]
train_dataset:
  _target_: scripts.tiny.RandomSegDataset
  n: 12
  size: 16
  seed: 1
  stop_after: 0
  stop_marker: "$@output_dir + '/stop-marker'"
val_dataset: {_target_: scripts.tiny.RandomSegDataset, n: 2, size: 16, seed: 2}
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
act: {_target_: scripts.tiny.act, mode: "@mode", output_dir: "@output_dir"}
run:
  - "$@act"
  - "$@trainer.run()"
"""

META = {"name": "causes", "version": "0.1.0", "monai_version": "1.6.1", "pytorch_version": "2.13.0",
        "numpy_version": "2.4.6", "task": "test", "description": "a bundle that fails on demand",
        "authors": "tests", "copyright": "none",
        "network_data_format": {
            "inputs": {"image": {"type": "image", "format": "magnitude", "num_channels": 1,
                                 "spatial_shape": [16, 16], "dtype": "float32"}},
            "outputs": {"pred": {"type": "image", "format": "segmentation", "num_channels": 2,
                                 "spatial_shape": [16, 16], "dtype": "float32"}}}}

# point index -> (mode, stop_after): sleepers first, so they hold the CPUs while the test acts on them
KINDS = {0: ("sleep", 0), 1: ("sleep", 0), 2: ("raise", 0), 3: ("bad_input", 0), 4: ("oom", 0),
         5: ("ok", 3), 6: ("ok", 0)}
CANCEL, TIMEOUT_POINT, RAISE, BAD, OOM, PREEMPT, OK = range(7)


def make_bundle(root: Path) -> Path:
    """Write the bundle (configs/, metadata, scripts/) under ``root``."""
    bundle = root / "causes"
    (bundle / "configs").mkdir(parents=True)
    (bundle / "scripts").mkdir()
    (bundle / "scripts" / "__init__.py").write_text("")
    (bundle / "scripts" / "tiny.py").write_text(SCRIPT)
    (bundle / "configs" / "train.yaml").write_text(TRAIN)
    (bundle / "configs" / "metadata.json").write_text(json.dumps(META))
    return bundle


def record(sweep: Path) -> dict:
    return json.loads((sweep / "sweep.yaml").read_text())


def job_of(sweep: Path, index: int) -> str:
    return record(sweep)["points"][index]["job_id"]


def wait_for(check, timeout: float, what: str, cluster=None, sweep: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            why = cluster.explain(sweep, [p.get("job_id") or "" for p in record(sweep)["points"]]) if sweep else ""
            pytest.fail(f"{what} not seen after {timeout} s\n{why}")
        time.sleep(0.5)


def queue_state(cluster, job: str) -> str:
    return cluster.run("squeue", "-h", "-t", "all", "-j", job, "-o", "%T").stdout.strip()


def sweep(cli, bundle: Path, out: str, modes: list[str], stops: list[int], *more: str) -> Path:
    stop_after = "train_dataset::stop_after=" + ",".join(map(str, stops))
    proc = cli("sweep", "run", "--bundle", str(bundle), "--cluster", PROFILE, "--output_dir", out, "--zip",
               "--sweep", "mode=" + ",".join(modes), "--sweep", stop_after, *more)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return cli.cwd / out


def status_json(cli, path: Path) -> list[dict]:
    proc = cli("status", str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    return [p for p in map(json.loads, proc.stdout.splitlines()) if "point" in p]  # not the right_size line


@pytest.fixture(scope="module")
def failures(slurm_cluster, tmp_path_factory, cli_factory):
    """Run every failure once; return the sweep dirs and what the commands printed along the way."""
    cli = cli_factory(tmp_path_factory.mktemp("causes"))
    cli.write_profile("norequeue", f"extends: {PROFILE}\nsbatch: {{no-requeue: true}}\n")
    bundle = make_bundle(cli.cwd)
    cluster = slurm_cluster
    started = time.monotonic()
    # the two sleepers are alike but for their seed: a sweep refuses two identical points (two identical jobs)
    kinds = sweep(cli, bundle, "kinds", [m for m, _ in KINDS.values()], [s for _, s in KINDS.values()],
                  "--sweep", "seed=" + ",".join(str(i) for i in KINDS))
    slept = [kinds / "points" / f"{i:04d}" / "slept" for i in (CANCEL, TIMEOUT_POINT)]
    wait_for(lambda: slept[0].exists(), 180, "the point to cancel sleeping", cluster, kinds)
    assert cluster.run("scancel", job_of(kinds, CANCEL)).returncode == 0
    wait_for(lambda: slept[1].exists(), 180, "the point to time out sleeping", cluster, kinds)
    # the shortest limit SLURM keeps is one minute; it checks limits about every 30 s
    res = cluster.run("scontrol", "update", f"JobId={job_of(kinds, TIMEOUT_POINT)}", "TimeLimit=1")
    assert res.returncode == 0, res.stderr
    waited = cli("status", str(kinds), *WAIT)
    assert waited.returncode == 1, waited.stdout + waited.stderr
    kinds_time = time.monotonic() - started

    # a node set DOWN under running points: only while no other point of ours runs, and back at once
    lost = {"norequeue": sweep(cli, bundle, "lost-norequeue", ["ok", "sleep"], [3, 0], "--cluster", "norequeue"),
            "requeue": sweep(cli, bundle, "lost-requeue", ["sleep"], [0])}
    sleepers = [lost["norequeue"] / "points" / "0001" / "slept", lost["requeue"] / "points" / "0000" / "slept"]
    first = job_of(lost["norequeue"], 0)  # stops itself, then ends (its requeue is refused): not on the node

    def ready() -> bool:
        return all(m.exists() for m in sleepers) and queue_state(cluster, first) in ("FAILED", "COMPLETED")

    wait_for(ready, 240, "both sleepers running, the self-stopping point ended", cluster, lost["norequeue"])
    # the nodes the two sleepers run on (the local cluster has several and spreads jobs: one node or two)
    sleeping = (job_of(lost["norequeue"], 1), job_of(lost["requeue"], 0))
    nodes = sorted({cluster.run("squeue", "-h", "-j", job, "-o", "%N").stdout.strip() for job in sleeping})
    assert all(nodes), f"a sleeper without a node: {nodes}"
    try:
        for node in nodes:
            res = cluster.run("scontrol", "update", f"nodename={node}", "state=DOWN", "reason=hpc-runner causes test")
            assert res.returncode == 0, res.stderr
        wait_for(lambda: queue_state(cluster, sleeping[0]) == "NODE_FAIL", 60,
                 "NODE_FAIL of the --no-requeue point", cluster, lost["norequeue"])
        requeued_state = queue_state(cluster, sleeping[1])
    finally:
        for node in nodes:
            cluster.run("scontrol", "update", f"nodename={node}", "state=RESUME")
    waited_lost = {k: cli("status", str(v), *WAIT) for k, v in lost.items()}
    yield {"cli": cli, "cluster": cluster, "kinds": kinds, "lost": lost, "waited": waited,
           "waited_lost": waited_lost, "requeued_state": requeued_state, "kinds_time": kinds_time}


def test_status_counts_each_cause_and_gives_one_line_per_failed_point(failures):
    cli, kinds = failures["cli"], failures["kinds"]
    cli.reset()
    out = cli("status", str(kinds))
    assert cli.calls()["sacct"] == 1 and cli.calls()["squeue"] == 0  # still one scheduler call
    text = out.stdout
    assert "COMPLETED 2" in text, text
    causes_line = next(ln for ln in text.splitlines() if ln.strip().startswith("causes:"))
    for kind in ("ERROR 1", "BAD_INPUT 1", "OUT_OF_MEMORY 1", "CANCELLED 1", "TIMEOUT 1"):
        assert kind in causes_line, text
    rows = {int(ln.split()[0]): ln for ln in text.splitlines() if ln[:1].isdigit()}
    assert "ValueError: mode 'raise': 42 is not an allowed value" in rows[RAISE], text
    assert "scripts/tiny.py:" in rows[RAISE] and "id 'act'" in rows[RAISE], text
    assert "BAD_INPUT" in rows[BAD] and "the input image is missing" in rows[BAD], text
    assert "OUT_OF_MEMORY" in rows[OOM] and "CUDA out of memory" in rows[OOM], text
    assert "CANCELLED" in rows[CANCEL] and "cancelled by root" in rows[CANCEL], text
    assert "TIMEOUT" in rows[TIMEOUT_POINT] and "time limit" in rows[TIMEOUT_POINT], text
    assert "--cause TIMEOUT" in text


def test_status_json_has_the_cause_the_error_and_the_requeues(failures):
    points = {p["point"]: p for p in status_json(failures["cli"], failures["kinds"])}
    assert {i: p["cause"] for i, p in points.items()} == {
        CANCEL: "CANCELLED", TIMEOUT_POINT: "TIMEOUT", RAISE: "ERROR", BAD: "BAD_INPUT", OOM: "OUT_OF_MEMORY",
        PREEMPT: None, OK: None}
    err = points[RAISE]["error"]
    assert err["error_type"] == "ValueError" and err["config_id"] == "act"
    assert err["where"].endswith(tuple(f"scripts/tiny.py:{n}" for n in range(1, 30)))
    assert err["config_file"].startswith(str(failures["kinds"] / "points" / f"{RAISE:04d}" / "config.yaml"))
    assert points[BAD]["error"]["config_file"].endswith("inputs/image.nii.gz")
    # the point that stopped itself, checkpointed and requeued itself: completed, requeued once
    assert points[PREEMPT]["state"] == "COMPLETED" and points[PREEMPT]["requeues"] == 1
    assert points[OK]["requeues"] == 0


def test_collect_and_report_show_the_causes(failures):
    cli, kinds = failures["cli"], failures["kinds"]
    assert cli("collect", str(kinds), "--quiet").returncode == 0
    rows = list(csv.DictReader((kinds / "results.csv").open()))
    assert [r["cause"] for r in rows] == ["CANCELLED", "TIMEOUT", "ERROR", "BAD_INPUT", "OUT_OF_MEMORY", "", ""]
    assert rows[PREEMPT]["requeues"] == "1" and rows[PREEMPT]["state"] == "COMPLETED"
    assert "| state | cause |" in (kinds / "results.md").read_text()
    rep = cli("report", str(kinds))
    assert rep.returncode == 0, rep.stderr
    html = (kinds / "report.html").read_text()
    assert "Failed points by cause:" in html and "TIMEOUT 1" in html and "BAD_INPUT 1" in html


def test_node_down_fails_a_no_requeue_point_and_requeues_the_default_one(failures):
    cli, lost = failures["cli"], failures["lost"]
    norequeue = {p["point"]: p for p in status_json(cli, lost["norequeue"])}
    # point 0 stopped itself and could not be requeued (--no-requeue): it keeps its checkpoint
    assert norequeue[0]["cause"] == "PREEMPTED" and "ckpt" in norequeue[0]["error"].get("message", "")
    assert norequeue[1]["state"] == "NODE_FAIL" and norequeue[1]["cause"] == "NODE_FAIL"
    # SLURM's JobRequeue=1 requeued the other (PENDING while the node was down), which then completed
    assert failures["requeued_state"] in ("PENDING", "REQUEUED", "CONFIGURING", "RUNNING")
    (requeued,) = status_json(cli, lost["requeue"])
    assert failures["waited_lost"]["requeue"].returncode == 0, failures["waited_lost"]["requeue"].stdout
    assert requeued["state"] == "COMPLETED" and requeued["requeues"] == 1 and requeued["cause"] is None


def test_resume_cause_timeout_resubmits_only_the_timed_out_point_with_a_longer_limit(failures):
    cli, kinds = failures["cli"], failures["kinds"]
    before = {p["index"]: p["job_id"] for p in record(kinds)["points"]}
    dry = cli("resume", str(kinds), "--cause", "TIMEOUT", "--dry-run")
    assert dry.returncode == 0 and "1 to resubmit" in dry.stdout, dry.stdout + dry.stderr
    resumed = cli("resume", str(kinds), "--cause", "TIMEOUT", "--slurm", "time=5")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "4 failed or missing point(s) left as they are" in resumed.stdout and "1 to resubmit" in resumed.stdout
    after = {p["index"]: p["job_id"] for p in record(kinds)["points"]}
    assert [i for i in after if after[i] != before[i]] == [TIMEOUT_POINT]
    limit = subprocess.run(["scontrol", "show", "job", after[TIMEOUT_POINT]], capture_output=True, text=True,
                           env=failures["cluster"].env).stdout
    assert "TimeLimit=00:05:00" in limit, limit
    cli("status", str(kinds), *WAIT)
    points = {p["point"]: p for p in status_json(cli, kinds)}
    assert points[TIMEOUT_POINT]["state"] == "COMPLETED" and points[TIMEOUT_POINT]["cause"] is None
    assert points[RAISE]["cause"] == "ERROR" and points[CANCEL]["cause"] == "CANCELLED"

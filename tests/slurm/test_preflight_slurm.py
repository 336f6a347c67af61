"""The pre-flight on the real local SLURM: what could never start is refused before anything is queued.

Every command gets its own job name (`--slurm job_name=...`), so "nothing queued" is checked by name
with squeue and sacct without looking at other tests' jobs.
"""

from __future__ import annotations

import shutil
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "bundles" / "synthetic_seg"
PROFILE = "testcluster"

pytestmark = [pytest.mark.slow, pytest.mark.slurm]


def _name() -> str:
    return f"hpcr-preflight-{uuid.uuid4().hex[:8]}"


def _queued(cluster, name: str) -> list[str]:
    """Jobs of that name the scheduler knows: queued or running (squeue), or ever accounted (sacct)."""
    squeue = cluster.run("squeue", "-h", "-n", name, "-o", "%i")
    sacct = cluster.run("sacct", "-n", "-X", "-P", "--name", name, "-o", "JobID", "-S", "now-1hour")
    assert squeue.returncode == 0, squeue.stderr
    return squeue.stdout.split() + (sacct.stdout.split() if sacct.returncode == 0 else [])


def _input_bundle(folder: Path) -> Path:
    """The example bundle without its data-generating step: dataset_dir is then an input."""
    copy = folder / "input_seg"
    shutil.copytree(BUNDLE, copy)
    train = copy / "configs" / "train.yaml"
    text = train.read_text()
    start = text.index("  - _target_: hpc_runner.data.synthetic.ensure_synthetic_volumes")
    end = text.index("train_datalist:")
    train.write_text(text[:start] + "\n" + text[end:])
    return copy


def test_a_gpu_count_the_node_lacks_is_refused_with_sbatch_reason_and_nothing_queued(slurm_cluster, cli):
    name = _name()
    out = cli("sweep", "--bundle", str(BUNDLE), "--cluster", PROFILE, "--output_dir", "sw", "--hold",
              "--sweep", "seed=1,2,3", "--slurm", "gpus_per_node=3", "--slurm", f"job_name={name}")
    assert out.returncode == 2, out.stdout + out.stderr
    assert "Traceback" not in out.stderr
    assert "the scheduler refuses the sweep's job array (3 points)" in out.stderr
    assert "sbatch --test-only says: allocation failure: Requested node configuration is not available" in out.stderr
    assert cli.calls()["sbatch"] == 1  # the --test-only call only
    assert not (cli.cwd / "sw").exists()
    assert _queued(slurm_cluster, name) == []


def test_an_unknown_partition_is_refused_on_submit_and_no_run_dir_is_left(slurm_cluster, cli):
    name = _name()
    out = cli("submit", "--bundle", str(BUNDLE), "--cluster", PROFILE, "--output_dir", "r1", "--hold",
              "--slurm", "partition=nosuch", "--slurm", f"job_name={name}")
    assert out.returncode == 2, out.stdout + out.stderr
    assert "Invalid partition name specified" in out.stderr and "nothing was submitted" in out.stderr
    assert not (cli.cwd / "r1").exists()
    assert _queued(slurm_cluster, name) == []


def test_a_bad_target_in_one_sweep_point_is_named_and_nothing_reaches_sbatch(slurm_cluster, cli):
    name = _name()
    out = cli("sweep", "--bundle", str(BUNDLE), "--cluster", PROFILE, "--output_dir", "sw", "--hold",
              "--sweep", "network_def::_target_=UNet,BasicUNet,monai.networks.nets.NoSuchNet",
              "--sweep", "seed=1,2", "--slurm", f"job_name={name}")
    assert out.returncode == 2, out.stdout + out.stderr
    [paragraph] = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert "sweep point 4 (network_def::_target_=monai.networks.nets.NoSuchNet seed=1) cannot start" in paragraph
    assert "at id 'network_def::_target_'" in paragraph and "cannot be imported" in paragraph
    assert cli.calls()["sbatch"] == 0
    assert not (cli.cwd / "sw").exists()
    assert _queued(slurm_cluster, name) == []


def test_a_missing_dataset_dir_is_refused_and_an_existing_one_is_queued(slurm_cluster, cli):
    bundle = _input_bundle(cli.cwd)
    name = _name()
    missing = cli.cwd / "no-such-data"
    out = cli("sweep", "--bundle", str(bundle), "--cluster", PROFILE, "--output_dir", "sw", "--hold",
              "--sweep", "seed=1,2", "--dataset_dir", str(missing), "--slurm", f"job_name={name}")
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"at id 'dataset_dir': pre-flight: the input folder '{missing}' does not exist" in out.stderr
    assert cli.calls()["sbatch"] == 0 and not (cli.cwd / "sw").exists()
    assert _queued(slurm_cluster, name) == []

    missing.mkdir()  # the same sweep with its data present passes the pre-flight and is queued (held)
    out = cli("sweep", "--bundle", str(bundle), "--cluster", PROFILE, "--output_dir", "sw", "--hold",
              "--sweep", "seed=1,2", "--dataset_dir", str(missing), "--slurm", f"job_name={name}")
    try:
        assert out.returncode == 0, out.stdout + out.stderr
        assert len(_queued(slurm_cluster, name)) >= 1
    finally:
        cancelled = cli("cancel", "sw")
    assert cancelled.returncode == 0, cancelled.stderr

    # resume of the cancelled points with an impossible partition: refused, nothing new queued
    deadline = time.monotonic() + 60
    while slurm_cluster.run("squeue", "-h", "-n", name, "-o", "%i").stdout.strip() and time.monotonic() < deadline:
        time.sleep(1)
    before = (cli.cwd / "sw" / "sweep.yaml").read_text()
    cli.reset()
    resumed = cli("resume", "sw", "--slurm", "partition=nosuch")
    assert resumed.returncode == 2, resumed.stdout + resumed.stderr
    assert "Invalid partition name specified" in resumed.stderr
    assert cli.calls()["sbatch"] == 1
    assert slurm_cluster.run("squeue", "-h", "-n", name, "-o", "%i").stdout.strip() == ""
    import yaml

    after = yaml.safe_load((cli.cwd / "sw" / "sweep.yaml").read_text())
    assert len(after["submissions"]) == len(yaml.safe_load(before)["submissions"])
    assert all(len(p["jobs"]) == 1 for p in after["points"])

"""Data on the node, on the real local 2-node SLURM: a 16-point sweep with --stage reads the shared folder (a FUSE
view that counts its reads, scripts/slow_share.py) once per node, about 16 times the dataset without it, and a
requeue reads nothing more (docs/data-on-the-cluster.md). The two slurmd of scripts/local-slurm.sh share this
machine, so each node's "node-local" folder is ``stage/{node}``.

The volumes are the seed's kind (create_test_image_3d, image and label .nii.gz); the test makes 10 of 32^3 so
that CI's 2 CPUs train 16 points in a few minutes. HPCR_STAGE_TEST_FULL=1 makes the seed's 100 of 128^3 (680 MB)
and has each point load every one of them whole, then train and validate on their central 32^3 for the one epoch
(a step over whole 128^3 volumes takes about 9 s on 2 CPUs), and the share costs 0.1 ms a read instead of 1 ms:
what is read does not depend on either. It took 11.6 minutes here (2026-11-29), most of it the unstaged sweep
reading 16 copies through the share; the figures it printed are in docs/data-on-the-cluster.md ("Measured").
The points are packed 4 to a task (``--pack 4``: one interpreter per 4 points, as a site with a start-up cost
would run them); each point still reads its own data, so without staging the share is read once per point."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from slow_share import mounted, read_bytes

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = str(ROOT / "bundles" / "synthetic_seg")
FULL = os.environ.get("HPCR_STAGE_TEST_FULL") == "1"
WAIT_S = 1800 if FULL else 900
WAIT = ["--wait", "--interval", "2", "--timeout", str(WAIT_S)]
N_TRAIN, N_VAL, SIZE = (90, 10, 128) if FULL else (8, 2, 32)
DATA = ["--num_train", str(N_TRAIN), "--num_val", str(N_VAL), "--image_size", str(SIZE), "--max_epochs", "1",
        "--val_interval", "1", "--batch_size", "2"]
# FULL: every volume is still loaded whole from its file (the datasets cache all of them), then cut to its
# central 32^3, so the steps and the validation cost what CI's do: what is read does not depend on it
_CROP = "[{_target_: CenterSpatialCropd, keys: [image, label], roi_size: [32, 32, 32]}]"
_CHAIN = "{_target_: hpc_runner.data.compose.chain, parts: [%s]}"
CHEAP = ["--train_transforms", _CHAIN % f'"@preprocessing", {_CROP}, "@augmentation"',
         "--val_transforms", _CHAIN % f'"@preprocessing", {_CROP}'] if FULL else []
LATENCY_MS = 0.1 if FULL else 1.0  # per read of the share; FULL's reads are 4 KB, so 1 ms costs it 15 minutes


def _dataset_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


@pytest.fixture(scope="module")
def share(tmp_path_factory):
    """The seed's kind of dataset in a backing folder, seen by every node through the counting slow share."""
    from hpc_runner.data.synthetic import ensure_synthetic_volumes

    base = tmp_path_factory.mktemp("staging")
    ensure_synthetic_volumes(base / "backing" / "ds", num_train=N_TRAIN, num_val=N_VAL, size=SIZE)
    with mounted(base / "backing", base / "share", latency_ms=LATENCY_MS, mbps=100.0) as mnt:
        small = sum(p.stat().st_size for p in (base / "backing" / "ds").iterdir() if p.stat().st_size <= 4096)
        yield {"base": base, "mnt": mnt, "ds": mnt / "ds", "bytes": _dataset_bytes(base / "backing" / "ds"),
               "hashed": small}  # the files small enough that each point hashes them to know the version


def _sweep(cli, share, name: str, *extra: str, cluster: str = "staging") -> tuple[Path, int]:
    before = read_bytes(share["mnt"])
    out = cli("sweep", "training", "--bundle", BUNDLE, "--cluster", cluster, "--output_dir", name,
              "--sweep", "seed=range(0,16)", "--pack", "4", *DATA, *CHEAP, "--dataset_dir", str(share["ds"]), *extra)
    assert out.returncode == 0, out.stdout + out.stderr
    done = cli("status", name, *WAIT, timeout=WAIT_S + 60)
    assert done.returncode == 0, done.stdout + done.stderr
    return cli.cwd / name, read_bytes(share["mnt"]) - before


def test_a_sweep_with_stage_reads_the_shared_folder_once_per_node_and_without_it_once_per_point(
        slurm_cluster, cli, share) -> None:
    stage = share["base"] / "stage"
    cli.write_profile("staging", "extends: testcluster\narray_parallelism: 16\n"
                      f"stage:\n  where: {stage}/{{node}}\n  read_slots: 2\n")
    staged_dir, staged_read = _sweep(cli, share, "staged", "--stage")
    size = share["bytes"]
    assert staged_read <= 2 * size + 16 * share["hashed"], (staged_read, size)  # + each point hashing small files
    nodes = {p.name for p in stage.iterdir()}
    assert 1 <= len(nodes) <= 2
    runs = sorted((staged_dir / "points").rglob("run.yaml"))  # base/run.yaml is the sweep's own, not a point's
    assert len(runs) == 16
    for run in runs:
        record = json.loads(json.dumps(__import__("yaml").safe_load(run.read_text())))
        assert record["data"]["staged"] is True
        assert record["data"]["ids"]["dataset_dir"]["read_from"].startswith(str(stage))
        assert (run.parent / "data_io.json").is_file()
    collected = cli("collect", str(staged_dir), "--quiet")  # collect has no --json: it writes its tables
    assert collected.returncode == 0, collected.stderr

    # a requeue (or a retry) of a point on either node finds the copy: nothing more is read
    before = read_bytes(share["mnt"])
    again = cli("run", "training", "--resume", str(runs[0].parent), "--stage", "--stage-dir", f"{stage}/node-a")
    assert again.returncode in (0, 2), again.stderr
    _, rerun_read = _sweep(cli, share, "staged-again", "--stage")
    assert rerun_read <= 16 * share["hashed"] + (read_bytes(share["mnt"]) - before - rerun_read)

    # a profile's stage: stages every job of it (docs/data-on-the-cluster.md): the plain sweep uses one without
    cli.write_profile("plain", "extends: testcluster\narray_parallelism: 16\n")
    _, plain_read = _sweep(cli, share, "in-place", cluster="plain")
    assert plain_read >= 12 * size, (plain_read, size)  # about 16x: every point reads every volume
    print(f"dataset {size} bytes ({size / 1e6:.1f} MB), staged on {len(nodes)} node(s); read from the share: "
          f"staged {staged_read} ({staged_read / size:.2f}x), rerun staged {rerun_read} ({rerun_read / size:.2f}x), "
          f"in place {plain_read} ({plain_read / size:.2f}x)")  # docs/data-on-the-cluster.md quotes it


def test_a_dataset_larger_than_the_profiles_node_scratch_is_refused_before_queueing(slurm_cluster, cli, share):
    cli.write_profile("tiny-scratch", "extends: testcluster\nstage:\n  where: /tmp/hpcr-stage-test\n"
                      "  node_gb: 0.000001\n")
    out = cli("sweep", "training", "--bundle", BUNDLE, "--cluster", "tiny-scratch", "--output_dir", "refused",
              "--sweep", "seed=0,1", *DATA, "--dataset_dir", str(share["ds"]), "--stage")
    assert out.returncode == 2 and "nothing was queued" in out.stderr, out.stderr
    assert cli.calls()["sbatch"] == 0 and not (cli.cwd / "refused").exists()

"""Sharded inference and evaluation: `submit inference --shards N`, a shard killed and resumed, `collect`."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from hpc_runner.sweep.shards import merge_cases, write_cases

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "bundles" / "synthetic_seg"
TEST_PROFILE = "testcluster"


def write_cases_csv(run_dir: Path, rows: list[str]) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "cases.csv").write_text("case,dice,hd95\n" + "".join(r + "\n" for r in rows))


def test_merge_cases_joins_the_shards_sorted_and_names_missing_and_repeated_cases(tmp_path):
    write_cases_csv(tmp_path / "p0", ["c02,0.9,2.0", "c00,0.8,"])
    write_cases_csv(tmp_path / "p1", ["c01,0.7,4.0", "c02,0.9,2.0"])
    merged = merge_cases([(0, tmp_path / "p0"), (1, tmp_path / "p1"), (2, tmp_path / "p2")])
    assert [(r["case"], r["shard"]) for r in merged.rows] == [("c00", "0"), ("c01", "1"), ("c02", "0"), ("c02", "1")]
    assert merged.missing == [(2, tmp_path / "p2")] and merged.repeated == [("c02", [0, 1])]
    assert merged.means() == pytest.approx({"dice": 0.825, "hd95": 8 / 3})  # the empty hd95 is left out
    csv_path, md_path = write_cases(merged, tmp_path)
    assert csv_path.read_text().splitlines()[0] == "case,shard,dice,hd95"
    assert "mean over cases: dice 0.825, hd95 2.667" in md_path.read_text()


def test_shards_need_the_shard_ids_and_nothing_is_queued(offline_cli):
    """train.yaml has no shard_index/num_shards: exit 2 naming the file and the ids, no sbatch, no sweep dir."""
    res = offline_cli("submit", "training", "--bundle", str(BUNDLE), "--shards", "4", "--cluster", "slurm",
                      "--output_dir", "out")
    assert res.returncode == 2, res.stderr
    assert "shard_index and num_shards" in res.stderr and "train.yaml" in res.stderr
    assert offline_cli.calls()["sbatch"] == 0 and not (offline_cli.cwd / "out").exists()


def make_inputs(folder: Path, count: int, size: int) -> Path:
    """``count`` noisy-sphere volumes of ``size``^3 as NIfTI files (labels beside them, for evaluation)."""
    import nibabel as nib
    from monai.data import create_test_image_3d

    (folder / "images").mkdir(parents=True)
    (folder / "labels").mkdir()
    rng = np.random.RandomState(7)
    for i in range(count):
        image, label = create_test_image_3d(size, size, size, num_objs=3, rad_max=size // 6, noise_max=0.3,
                                            random_state=rng)
        nib.save(nib.Nifti1Image(image.astype(np.float32), np.eye(4)), folder / "images" / f"case{i:03d}.nii.gz")
        nib.save(nib.Nifti1Image((label > 0).astype(np.uint8), np.eye(4)), folder / "labels" / f"case{i:03d}.nii.gz")
    return folder


def make_weights(path: Path) -> Path:
    """Random (seeded) weights of the example bundle's network, as its training run would save them."""
    import torch
    from monai.bundle import ConfigParser

    parser = ConfigParser()
    parser.read_config(BUNDLE / "configs" / "train.yaml")
    torch.manual_seed(3)
    net = parser.get_parsed_content("network_def")
    torch.save(net.state_dict(), path)
    return path


def input_args(data: Path, weights: Path) -> list[str]:
    return ["--images", str(data / "images"), "--ckpt", str(weights)]


def predictions(folder: Path) -> dict[str, np.ndarray]:
    import nibabel as nib

    return {p.name: np.asarray(nib.load(p).dataobj) for p in sorted(folder.glob("*.nii.gz"))}


def record(sweep: Path) -> dict:
    return json.loads((sweep / "sweep.yaml").read_text())


def manifest_lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.is_file() else 0


def wait_for(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not seen after {timeout} s")
        time.sleep(0.05)


def queue_empty(cluster, sweep: Path) -> bool:
    jobs = {p["job_id"].split("_")[0] for p in record(sweep)["points"] if p.get("job_id")}
    return not cluster.run("squeue", "-h", "-j", ",".join(jobs), "-o", "%i").stdout.strip() if jobs else True


@pytest.mark.slow
@pytest.mark.slurm
def test_four_shards_one_killed_then_resumed_give_every_output_once_equal_to_one_process(
    slurm_cluster, cli, tmp_path
):
    """24 volumes, 4 shards of 6 on the real SLURM; shard 1 is cancelled after its first outputs, one of
    them is truncated, `resume` runs it again: it names the damaged file, skips the complete ones, and
    every prediction exists once, voxel-equal to a single-process run.

    Shard 1 takes cases 1, 5, 9, ... (case i goes to shard i % 4); case009 is a named pipe while the shard
    first runs, so it stops there, after two outputs, however fast this machine is, and is cancelled."""
    import os

    data = make_inputs(tmp_path / "data", 24, 48)
    weights = make_weights(tmp_path / "model.pt")
    ref = cli("run", "inference", "--bundle", str(BUNDLE), *input_args(data, weights), "--cpus", "1",
              "--output_dir", str(tmp_path / "single"))
    assert ref.returncode == 0, ref.stderr[-3000:]
    expected = predictions(tmp_path / "single" / "predictions")
    assert len(expected) == 24

    blocker = data / "images" / "case009.nii.gz"
    blocker.rename(tmp_path / "case009.nii.gz")
    os.mkfifo(blocker)  # opening it for reading waits for a writer that never comes
    sweep = tmp_path / "sharded"
    sub = cli("submit", "inference", "--bundle", str(BUNDLE), "--shards", "4", "--cluster", TEST_PROFILE,
              *input_args(data, weights), "--output_dir", str(sweep))
    assert sub.returncode == 0, sub.stderr[-3000:]
    assert "4 shards checked" in sub.stdout and f"outputs:   {sweep.resolve() / 'predictions'}" in sub.stdout
    manifest = sweep / "predictions" / "manifest-001-of-004.jsonl"
    wait_for(lambda: manifest_lines(manifest) >= 2, 240, "two finished outputs of shard 1")
    job = record(sweep)["points"][1]["job_id"]
    slurm_cluster.run("scancel", job)
    wait_for(lambda: queue_empty(slurm_cluster, sweep), 300, "every shard's job leaving the queue")
    done_before = manifest_lines(manifest)
    assert done_before == 2, f"shard 1 was not stopped at case009: {done_before} of 6 outputs done"
    blocker.unlink()
    (tmp_path / "case009.nii.gz").rename(blocker)

    entries = [json.loads(line) for line in manifest.read_text().splitlines()]
    damaged = sweep / "predictions" / entries[0]["file"]
    damaged.write_bytes(damaged.read_bytes()[:100])  # a file the manifest says is complete, now truncated
    status = cli("status", str(sweep))
    assert "CANCELLED" in status.stdout, status.stdout

    res = cli("resume", str(sweep))
    assert res.returncode == 0, res.stderr[-3000:]
    wait_for(lambda: queue_empty(slurm_cluster, sweep), 300, "the resumed shard leaving the queue")
    log = (sweep / record(sweep)["points"][1]["dir"] / "log.txt").read_text()
    assert f"{damaged.name}: found 100 bytes" in log and "it is written again" in log, log[-3000:]
    assert f"{done_before - 1} skipped as already complete" in log, log[-3000:]

    got = predictions(sweep / "predictions")
    assert sorted(got) == sorted(expected)
    assert all(np.array_equal(got[name], expected[name]) for name in expected)
    leftovers = [p.name for p in (sweep / "predictions").iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []
    col = cli("collect", str(sweep), "--quiet")
    assert col.returncode == 0, col.stdout + col.stderr
    assert "24 cases from 4 of 4 shards" in col.stdout
    rows = (sweep / "cases.csv").read_text().splitlines()[1:]
    assert len(rows) == 24 and len({r.split(",")[0] for r in rows}) == 24


@pytest.mark.slow
def test_sharded_evaluation_here_merges_the_per_case_metrics_like_one_process(cli, tmp_path):
    """`submit evaluate --shards 3 --cluster local` runs the shards here; collect's table equals one run's."""
    data = make_inputs(tmp_path / "data", 6, 48)
    weights = make_weights(tmp_path / "model.pt")
    args = [*input_args(data, weights), "--labels", str(data / "labels"), "--cpus", "1"]
    one = cli("run", "evaluate", "--bundle", str(BUNDLE), *args, "--output_dir", str(tmp_path / "one"))
    assert one.returncode == 0, one.stderr[-3000:]
    sub = cli("submit", "evaluate", "--bundle", str(BUNDLE), "--shards", "3", "--cluster", "local", *args,
              "--output_dir", str(tmp_path / "sharded"))
    assert sub.returncode == 0, sub.stderr[-3000:]
    col = cli("collect", str(tmp_path / "sharded"), "--quiet")
    assert col.returncode == 0 and "6 cases from 3 of 3 shards" in col.stdout, col.stdout
    sharded = (tmp_path / "sharded" / "cases.csv").read_text().splitlines()[1:]
    merged = {r.split(",")[0]: r.split(",")[2:] for r in sharded}
    single = {r.split(",")[0]: r.split(",")[1:] for r in (tmp_path / "one" / "cases.csv").read_text().splitlines()[1:]}
    assert merged == single

"""``hpc-runner cache`` and ``config --cache-plan`` as a user runs them, with concurrent jobs on one cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hpc_runner.config.bundle_config import load_bundle_config
from hpc_runner.config.overrides import parse_cli_overrides
from hpc_runner.data.cache_plan import fill_caches
from hpc_runner.data.synthetic import ensure_synthetic_volumes

EXAMPLE = Path(__file__).resolve().parents[2] / "bundles" / "synthetic_seg"
TINY = ["--num_train", "8", "--num_val", "1", "--image_size", "16"]

# Each job waits at a barrier in `initialize` so all three fill the cache at the same moment, and a
# slow deterministic step makes every item take long enough for the jobs to meet on the same items.
HELPER = '''
import os, time
from pathlib import Path

def wait(folder, parties):
    Path(folder).mkdir(parents=True, exist_ok=True)
    (Path(folder) / str(os.getpid())).touch()
    deadline = time.monotonic() + 120
    while len(list(Path(folder).iterdir())) < parties:
        if time.monotonic() > deadline:
            raise TimeoutError("the other jobs did not start")
        time.sleep(0.01)

def slow(x):
    time.sleep(0.15)
    return x
'''

SLOW_PREFIX = """
barrier_dir: null
initialize:
  - _target_: hpc_runner.data.synthetic.ensure_synthetic_volumes
    dataset_dir: "@dataset_dir"
    num_train: "@num_train"
    num_val: "@num_val"
    size: "@image_size"
  - _target_: cache_barrier.wait
    folder: "@barrier_dir"
    parties: 3
preprocessing:
  - {_target_: LoadImaged, keys: [image, label], image_only: true}
  - {_target_: EnsureChannelFirstd, keys: [image, label]}
  - {_target_: Lambdad, keys: image, func: {_target_: cache_barrier.slow, _mode_: callable}}
  - {_target_: ScaleIntensityd, keys: image}
  - {_target_: EnsureTyped, keys: [image, label], track_meta: false}
"""


@pytest.mark.slow  # whole CLI runs or several processes: the full suite runs it
def test_concurrent_cache_jobs_share_one_folder_safely(tmp_path: Path, cli) -> None:
    (tmp_path / "helpers").mkdir()
    (tmp_path / "helpers" / "cache_barrier.py").write_text(HELPER)
    (tmp_path / "slow.yaml").write_text(SLOW_PREFIX)
    cache = tmp_path / "cache"
    # the data exists before the jobs start, as on a cluster (their initialize then only checks it)
    ensure_synthetic_volumes(tmp_path / "data", num_train=8, num_val=1, size=16)
    args = ["cache", "--json", "--config_file", f"{EXAMPLE / 'configs' / 'train.yaml'},{tmp_path / 'slow.yaml'}",
            "--meta_file", str(EXAMPLE / "configs" / "metadata.json"), "--dataset_dir", str(tmp_path / "data"),
            "--cache_dir", str(cache), "--barrier_dir", str(tmp_path / "barrier"), *TINY]
    env = {**cli.env, "PYTHONPATH": str(tmp_path / "helpers")}
    jobs = [
        subprocess.Popen([sys.executable, "-m", "hpc_runner", *args], cwd=tmp_path, text=True,
                         env={**env, "PYTHONHASHSEED": str(seed)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for seed in (1, 2, 3)  # the key must not depend on str hashing
    ]
    outs = [job.communicate(timeout=240) for job in jobs]
    for job, (_, err) in zip(jobs, outs):
        assert job.returncode == 0, err[-3000:]
    results = [{r["id"]: r for r in json.loads(out)} for out, _ in outs]
    train = [r["train_dataset"] for r in results]
    assert {r["folder"] for r in train} == {train[0]["folder"]}
    assert all(r["computed"] + r["reused"] == r["items"] == 8 for r in train)
    # the per-item lock: every item was computed by exactly one of the three jobs
    assert sum(r["computed"] for r in train) == 8, train

    folder = Path(train[0]["folder"])
    assert not list(cache.rglob("*.tmp")) and not list(cache.rglob(".*")) and not list(cache.rglob("*.lock"))
    files = sorted(folder.glob("*.pt"))
    assert len(files) == 9  # 8 train + 1 val: same transforms, one folder
    for f in files:
        item = torch.load(f, weights_only=True)
        assert item["image"].shape == (1, 16, 16, 16) and float(item["image"].max()) == 1.0

    # a sweep point with the same overrides, in another process (this one), only reads
    sys.path.insert(0, str(tmp_path / "helpers"))
    try:
        cfg = load_bundle_config(
            config_files=[EXAMPLE / "configs" / "train.yaml", tmp_path / "slow.yaml"],
            meta_file=EXAMPLE / "configs" / "metadata.json",
            cli_overrides=parse_cli_overrides(args[args.index("--dataset_dir"):]),
        )
        again = {r.id: r for r in fill_caches(cfg, initialize=False)}
    finally:
        sys.path.remove(str(tmp_path / "helpers"))
    assert (again["train_dataset"].computed, again["train_dataset"].reused) == (0, 8)
    assert again["train_dataset"].folder == str(folder)


def test_config_cache_plan_measures_the_example_bundle(tmp_path: Path, cli) -> None:
    res = cli("config", "--bundle", str(EXAMPLE), "--cache-plan", "--dataset_dir", str(tmp_path / "data"),
              "--num_train", "4", "--num_val", "1", "--image_size", "16", cwd=tmp_path, timeout=240)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "measured on the data" in out and "a few seconds" in res.stderr
    train = out[out.index("train_dataset:"):out.index("val_dataset:")]
    assert "cached in memory" in train and "4 items, 4 cached" in train
    assert "cached once:  LoadImaged" in train and "EnsureTyped" in train
    assert "every epoch:  RandFlipd" in train and "RandRotate90d" in train and "RandFlipd is random" in train
    assert "memory:       128.0 KiB (32.0 KiB per item)" in train
    assert "cache fill" in train and "one uncached epoch" in train
    assert "warnings: none" in out
    assert os.path.isfile(tmp_path / "data" / "img000.nii.gz")  # initialize ran, as a run would


@pytest.mark.slow
def test_example_bundle_trains_from_the_persistent_cache(tmp_path: Path, cli) -> None:
    common = ["--bundle", str(EXAMPLE), "--dataset_dir", str(tmp_path / "data"), "--cache_dir", str(tmp_path / "c")]
    filled = cli("cache", *common, cwd=tmp_path, timeout=600)
    assert filled.returncode == 0, filled.stderr
    assert "train_dataset: 16 items" in filled.stdout and "16 computed" in filled.stdout
    # 4 of the example's 10 epochs: past 0.9 already (0.921), so a cache that fed it wrong items would show
    res = cli("run", *common, "--output_dir", str(tmp_path / "run"), "--max_epochs", "4", cwd=tmp_path, timeout=1800)
    assert res.returncode == 0, res.stderr[-3000:]
    log = (tmp_path / "run" / "log.txt").read_text()
    assert "16 items, 0 computed, 16 already there" in log and "4 items, 0 computed, 4 already there" in log
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["val_dice"] >= 0.9

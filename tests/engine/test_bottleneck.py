"""The bottleneck report names the slowest transforms and gives the advice that follows from given timings."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from monai.networks.nets import UNet
from monai.transforms import RandFlipd, Resized, ScaleIntensityd

from hpc_runner.data import ThreadDataLoader
from hpc_runner.data.cached import CachedDataset
from hpc_runner.engine import Trainer
from hpc_runner.pages.bottleneck import analyse

COMPUTE_BOUND = ([0.1] + [0.001] * 20, [0.1] * 21)
DATA_BOUND = ([0.1] + [0.2] * 20, [0.1] * 21)


def row(name: str, stage: str, kind: str, total_s: float, calls: int = 100, threads: tuple = ("MainThread",)) -> dict:
    return {"name": name, "calls": calls, "total_s": total_s, "mean_ms": 1000 * total_s / calls, "stage": stage,
            "kind": kind, "threads": list(threads)}


def test_the_three_slowest_transforms_are_named_with_their_share() -> None:
    rows = [row("LoadImaged", "cached", "deterministic", 4.0), row("RandFlipd", "every epoch", "random", 1.0),
            row("EnsureTyped", "every epoch", "deterministic", 0.5), row("ScaleIntensityd", "cached",
                                                                         "deterministic", 0.1)]
    report = analyse(*COMPUTE_BOUND, transforms=rows)
    assert [r["name"] for r in report.slowest_transforms] == ["LoadImaged", "RandFlipd", "EnsureTyped"]
    assert report.slowest_transforms[0]["share"] == round(4.0 / 5.6, 4)
    assert report.transforms_line().startswith("slowest transforms: LoadImaged 4.00 s (cached, 100 calls")
    assert report.to_dict()["slowest_transforms"][1]["name"] == "RandFlipd"


def test_a_deterministic_transform_every_epoch_is_told_to_move_before_the_cache() -> None:
    rows = [row("NormalizeIntensityd", "every epoch", "deterministic", 3.0), row("RandFlipd", "every epoch",
                                                                                "random", 0.2)]
    (tip,) = analyse(*COMPUTE_BOUND, transforms=rows).advice
    assert tip.startswith("NormalizeIntensityd is deterministic but runs every epoch")
    assert "move it before the first random transform, so the cache covers it" in tip


def test_deterministic_resampling_every_epoch_is_told_to_resample_once_before_the_cache() -> None:
    for name in ("Spacingd", "Orientationd", "Resized"):
        advice = analyse(*COMPUTE_BOUND, transforms=[row(name, "every epoch", "deterministic", 2.0)]).advice
        assert len(advice) == 1 and "resample once before the cache" in advice[0], advice


def test_the_same_resampling_in_the_cache_gets_no_advice() -> None:
    rows = [row("Spacingd", "cached", "deterministic", 20.0), row("RandFlipd", "every epoch", "random", 0.1)]
    assert analyse(*COMPUTE_BOUND, transforms=rows).advice == []


def test_an_expensive_random_transform_is_made_cheaper_or_moved_to_the_gpu_when_the_step_waits() -> None:
    rows = [row("RandGaussianSmoothd", "every epoch", "random", 3.0), row("RandAffined", "every epoch", "random", 2.0)]
    advice = analyse(*DATA_BOUND, num_workers=1, cpus=8, transforms=rows).advice
    assert any(a.startswith("RandGaussianSmoothd is the costliest random transform") and "GPU" in a for a in advice)
    assert any(a.startswith("RandAffined is an expensive random resampling") and "Spacingd/Resized" in a
               for a in advice)
    # hidden behind compute and small against the steps: no advice to change it
    quiet = analyse(*COMPUTE_BOUND, transforms=[row("RandGaussianSmoothd", "every epoch", "random", 0.3)])
    assert quiet.advice == []


def test_data_wait_asks_for_more_workers_within_the_cpu_budget() -> None:
    rows = [row("RandFlipd", "every epoch", "random", 3.0, threads=("hpc-runner-data-producer",))]
    first = analyse(*DATA_BOUND, num_workers=0, cpus=4, transforms=rows).advice[0]
    assert first.startswith("raise the loader's num_workers to 3 with use_thread_workers: true (this job has 4 CPUs")
    assert "ran on hpc-runner-data-producer" in first
    full = analyse(*DATA_BOUND, num_workers=3, cpus=4, transforms=rows).advice[0]
    assert "ask for more CPUs" in full
    assert not any("num_workers" in a for a in analyse(*COMPUTE_BOUND, num_workers=0, cpus=4, transforms=rows).advice)


def test_a_plain_function_in_the_chain_is_told_to_become_a_monai_transform() -> None:
    (tip,) = analyse(*COMPUTE_BOUND, transforms=[row("crop_fn", "every epoch", "callable", 1.0)]).advice
    assert "is not a MONAI Transform, so the cache stops before it" in tip


def test_a_real_run_with_resampling_after_the_random_flip_is_told_to_resample_before_the_cache(
    tmp_path: Path,
) -> None:
    """A real Trainer run: Resized sits after RandFlipd, so it resamples every item every epoch."""
    rng = np.random.default_rng(0)
    items = [{"image": rng.random((1, 24, 24), dtype=np.float32), "label": (rng.random((1, 24, 24)) > 0.5)
              .astype(np.float32)} for _ in range(8)]
    chain = [ScaleIntensityd(keys="image"), RandFlipd(keys=["image", "label"], prob=0.5, spatial_axis=0),
             Resized(keys=["image", "label"], spatial_size=(96, 96), mode=("bilinear", "nearest"))]
    loader = ThreadDataLoader(CachedDataset(items, chain, progress=False), batch_size=4, seed=0)
    net = UNet(spatial_dims=2, in_channels=1, out_channels=1, channels=(4, 8), strides=(2,), num_res_units=0)
    summary = Trainer(net, torch.optim.SGD(net.parameters(), lr=0.01), torch.nn.MSELoss(), loader, max_epochs=2,
                      device="cpu", seed=0, output_dir=tmp_path, progress=False).run()
    written = json.loads((tmp_path / "summary.json").read_text())
    names = {(r["name"], r["stage"]): r["calls"] for r in written["transforms"]}
    assert names == {("ScaleIntensityd", "cached"): 8, ("RandFlipd", "every epoch"): 16,
                     ("Resized", "every epoch"): 16}
    resized = next(r for r in summary["transforms"] if r["name"] == "Resized")
    assert resized["kind"] == "deterministic" and resized["threads"] == ["hpc-runner-data-producer"]
    assert "Resized" in {r["name"] for r in written["bottleneck"]["slowest_transforms"]}
    assert any(a.startswith("Resized resamples every epoch") for a in written["bottleneck"]["advice"])


def test_advice_to_move_a_transform_to_the_gpu_names_the_ranks_own_gpu_and_thread_workers() -> None:
    rows = [row("RandAffined", "every epoch", "random", 3.0)]
    advice = " ".join(analyse(*DATA_BOUND, transforms=rows, device="cuda:1").advice)
    assert 'EnsureTyped(device="cuda:1")' in advice and "threads" in advice
    assert "device=cuda " not in advice and "device=cuda)" not in advice  # GPU 0 for every rank in a thread
    advice = " ".join(analyse(*DATA_BOUND, transforms=rows, device="cpu").advice)
    assert "cuda:<this rank's GPU>" in advice

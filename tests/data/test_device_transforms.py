"""gpu_transforms: the random transforms run after the device copy with the seeds the loader threads use.

The device is torch.device("cpu") here (no GPU in these tests): the tail runs on the batch after the
"copy", which is the code path a CUDA run takes; scripts/gpu-session.sh repeats the comparison on CUDA.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from monai.bundle import ConfigParser
from monai.transforms import (
    EnsureChannelFirstd,
    RandAffined,
    RandBiasFieldd,
    RandFlipd,
    RandGaussianNoised,
    RandRotate90d,
    RandSpatialCropd,
    ScaleIntensityd,
)

from hpc_runner.data import ThreadDataLoader
from hpc_runner.data.cached import CachedDataset
from hpc_runner.data.compose import chain
from hpc_runner.data.device_transforms import SEEDS_KEY, device_point
from tests.data.conftest import make_volumes

KEYS = ("image", "label")
BUNDLE_TRAIN = Path(__file__).resolve().parents[2] / "bundles" / "synthetic_seg" / "configs" / "train.yaml"
CPU = torch.device("cpu")


def bundle_augmentation() -> list:
    """The example bundle's random transforms, built from its train.yaml."""
    config = yaml.safe_load(BUNDLE_TRAIN.read_text())
    return ConfigParser({"augmentation": config["augmentation"]}).get_parsed_content("augmentation")


def prefix() -> list:
    return [EnsureChannelFirstd(KEYS, channel_dim="no_channel"), ScaleIntensityd("image")]


TAILS = {
    "bundle": bundle_augmentation,
    "noise-affine-crop": lambda: [
        RandFlipd(KEYS, prob=0.5, spatial_axis=0),
        RandRotate90d(KEYS, prob=0.5),
        RandGaussianNoised("image", prob=0.8, std=0.2),
        RandAffined(KEYS, prob=0.9, rotate_range=(0.3, 0.3, 0.3), scale_range=(0.1, 0.1, 0.1), padding_mode="zeros"),
        RandSpatialCropd(KEYS, (8, 8, 8), random_size=False),
    ],
}


def loader(tail: list, *, workers: int = 0, batch_size: int | None = 2, seed: int = 7) -> ThreadDataLoader:
    """A ThreadDataLoader over a cached dataset (the bundle's CachedDataset and chain) of small volumes."""
    dataset = CachedDataset(make_volumes(n=6, size=12), chain([prefix(), tail]), progress=False)
    return ThreadDataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=workers,
                            use_thread_workers=workers > 0, seed=seed)


def cpu_epoch(dl: ThreadDataLoader, epoch: int) -> list:
    dl.set_epoch(epoch)
    return list(dl)


def device_epoch(dl: ThreadDataLoader, tail, epoch: int, start: int = 0) -> list:
    dl.set_epoch(epoch)
    return [tail.to_device(b, CPU) for b in dl.iter_from(start)]


def assert_same_batches(a: list, b: list) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert set(x) == set(y) == set(KEYS)
        for k in KEYS:
            assert torch.equal(torch.as_tensor(x[k]), torch.as_tensor(y[k])), k


@pytest.mark.parametrize("tail_name", sorted(TAILS))
def test_device_tail_augments_each_item_as_the_loader_threads_do_and_differs_across_epochs(tail_name: str):
    make = TAILS[tail_name]
    reference = loader(make())
    deferred = loader(make(), workers=2)  # real worker threads for the loader's part
    tail = deferred.defer_random_transforms()
    assert tail.on_device and not tail.on_loader
    for epoch in (0, 1):
        assert_same_batches(device_epoch(deferred, tail, epoch), cpu_epoch(reference, epoch))
    first, second = device_epoch(deferred, tail, 0), device_epoch(deferred, tail, 1)
    assert any(not torch.equal(x["image"], y["image"]) for x, y in zip(first, second, strict=True))


def test_a_resumed_epoch_draws_the_augmentation_the_first_run_drew():
    dl = loader(TAILS["noise-affine-crop"]())
    tail = dl.defer_random_transforms()
    whole = device_epoch(dl, tail, 3)
    assert_same_batches(device_epoch(dl, tail, 3), whole)  # the epoch drawn again
    assert_same_batches(device_epoch(dl, tail, 3, start=1), whole[1:])  # resumed at batch 1, 0 never made


def test_the_loader_carries_seeds_and_stops_before_the_random_transforms():
    dl = loader(TAILS["bundle"]())
    dl.defer_random_transforms()
    batch = next(iter(dl))
    assert isinstance(batch[SEEDS_KEY], list) and all(isinstance(s, str) for s in batch[SEEDS_KEY])
    cached = dl.dataset.dataset._cache  # the loader's part is the cached item itself, copied
    assert any(torch.equal(batch["image"][0], torch.as_tensor(c["image"])) for c in cached)


def test_a_transform_that_is_not_torch_backed_stays_in_the_loader_with_what_comes_before_it():
    def tail() -> list:
        return [
            RandFlipd(KEYS, prob=0.5, spatial_axis=0),
            RandBiasFieldd("image", prob=1.0, coeff_range=(0.2, 0.3)),  # numpy only
            RandRotate90d(KEYS, prob=0.5),
            RandGaussianNoised("image", prob=1.0, std=0.1),
        ]

    reference, deferred = loader(tail()), loader(tail())
    t = deferred.defer_random_transforms()
    assert t.on_loader == ["RandFlipd", "RandBiasFieldd"]
    assert t.on_device == ["RandRotate90d", "RandGaussianNoised"]
    assert "RandBiasFieldd" in t.line(CPU) and "stay in the loader" in t.line(CPU)
    assert_same_batches(device_epoch(deferred, t, 2), cpu_epoch(reference, 2))


def test_a_plain_function_after_the_random_transforms_moves_the_device_point_past_it():
    def double(d: dict) -> dict:
        return {**d, "image": d["image"] * 2}

    composed = chain([prefix(), [RandFlipd(KEYS, prob=0.5), double]])
    assert device_point(composed) == len(composed.transforms)  # nothing left for the device


def test_unbatched_items_are_augmented_one_by_one():
    make = TAILS["noise-affine-crop"]
    reference, deferred = loader(make(), batch_size=None), loader(make(), batch_size=None)
    tail = deferred.defer_random_transforms()
    got, want = device_epoch(deferred, tail, 1), cpu_epoch(reference, 1)
    assert_same_batches(got, want)
    assert not np.shares_memory(got[0]["image"].numpy(), deferred.dataset.dataset._cache[0]["image"].numpy())


def test_worker_processes_defer_as_worker_threads_do():
    make = TAILS["bundle"]
    reference = loader(make())
    deferred = CachedDataset(make_volumes(n=6, size=12), chain([prefix(), make()]), progress=False)
    dl = ThreadDataLoader(deferred, batch_size=2, shuffle=True, num_workers=1, use_thread_workers=False, seed=7)
    tail = dl.defer_random_transforms()
    assert_same_batches(device_epoch(dl, tail, 1), cpu_epoch(reference, 1))

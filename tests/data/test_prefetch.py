"""DevicePrefetcher: CPU passthrough keeps objects and MetaTensor meta; the CUDA path on a GPU."""

from __future__ import annotations

import threading
from collections import namedtuple

import pytest
import torch
from monai.data import MetaTensor

from hpc_runner.data import DevicePrefetcher, ThreadDataLoader, map_tensors, move_to_device, prefetch_to_device

Pair = namedtuple("Pair", "a b")


def batch(i: int) -> dict:
    img = MetaTensor(torch.full((2, 1, 4, 4), float(i)), meta={"filename_or_obj": f"img{i}.nii"})
    img.is_batch = True
    nested = [Pair(torch.ones(1), "x"), {"k": (torch.ones(2),)}]
    return {"image": img, "label": torch.zeros(2, 1, 4, 4), "nested": nested}


def test_cpu_is_a_passthrough_without_threads():
    batches = [batch(i) for i in range(3)]
    before = threading.active_count()
    pf = DevicePrefetcher(batches, "cpu")
    it = iter(pf)
    assert threading.active_count() == before
    out = list(it)
    assert all(o is b for o, b in zip(out, batches))  # the very same objects
    assert out[1]["image"].meta["filename_or_obj"] == "img1.nii"
    assert len(pf) == 3


def test_cpu_prefetcher_forwards_loader_api():
    loader = ThreadDataLoader([{"image": torch.ones(1)} for _ in range(4)], batch_size=2, seed=0)
    pf = DevicePrefetcher(loader, torch.device("cpu"))
    pf.set_epoch(3)
    assert loader.epoch == 3 and pf.batch_size == 2 and pf.dataset is loader.dataset and len(pf) == 2
    assert len(list(pf)) == 2


def test_map_tensors_keeps_structure_and_meta():
    b = batch(1)
    out = map_tensors(lambda t: t * 2, b)
    assert isinstance(out["image"], MetaTensor)
    assert out["image"].meta["filename_or_obj"] == "img1.nii" and out["image"].is_batch
    assert torch.equal(out["image"].as_tensor(), torch.full((2, 1, 4, 4), 2.0))
    assert isinstance(out["nested"][0], Pair) and out["nested"][0].b == "x"
    assert torch.equal(out["nested"][1]["k"][0], torch.full((2,), 2.0))
    moved = move_to_device(b, "cpu")
    assert moved["image"].meta == b["image"].meta


@pytest.mark.cuda
def test_cuda_prefetch_moves_batches_and_keeps_meta():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    batches = [batch(i) for i in range(5)]
    out = []
    for b in prefetch_to_device(batches, "cuda"):
        assert b["image"].device.type == "cuda" and b["label"].device.type == "cuda"
        assert b["nested"][1]["k"][0].device.type == "cuda"
        assert isinstance(b["image"], MetaTensor) and b["image"].is_batch
        out.append((b["image"].meta["filename_or_obj"], b["image"].sum().item()))
    assert out == [(f"img{i}.nii", 32.0 * i) for i in range(5)]


@pytest.mark.cuda
def test_cuda_prefetch_from_thread_loader_with_pinning():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    data = [{"image": torch.full((1, 64, 64), float(i)), "label": torch.zeros(1, 64, 64)} for i in range(12)]
    loader = ThreadDataLoader(data, batch_size=4, seed=0, num_workers=2, use_thread_workers=True)
    sums = []
    for b in DevicePrefetcher(loader, "cuda:0"):
        y = (b["image"] * 2).sum()  # a step on the compute stream reading the prefetched batch
        sums.append(y.item())
    assert sums == [2 * 64 * 64 * sum(range(k, k + 4)) for k in (0, 4, 8)]


@pytest.mark.cuda
def test_cuda_prefetch_error_after_last_good_batch():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")

    def src():
        yield {"x": torch.ones(2)}
        raise KeyError("broken")

    it = prefetch_to_device(src(), "cuda")
    assert next(it)["x"].device.type == "cuda"  # the good batch is not lost to the prefetch
    with pytest.raises(KeyError):
        next(it)


def test_moving_a_batch_shares_its_metatensor_meta_instead_of_copying_it():
    b = batch(2)
    moved = map_tensors(lambda t: t.clone(), b)  # a new tensor, as a copy to another device makes
    assert moved["image"] is not b["image"] and isinstance(moved["image"], MetaTensor)
    assert moved["image"].meta is b["image"].meta, "the meta dict is shared, not copied per batch"
    again = move_to_device(moved, "cpu")  # the trainer's pass over a batch already on its device
    assert again["image"] is moved["image"], "a tensor already there is handed back as it is"


def test_a_repeated_batch_is_copied_to_the_device_once():
    loader = ThreadDataLoader([{"image": torch.full((3,), float(i))} for i in range(4)], batch_size=2, seed=0,
                              repeats=3)
    out = list(DevicePrefetcher(loader, "meta"))  # the meta device: a real copy target without a GPU
    assert len(out) == 6 and all(b["image"].device.type == "meta" for b in out)
    assert out[0] is out[1] is out[2] and out[3] is out[4] is out[5], "one device copy per loaded batch"
    assert out[2] is not out[3]


def test_batch_n_is_handed_back_before_the_loader_has_made_batch_n_plus_1():
    made_second = threading.Event()
    release = threading.Event()

    def slow_loader():
        yield {"x": torch.ones(2)}
        release.wait(10)  # the loader is still working on batch 1
        made_second.set()
        yield {"x": torch.zeros(2)}

    it = iter(DevicePrefetcher(slow_loader(), "meta"))
    first = next(it)
    assert first["x"].device.type == "meta" and not made_second.is_set(), "batch 0 did not wait for batch 1"
    release.set()
    assert next(it)["x"].shape == (2,) and made_second.is_set()
    with pytest.raises(StopIteration):
        next(it)


def test_a_loader_error_comes_after_the_last_good_batch():
    def broken():
        yield {"x": torch.ones(2)}
        raise KeyError("broken")

    it = iter(DevicePrefetcher(broken(), "meta"))
    assert next(it)["x"].device.type == "meta"  # the good batch is not lost
    with pytest.raises(KeyError):
        next(it)

"""ThreadDataLoader on real MONAI datasets: determinism, epochs, resume, errors, cleanup, drop-in use."""

from __future__ import annotations

import gc
import multiprocessing
import threading

import numpy as np
import pytest
import torch
from monai.bundle import ConfigParser
from monai.data import CacheDataset, Dataset, MetaTensor

from hpc_runner.data import DataItemError, ThreadDataLoader, available_cpus, default_num_workers
from hpc_runner.data.loader import SupersededIteration


def epoch_batches(loader, epoch: int) -> list[dict]:
    loader.set_epoch(epoch)
    return [{k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in b.items()} for b in loader]


def assert_same(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert torch.equal(x["image"], y["image"]) and torch.equal(x["label"], y["label"])


MODES = {
    "inline": {"num_workers": 0, "prefetch": True},
    "inline-on-demand": {"num_workers": 0, "prefetch": False},
    "1-thread": {"num_workers": 1, "use_thread_workers": True},
    "4-threads": {"num_workers": 4, "use_thread_workers": True, "prefetch": True},
    "4-threads-on-demand": {"num_workers": 4, "use_thread_workers": True, "prefetch": False},
}
PROCESS_MODES = {
    "2-processes": {"num_workers": 2},
    "2-persistent-processes": {"num_workers": 2, "persistent_workers": True},
}
CLEANUP_MODES = ["inline", "inline-on-demand", "4-threads", "4-threads-on-demand", *PROCESS_MODES]


def mode_kwargs(mode: str) -> dict:
    return MODES.get(mode) or PROCESS_MODES[mode]


def our_processes() -> set[int]:
    """Live worker processes of this test process (multiprocessing children; reaps finished ones)."""
    return {p.pid for p in multiprocessing.active_children()}


@pytest.fixture
def quick_process_idle(monkeypatch):
    """A held, unread process iterator lets its workers go after 0.3 s instead of 30 s."""
    from hpc_runner.data import loader as loader_module

    monkeypatch.setattr(loader_module, "PROCESS_IDLE_EXIT_S", 0.3)


def make_loader(ds, **kw) -> ThreadDataLoader:
    kw.setdefault("batch_size", 3)
    kw.setdefault("shuffle", True)
    kw.setdefault("seed", 7)
    return ThreadDataLoader(ds, **kw)


def test_identical_batches_for_0_1_4_thread_workers(cache_dataset: CacheDataset):
    runs = {}
    for name, kw in MODES.items():
        loader = make_loader(cache_dataset, **kw)
        runs[name] = [epoch_batches(loader, 0), epoch_batches(loader, 1)]
    for name in MODES:
        for epoch in (0, 1):
            assert_same(runs["inline"][epoch], runs[name][epoch])
    first = runs["inline"]
    assert isinstance(first[0][0]["image"], MetaTensor)
    assert first[0][0]["image"].shape == (3, 1, 8, 8, 8)
    # The random suffix really is random across epochs and items.
    assert not torch.equal(first[0][0]["image"], first[1][0]["image"])


def test_identical_batches_with_worker_processes(cache_dataset: CacheDataset):
    ref = epoch_batches(make_loader(cache_dataset), 1)
    procs = epoch_batches(make_loader(cache_dataset, num_workers=2), 1)
    assert_same(ref, procs)


def test_plain_dataset_same_for_any_thread_count():
    from monai.transforms import Compose, RandGaussianNoised, ScaleIntensityd

    data = [{"image": np.full((1, 5, 5), i, np.float32), "label": np.zeros((1, 5, 5), np.float32)} for i in range(9)]
    ds = Dataset(data, Compose([ScaleIntensityd("image"), RandGaussianNoised("image", prob=1.0)]))
    a = epoch_batches(make_loader(ds), 3)
    b = epoch_batches(make_loader(ds, num_workers=4, use_thread_workers=True), 3)
    assert_same(a, b)


def test_same_epoch_reproduces_and_shuffle_depends_on_epoch(cache_dataset: CacheDataset):
    loader = make_loader(cache_dataset, num_workers=2, use_thread_workers=True)
    assert_same(epoch_batches(loader, 4), epoch_batches(loader, 4))
    orders = []
    for epoch in range(3):
        loader.set_epoch(epoch)
        orders.append(list(loader.sampler))
    assert sorted(orders[0]) == list(range(len(cache_dataset)))
    assert orders[0] != orders[1] or orders[1] != orders[2]


def test_iterating_again_without_set_epoch_moves_to_next_epoch(cache_dataset: CacheDataset):
    loader = make_loader(cache_dataset)
    loader.set_epoch(0)
    e0 = [b["image"].clone() for b in loader]
    e1 = [b["image"].clone() for b in loader]  # no set_epoch: the next epoch, like a DataLoader
    assert loader.epoch == 2
    assert_same([{"image": x, "label": x} for x in e1], [{"image": b["image"], "label": b["image"]}
                                                          for b in epoch_batches(make_loader(cache_dataset), 1)])
    assert not all(torch.equal(a, b) for a, b in zip(e0, e1))


@pytest.mark.parametrize("mode", list(MODES))
def test_resume_mid_epoch_matches_full_epoch(cache_dataset: CacheDataset, mode: str):
    loader = make_loader(cache_dataset, **MODES[mode])
    full = epoch_batches(loader, 2)
    # What the trainer does: re-run the epoch and discard the first k batches.
    loader.set_epoch(2)
    discarded = [b for i, b in enumerate(loader) if i >= 2]
    assert_same(full[2:], discarded)
    # The cheap way: skip without computing the skipped batches.
    loader.set_epoch(2)
    assert_same(full[2:], list(loader.iter_from(2)))
    loader.set_epoch(2)
    loader.skip_batches(3)
    assert_same(full[3:], list(loader))
    loader.set_epoch(2)
    assert_same(full, list(loader))  # the skip applied once


def test_resume_with_repeats_counts_yielded_batches(cache_dataset: CacheDataset):
    loader = make_loader(cache_dataset, repeats=2)
    full = epoch_batches(loader, 0)
    assert len(full) == 2 * len(loader)
    loader.set_epoch(0)
    assert_same(full[3:], list(loader.iter_from(3)))


def test_skipped_batches_are_not_computed():
    calls: list[int] = []

    class Counting(torch.utils.data.Dataset):
        def __len__(self):
            return 20

        def __getitem__(self, i):
            calls.append(i)
            return {"image": torch.full((1, 2), float(i)), "label": torch.zeros(1, 2)}

    loader = ThreadDataLoader(Counting(), batch_size=4, seed=0)
    out = list(loader.iter_from(3))
    assert len(out) == 2 and sorted(calls) == list(range(12, 20))


def test_torch_dataloader_attributes_and_kwargs(cache_dataset: CacheDataset):
    loader = ThreadDataLoader(cache_dataset, batch_size=4, drop_last=True, num_workers=2, use_thread_workers=True)
    assert loader.dataset is cache_dataset and loader.batch_size == 4 and len(loader) == 2
    assert loader.num_workers == 2
    assert len(list(loader)) == 2
    sampler = torch.utils.data.SequentialSampler(range(5))
    loader = ThreadDataLoader(cache_dataset, batch_size=2, sampler=sampler, collate_fn=lambda items: len(items))
    assert list(loader) == [2, 2, 1]
    unbatched = ThreadDataLoader(list(range(4)), batch_size=None)
    assert [int(x) for x in unbatched] == [0, 1, 2, 3]
    g = torch.Generator().manual_seed(5)
    assert ThreadDataLoader(cache_dataset, generator=g).seed == 5


def test_num_workers_none_uses_default(monkeypatch, cache_dataset: CacheDataset):
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "3")
    loader = ThreadDataLoader(cache_dataset, num_workers=None, use_thread_workers=True)
    # the CPUs this job may use less one for the training loop: never all of them, never torch's 0
    assert loader.num_workers == default_num_workers() == max(1, available_cpus() - 1)


def test_bundle_target_instantiates():
    config = {
        "data": [{"image": np.ones((1, 4, 4), np.float32)} for _ in range(6)],
        "ds": {"_target_": "monai.data.Dataset", "data": "@data"},
        "loader": {
            "_target_": "hpc_runner.data.ThreadDataLoader",
            "dataset": "@ds",
            "batch_size": 2,
            "num_workers": 2,
            "use_thread_workers": True,
            "buffer_size": 2,
            "buffer_timeout": 0.01,
            "repeats": 1,
        },
    }
    loader = ConfigParser(config).get_parsed_content("loader")
    assert isinstance(loader, ThreadDataLoader)
    assert [b["image"].shape[0] for b in loader] == [2, 2, 2]


@pytest.mark.parametrize("mode", ["inline", "4-threads", "2-processes"])
def test_item_error_names_index_and_transform(mode: str):
    from monai.transforms import Compose, ScaleIntensityd

    data = [{"image": np.ones((1, 3, 3), np.float32)} for _ in range(8)]
    data[5] = {"img": np.ones((1, 3, 3), np.float32)}
    ds = Dataset(data, Compose([ScaleIntensityd("image")]))
    kw = MODES.get(mode, {"num_workers": 2})
    loader = ThreadDataLoader(ds, batch_size=2, **kw)
    seen = 0
    with pytest.raises(DataItemError) as info:
        for _ in loader:
            seen += 1
    assert seen == 2  # batches 0 and 1, then the error: never a silently short epoch
    msg = str(info.value)
    assert "item 5" in msg and "ScaleIntensityd" in msg and "KeyError" in msg
    if mode != "2-processes":  # torch rebuilds the error from its text in the parent process
        assert info.value.index == 5


@pytest.mark.parametrize("mode", CLEANUP_MODES)
def test_break_leaves_no_thread_or_process_while_iterator_held(
    cache_dataset, mode, thread_baseline, wait_until, our_threads, quick_process_idle
):
    loader = make_loader(cache_dataset, batch_size=1, **mode_kwargs(mode))
    full = epoch_batches(make_loader(cache_dataset, batch_size=1), 0)
    processes_before = our_processes()
    loader.set_epoch(0)
    it = iter(loader)
    for i, _ in enumerate(it):
        if i == 1:
            break
    persistent = "persistent" in mode
    if persistent:  # persistent workers (and their queues' feeder threads) belong to the loader
        wait_until(lambda: not our_threads(), timeout=10)
    else:
        wait_until(lambda: threading.active_count() <= thread_baseline, timeout=10)
    if mode in PROCESS_MODES and not persistent:
        wait_until(lambda: our_processes() <= processes_before, timeout=20)
    # The held iterator still works: workers start again at the batch after the break.
    assert_same(full[2:3], [next(it)])
    it.close()
    if persistent:
        assert len(our_processes() - processes_before) == 2


def test_held_iteration_of_persistent_workers_does_not_block_the_next_epoch(cache_dataset, wait_until):
    loader = make_loader(cache_dataset, batch_size=2, num_workers=2, persistent_workers=True)
    old = iter(loader)
    next(old)  # then abandoned, still referenced; its producer may be mid-batch
    got: list[int] = []
    epoch = threading.Thread(target=lambda: got.append(len(epoch_batches(loader, 1))), daemon=True)
    epoch.start()
    epoch.join(60)
    assert got == [len(loader)], "the next epoch waited for the abandoned iteration"
    # the abandoned one never hands out batches the workers made for another epoch
    with pytest.raises(SupersededIteration, match="newer one"):
        list(old)
    old = loader = None
    gc.collect()  # its persistent workers stop now (a stall here was a reference cycle through the error)


@pytest.mark.parametrize("mode", CLEANUP_MODES)
def test_exception_in_step_leaves_no_thread_or_process(
    cache_dataset, mode, thread_baseline, wait_until, our_threads, quick_process_idle
):
    loader = make_loader(cache_dataset, batch_size=1, **mode_kwargs(mode))
    processes_before = our_processes()
    it = iter(loader)
    with pytest.raises(RuntimeError, match="step"):
        for _ in it:
            raise RuntimeError("step exploded")
    if "persistent" in mode:
        wait_until(lambda: not our_threads(), timeout=10)
    else:
        wait_until(lambda: threading.active_count() <= thread_baseline, timeout=10)
    if mode in PROCESS_MODES and "persistent" not in mode:
        wait_until(lambda: our_processes() <= processes_before, timeout=20)
    # The next epoch starts clean after the abandoned one.
    loader.set_epoch(0)
    assert len(list(loader)) == len(cache_dataset)


def test_copy_repeats_on_loader(cache_dataset: CacheDataset):
    loader = make_loader(cache_dataset, repeats=3, copy_repeats=True, shuffle=False)
    seen = []
    for b in loader:
        seen.append(b["image"].clone())
        b["image"] += 100  # in-place change inside the step
    for k in range(0, len(seen), 3):
        assert torch.equal(seen[k], seen[k + 1]) and torch.equal(seen[k], seen[k + 2])


def test_iterable_dataset_passes_through():
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter([{"image": torch.tensor([float(i)])} for i in range(5)])

    loader = ThreadDataLoader(Stream(), batch_size=2)
    assert [b["image"].shape[0] for b in loader] == [2, 2, 1]
    assert [b["image"].shape[0] for b in loader.iter_from(1)] == [2, 1]


def test_unread_iterator_does_not_advance_the_epoch(cache_dataset: CacheDataset):
    # The trainer may make an iterator, drop it unread, set skip_batches and iterate again.
    loader = make_loader(cache_dataset)
    full = epoch_batches(loader, 5)
    loader.set_epoch(5)
    it = iter(loader)
    del it
    loader.skip_batches(1)
    assert_same(full[1:], list(loader))
    assert loader.epoch == 6


def test_shard_splits_each_epoch_between_ranks(cache_dataset: CacheDataset):
    n = len(cache_dataset)
    shards = [make_loader(cache_dataset, batch_size=2).shard(r, 3) for r in range(3)]
    for epoch in (0, 1):
        seen = []
        for loader in shards:
            loader.set_epoch(epoch)
            seen.append(list(loader.sampler))
        assert all(len(s) == len(seen[0]) for s in seen)  # equal work per rank (padded)
        flat = [i for s in seen for i in s]
        assert set(flat) == set(range(n)) and len(flat) == 12
        assert len(shards[0]) == 2 and len(list(shards[0])) == 2
    with pytest.raises(ValueError, match="custom sampler"):
        ThreadDataLoader(cache_dataset, sampler=torch.utils.data.RandomSampler(cache_dataset)).shard(0, 2)


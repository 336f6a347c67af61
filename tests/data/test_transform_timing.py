"""Per-transform timing: every transform of a real pipeline is counted, staged, timed and placed on its threads."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from monai.transforms import Compose, EnsureTyped, MapTransform, RandFlipd, ScaleIntensityd

from hpc_runner.data import DataItemError, ThreadDataLoader
from hpc_runner.data.cached import CachedDataset
from hpc_runner.data.compose import chain
from hpc_runner.data.transform_timing import (
    CACHED,
    EVERY_EPOCH,
    TimedCompose,
    merged_rows,
    table_text,
    thread_groups,
    timed,
    timers_in,
)

N = 6


def _items(n: int = N) -> list[dict]:
    rng = np.random.default_rng(0)
    return [{"image": rng.random((1, 12, 12, 12), dtype=np.float32), "id": i} for i in range(n)]


def _add_one(d: dict) -> dict:  # a plain function: MONAI's cache stops before it
    return {**d, "image": d["image"] + 1}


class Sleepd(MapTransform):
    """A deterministic transform that takes a known time."""

    def __init__(self, seconds: float) -> None:
        super().__init__(keys="image")
        self.seconds = seconds

    def __call__(self, d: dict) -> dict:
        time.sleep(self.seconds)
        return d


class Faild(MapTransform):
    def __call__(self, d: dict) -> dict:
        raise ValueError("broken item")


def _pipeline() -> list:
    return [ScaleIntensityd(keys="image"), RandFlipd(keys="image", prob=0.5, spatial_axis=0),
            EnsureTyped(keys="image"), _add_one]


def _by_name(rows: list[dict]) -> dict[str, dict]:
    return {r["name"]: r for r in rows}


def test_cached_prefix_runs_once_and_the_rest_every_epoch_on_the_worker_threads() -> None:
    ds = CachedDataset(_items(), chain([_pipeline()[:1], _pipeline()[1:]]), progress=False)
    loader = ThreadDataLoader(ds, batch_size=2, num_workers=2, use_thread_workers=True, seed=0)
    for epoch in range(3):
        loader.set_epoch(epoch)
        assert len(list(loader)) == N // 2
    rows = _by_name(merged_rows(timers_in(loader)))
    assert set(rows) == {"ScaleIntensityd", "RandFlipd", "EnsureTyped", "_add_one"}
    scale = rows["ScaleIntensityd"]
    assert (scale["stage"], scale["kind"], scale["calls"]) == (CACHED, "deterministic", N)
    for name, kind in (("RandFlipd", "random"), ("EnsureTyped", "deterministic"), ("_add_one", "callable")):
        row = rows[name]
        assert (row["stage"], row["kind"], row["calls"]) == (EVERY_EPOCH, kind, 3 * N), row
        assert all(t.startswith("hpc-runner-data-worker") for t in row["threads"]), row["threads"]
    for row in rows.values():
        mean_ms = 1000 * row["total_s"] / row["calls"]
        assert row["total_s"] > 0 and row["mean_ms"] == pytest.approx(mean_ms, rel=1e-3, abs=1e-3)
    assert "RandFlipd" in table_text(merged_rows(timers_in(loader)))


def test_a_persistent_cache_reused_by_a_second_job_runs_no_cached_transform(tmp_path: Path) -> None:
    first = CachedDataset(_items(), _pipeline(), cache_dir=tmp_path, progress=False)
    second = CachedDataset(_items(), _pipeline(), cache_dir=tmp_path, progress=False)
    assert _by_name(merged_rows(timers_in(first)))["ScaleIntensityd"]["calls"] == N
    assert merged_rows(timers_in(second)) == []  # every item was read from the folder
    _ = [second[i] for i in range(N)]
    rows = _by_name(merged_rows(timers_in(second)))
    assert "ScaleIntensityd" not in rows and rows["RandFlipd"]["calls"] == N
    assert rows["RandFlipd"]["threads"] == [threading.current_thread().name]


def test_the_timed_chain_gives_the_same_items_as_the_plain_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    def batches() -> list[torch.Tensor]:
        ds = CachedDataset(_items(), _pipeline(), progress=False)
        loader = ThreadDataLoader(ds, batch_size=3, num_workers=2, use_thread_workers=True, seed=7)
        return [b["image"] for b in loader]

    timed_out = batches()
    monkeypatch.setenv("HPCR_TRANSFORM_TIMING", "0")
    assert type(chain([_pipeline()])) is Compose  # off: nothing is wrapped
    plain_out = batches()
    assert all(torch.equal(a, b) for a, b in zip(timed_out, plain_out, strict=True))


def test_timing_measures_the_time_spent_in_the_transform() -> None:
    compose = timed(Compose([Sleepd(0.02), EnsureTyped(keys="image")]))
    for item in _items(3):
        compose(item)
    rows = _by_name(merged_rows([compose.timer]))
    assert rows["Sleepd"]["calls"] == 3
    assert 20 <= rows["Sleepd"]["mean_ms"] < 80
    assert rows["EnsureTyped"]["mean_ms"] < rows["Sleepd"]["mean_ms"]


def test_concurrent_threads_keep_their_own_counts_and_merge_exactly() -> None:
    compose = timed(Compose([EnsureTyped(keys="image"), RandFlipd(keys="image", prob=1.0)]))
    item = _items(1)[0]
    start = threading.Barrier(4)

    def work() -> None:
        start.wait()
        for _ in range(250):
            compose(item)

    threads = [threading.Thread(target=work, name=f"timing-test-{k}") for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rows = _by_name(merged_rows([compose.timer]))
    assert rows["EnsureTyped"]["calls"] == rows["RandFlipd"]["calls"] == 1000
    assert rows["RandFlipd"]["threads"] == ["timing-test-N (4 threads)"]


def test_repeated_transforms_are_told_apart_and_composes_keep_their_settings() -> None:
    plain = Compose([EnsureTyped(keys="image"), ScaleIntensityd(keys="image"), EnsureTyped(keys="image")],
                    map_items=False)
    compose = timed(plain)
    assert isinstance(compose, TimedCompose) and compose.transforms is plain.transforms
    assert compose.map_items is False and timed(compose) is compose
    compose(_items(1)[0])
    assert {r["name"] for r in merged_rows([compose.timer])} == {"EnsureTyped", "ScaleIntensityd", "EnsureTyped #2"}


def test_a_failing_item_still_names_the_transform_that_failed() -> None:
    ds = CachedDataset(_items(), [ScaleIntensityd(keys="image"), RandFlipd(keys="image"), Faild(keys="image")],
                       progress=False)
    loader = ThreadDataLoader(ds, batch_size=2, num_workers=0, seed=0)
    with pytest.raises(DataItemError, match="transform Faild"):
        next(iter(loader))


def test_thread_names_fold_by_their_base() -> None:
    names = ["hpc-runner-data-worker-1", "hpc-runner-data-worker-12", "MainThread", "Thread-3 (worker)"]
    assert thread_groups(names) == ["MainThread", "Thread-3 (worker)", "hpc-runner-data-worker-N (2 threads)"]

"""Shared helpers for the data-path tests: thread accounting and a small real MONAI dataset."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from types import CodeType

import numpy as np
import pytest
from monai.data import CacheDataset
from monai.transforms import (
    Compose,
    EnsureChannelFirstd,
    RandFlipd,
    RandRotate90d,
    RandSpatialCropd,
    ScaleIntensityd,
)


def our_threads() -> list[threading.Thread]:
    """Threads started by hpc_runner.data (producers and workers)."""
    return [t for t in threading.enumerate() if t.name.startswith("hpc-runner-data")]


def wait_until(cond: Callable[[], bool], timeout: float = 1.0) -> float:
    """Poll `cond` (test-side only) until true; return the seconds it took, or raise."""
    start = time.perf_counter()
    while not cond():
        if time.perf_counter() - start > timeout:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(0.005)
    return time.perf_counter() - start


def preempt_at_every_line(is_target: Callable[[CodeType], bool], max_sleep: float, seed: int = 0) -> Callable:
    """A trace function (sys.settrace / threading.settrace) that sleeps a random time at each line of the
    code objects ``is_target`` accepts.

    It stands in for the OS preempting the thread at that line: a window between two statements that
    CPython's GIL keeps a few nanoseconds wide becomes up to `max_sleep` wide.
    """
    rng = random.Random(seed)

    def line(frame, event, arg):
        if event == "line":
            time.sleep(rng.uniform(0, max_sleep))
        return line

    return lambda frame, event, arg: line if is_target(frame.f_code) else None


@pytest.fixture(name="preempt_at_every_line")
def preempt_at_every_line_fixture() -> Callable:
    """The preempt_at_every_line() helper, as a fixture (test modules do not import conftest)."""
    return preempt_at_every_line


@pytest.fixture(name="our_threads")
def our_threads_fixture() -> Callable[[], list[threading.Thread]]:
    """The our_threads() helper, as a fixture (test modules do not import conftest)."""
    return our_threads


@pytest.fixture(name="wait_until")
def wait_until_fixture() -> Callable[..., float]:
    """The wait_until() helper, as a fixture."""
    return wait_until


@pytest.fixture
def thread_baseline():
    """threading.active_count() before the test; the test asserts it returns to it."""
    wait_until(lambda: not our_threads(), timeout=10.0)  # leftovers of an earlier test (slow to end under load)
    return threading.active_count()


def make_volumes(n: int = 10, size: int = 12, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """n dict items with a random image and a binary label, size^3, no channel axis."""
    rs = np.random.RandomState(seed)
    return [
        {
            "image": rs.rand(size, size, size).astype(np.float32),
            "label": (rs.rand(size, size, size) > 0.5).astype(np.float32),
        }
        for _ in range(n)
    ]


def seg_transform(crop: int = 8) -> Compose:
    """Deterministic prefix (channel, scaling) then RandFlipd / RandRotate90d / RandSpatialCropd."""
    keys = ("image", "label")
    return Compose(
        [
            EnsureChannelFirstd(keys, channel_dim="no_channel"),
            ScaleIntensityd("image"),
            RandFlipd(keys, prob=0.5, spatial_axis=0),
            RandRotate90d(keys, prob=0.5),
            RandSpatialCropd(keys, (crop, crop, crop), random_size=False),
        ]
    )


@pytest.fixture
def cache_dataset() -> CacheDataset:
    """A real MONAI CacheDataset: the deterministic prefix cached, the random suffix per item."""
    return CacheDataset(make_volumes(), seg_transform(), progress=False)

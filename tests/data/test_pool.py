"""thread_map / WorkerPool: order, bounded in-flight, per-item seeds, errors, thread cleanup."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from monai.transforms import Compose, RandGaussianNoise, RandRotate90, ScaleIntensity

from hpc_runner.data import DataItemError, OrderedMap, thread_map


def test_output_in_input_order_despite_uneven_items():
    def slow_for_small(x: int) -> int:
        time.sleep(0.002 * (10 - x % 10))  # early items finish last
        return x * x

    assert list(thread_map(slow_for_small, range(30), num_workers=4)) == [x * x for x in range(30)]


def test_in_flight_is_bounded():
    started: list[int] = []
    gate = threading.Event()

    def work(state, i, x):
        started.append(i)
        gate.wait(2)
        return x

    omap = OrderedMap(range(100), work, lambda: None, num_workers=2, in_flight=5)
    t = threading.Thread(target=lambda: next(omap))
    t.start()
    time.sleep(0.1)
    assert len(started) <= 5  # only `in_flight` items submitted ahead, two running
    gate.set()
    t.join()
    omap.close()


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_monai_random_transforms_same_for_any_thread_count(workers):
    t = Compose([ScaleIntensity(), RandRotate90(prob=0.5), RandGaussianNoise(prob=1.0)])
    xs = [np.full((1, 6, 6), i, np.float32) + np.arange(36, dtype=np.float32).reshape(1, 6, 6) for i in range(16)]
    ref = [np.asarray(y) for y in thread_map(t, xs, num_workers=1, seed=11, epoch=2)]
    got = [np.asarray(y) for y in thread_map(t, xs, num_workers=workers, seed=11, epoch=2)]
    for a, b in zip(ref, got):
        np.testing.assert_array_equal(a, b)
    other_epoch = [np.asarray(y) for y in thread_map(t, xs, num_workers=workers, seed=11, epoch=3)]
    assert any(not np.array_equal(a, b) for a, b in zip(ref, other_epoch))


def test_transform_is_not_shared_across_threads():
    t = Compose([RandGaussianNoise(prob=1.0)])
    before = t.transforms[0].R.get_state()[1].copy()
    list(thread_map(t, [np.zeros((1, 4, 4), np.float32)] * 8, num_workers=2))
    np.testing.assert_array_equal(t.transforms[0].R.get_state()[1], before)  # the caller's copy untouched


def test_failing_item_names_index_and_transform(wait_until, our_threads):
    def normalise(x):
        if x == 7:
            raise ZeroDivisionError("empty volume")
        return x

    with pytest.raises(DataItemError) as info:
        list(thread_map(normalise, range(20), num_workers=3))
    msg = str(info.value)
    assert "item 7" in msg and "normalise" in msg and "ZeroDivisionError" in msg
    assert info.value.position == 7
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    wait_until(lambda: not our_threads(), timeout=1.0)


def test_failing_monai_transform_is_named():
    from monai.transforms import ScaleIntensityd

    t = Compose([ScaleIntensityd("image")])
    items = [{"image": np.ones((1, 2, 2))}, {"wrong_key": 1}]
    with pytest.raises(DataItemError, match=r"item 1 .*ScaleIntensityd"):
        list(thread_map(t, items, num_workers=2))


def test_abandoned_map_leaves_no_thread(thread_baseline, wait_until):
    omap = thread_map(lambda x: time.sleep(0.001) or x, range(1000), num_workers=2)
    assert next(omap) == 0
    # Still referenced, never closed: idle workers exit on their own.
    wait_until(lambda: threading.active_count() <= thread_baseline, timeout=1.0)
    assert next(omap) == 1  # and it still works afterwards
    omap.close()


def test_default_workers_follow_the_machine(monkeypatch):
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "1")
    assert list(thread_map(lambda x: x + 1, range(5))) == [1, 2, 3, 4, 5]

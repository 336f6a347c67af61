"""thread_map / WorkerPool: order, bounded in-flight, per-item seeds, errors, thread cleanup."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from monai.transforms import Compose, RandGaussianNoise, RandRotate90, ScaleIntensity

from hpc_runner.data import DataItemError, OrderedMap, thread_map
from hpc_runner.data.pool import WorkerPool


def test_output_in_input_order_despite_uneven_items():
    def slow_for_small(x: int) -> int:
        time.sleep(0.002 * (10 - x % 10))  # early items finish last
        return x * x

    assert list(thread_map(slow_for_small, range(30), num_workers=4)) == [x * x for x in range(30)]


def test_in_flight_is_bounded_by_the_consumer_not_by_the_workers():
    pulled: list[int] = []
    done = threading.Semaphore(0)

    def items():
        for i in range(100):
            pulled.append(i)
            yield i

    def work(state, i, x):
        done.release()
        return x

    # Four free workers, five ahead: only in_flight can stop them taking more.
    omap = OrderedMap(items(), work, lambda: None, num_workers=4, in_flight=5)
    assert next(omap) == 0
    for _ in range(6):  # item 0 and the five submitted ahead of the consumer all finish
        assert done.acquire(timeout=10)
    assert not done.acquire(timeout=0.05)  # and nothing more was computed
    assert pulled == list(range(6))
    assert next(omap) == 1
    assert pulled == list(range(7))  # one taken, one more submitted
    omap.close()


def test_submit_while_the_only_worker_exits_idle_is_still_run(monkeypatch, preempt_at_every_line):
    """A worker that decides to exit and leaves the live count in two locked sections let a submit()
    in between start no thread; its Future waited forever (1 worker, the default on a 2-CPU job)."""
    from hpc_runner.data import pool as pool_module

    monkeypatch.setattr(pool_module, "IDLE_EXIT_S", 0.001)
    threading.settrace(preempt_at_every_line(lambda code: code.co_name == "_worker", max_sleep=0.0003))
    try:
        pool = WorkerPool(1, lambda: None)
        for i in range(1000):
            fut = pool.submit(lambda state, x: x, i)
            try:
                assert fut.result(timeout=10) == i
            except TimeoutError:
                pytest.fail(f"submit {i} was never run: the worker exited after the submit saw it live")
            time.sleep(0.001 * (i % 3) / 2)  # land before, inside and after the worker's idle exit
        pool.close()
    finally:
        threading.settrace(None)


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
    wait_until(lambda: not our_threads(), timeout=10)


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
    wait_until(lambda: threading.active_count() <= thread_baseline, timeout=10)
    assert next(omap) == 1  # and it still works afterwards
    omap.close()


def test_default_workers_follow_the_machine(monkeypatch):
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "1")
    assert list(thread_map(lambda x: x + 1, range(5))) == [1, 2, 3, 4, 5]

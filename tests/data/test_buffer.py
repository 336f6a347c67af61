"""ThreadBuffer: errors, early exit, thread and source cleanup, epochs, repeats. Real threads, no mocks."""

from __future__ import annotations

import sys
import threading
import time
import traceback

import numpy as np
import pytest

from hpc_runner.data import IDLE_EXIT_S, ThreadBuffer, buffer_iterator


class SourceError(Exception):
    """Raised by the test source midway."""


def failing_source(n: int, fail_at: int):
    for i in range(n):
        if i == fail_at:
            raise SourceError(f"source failed at item {i}")
        yield i


class Tracked:
    """An iterable whose iterators record whether they were closed and which epoch made them."""

    def __init__(self, n: int, delay: float = 0.0) -> None:
        self.n = n
        self.delay = delay
        self.epoch = 0
        self.closed: list[int] = []
        self.started: list[int] = []

    def __iter__(self):
        epoch = self.epoch
        self.epoch += 1
        self.started.append(epoch)

        def gen():
            try:
                for i in range(self.n):
                    if self.delay:
                        time.sleep(self.delay)
                    yield (epoch, i)
            finally:
                self.closed.append(epoch)

        return gen()


def test_items_in_order_and_complete():
    assert list(ThreadBuffer(range(100), buffer_size=3)) == list(range(100))
    assert list(ThreadBuffer([])) == []


def test_source_exception_reaches_consumer_with_type_and_traceback():
    seen = []
    with pytest.raises(SourceError, match="item 4") as info:
        for x in ThreadBuffer(failing_source(10, fail_at=4)):
            seen.append(x)
    # Never a silently short epoch: the items before the failure, then the error.
    assert seen == [0, 1, 2, 3]
    frames = [f.name for f in traceback.extract_tb(info.value.__traceback__)]
    assert "failing_source" in frames, frames  # the producer's frames survive the thread hop


def test_exception_at_first_item():
    with pytest.raises(SourceError):
        next(iter(ThreadBuffer(failing_source(3, fail_at=0))))


def test_break_does_not_wait_for_slow_item(thread_baseline, wait_until):
    release = threading.Event()
    entered = threading.Event()
    finished = threading.Event()
    closed: list[bool] = []

    def src():
        try:
            yield 0
            entered.set()
            release.wait(20)  # the item in progress: only the test ends it (or 20 s if break waits)
            finished.set()
            yield 1
        finally:
            closed.append(True)

    for _ in ThreadBuffer(src()):
        break
    # We are here while the producer is still inside item 1: leaving did not wait for it.
    assert entered.wait(10) and not finished.is_set()
    release.set()
    wait_until(lambda: closed == [True] and threading.active_count() <= thread_baseline, timeout=10)


def test_early_break_with_iterator_still_referenced(thread_baseline, wait_until, our_threads):
    src = Tracked(1000, delay=0.001)
    it = iter(ThreadBuffer(src, buffer_size=2))
    for x in it:
        if x[1] == 3:
            break
    # The consumer still holds `it`: the producer parks on the full buffer and its thread exits.
    wait_until(lambda: threading.active_count() <= thread_baseline, timeout=10)
    assert it is not None and not our_threads()
    # The held iterator resumes where it was, with a new producer thread; nothing lost.
    assert next(it) == (0, 4)
    it.close()
    wait_until(lambda: src.closed == [0], timeout=10)
    wait_until(lambda: threading.active_count() <= thread_baseline, timeout=10)


def test_exception_in_step_with_iterator_referenced(thread_baseline, wait_until):
    src = Tracked(1000, delay=0.001)
    it = iter(ThreadBuffer(src))

    def train():
        for x in it:
            if x[1] == 2:
                raise ValueError("step failed")

    with pytest.raises(ValueError, match="step failed"):
        train()
    wait_until(lambda: threading.active_count() <= thread_baseline, timeout=10)
    assert it is not None  # still referenced: the thread went anyway


def test_break_unreferenced_closes_source_at_once(thread_baseline, wait_until):
    src = Tracked(1000, delay=0.001)
    for x in ThreadBuffer(src):
        if x[1] == 2:
            break
    wait_until(lambda: src.closed == [0], timeout=10)
    wait_until(lambda: threading.active_count() <= thread_baseline, timeout=10)


def test_close_stops_producer_and_closes_source(thread_baseline, wait_until):
    src = Tracked(1000, delay=0.001)
    it = iter(ThreadBuffer(src))
    next(it)
    it.close()
    wait_until(lambda: src.closed == [0], timeout=10)
    wait_until(lambda: threading.active_count() <= thread_baseline, timeout=10)
    with pytest.raises(StopIteration):
        next(it)


def test_context_manager_closes(wait_until):
    src = Tracked(50, delay=0.001)
    with iter(ThreadBuffer(src)) as it:
        next(it)
    wait_until(lambda: src.closed == [0], timeout=10)


def test_no_stale_items_across_epochs(thread_baseline, wait_until):
    src = Tracked(20, delay=0.002)
    buf = ThreadBuffer(src, buffer_size=4)
    for x in buf:
        if x[1] == 1:
            break  # epoch 0 abandoned with items buffered
    second = list(buf)
    assert [e for e, _ in second] == [1] * 20
    assert [i for _, i in second] == list(range(20))
    wait_until(lambda: threading.active_count() <= thread_baseline, timeout=10)


def test_park_and_resume_keeps_every_item():
    src = Tracked(6)
    it = iter(ThreadBuffer(src, buffer_size=1))
    out = [next(it)]
    time.sleep(IDLE_EXIT_S * 2.5)  # long steps: the producer parks between items
    out.append(next(it))
    time.sleep(IDLE_EXIT_S * 2.5)
    out.extend(it)
    assert out == [(0, i) for i in range(6)]


def test_repeats_yield_same_object():
    out = list(ThreadBuffer([np.zeros(2), np.ones(2)], repeats=3))
    assert len(out) == 6
    assert out[0] is out[1] is out[2]
    assert out[3] is out[4] is out[5]
    out2 = list(buffer_iterator(range(3), repeats=2))
    assert out2 == [0, 0, 1, 1, 2, 2]


def test_repeats_in_place_change_leaks_without_copy():
    seen = []
    for b in ThreadBuffer([np.zeros(2)], repeats=3):
        seen.append(b.copy())
        b += 1  # a step that normalises its batch in place
    assert [s[0] for s in seen] == [0, 1, 2]


def test_copy_repeats_isolates_in_place_changes():
    seen = []
    batches = [{"x": np.zeros(2)}, {"x": np.full(2, 5.0)}]
    for b in ThreadBuffer(batches, repeats=3, copy_repeats=True):
        seen.append(b["x"].copy())
        b["x"] += 1
    assert [s[0] for s in seen] == [0, 0, 0, 5, 5, 5]


def test_invalid_arguments():
    with pytest.raises(ValueError):
        ThreadBuffer([], repeats=0)
    with pytest.raises(ValueError):
        ThreadBuffer([], buffer_size=0)


def test_on_demand_makes_nothing_ahead(thread_baseline, wait_until):
    made: list[int] = []

    def src():
        for i in range(5):
            made.append(i)
            yield i

    it = iter(ThreadBuffer(src(), prefetch=False))
    time.sleep(0.05)
    assert made == []  # nothing before the first request
    assert next(it) == 0
    time.sleep(0.05)
    assert made == [0]  # nothing ahead of the consumer
    assert list(it) == [1, 2, 3, 4]
    wait_until(lambda: threading.active_count() <= thread_baseline, timeout=10)


def test_on_demand_error_and_held_iterator(thread_baseline, wait_until):
    with pytest.raises(SourceError):
        list(ThreadBuffer(failing_source(5, fail_at=2), prefetch=False))
    src = Tracked(100)
    it = iter(ThreadBuffer(src, prefetch=False))
    assert next(it) == (0, 0)
    wait_until(lambda: threading.active_count() <= thread_baseline, timeout=10)
    assert next(it) == (0, 1)  # a parked on-demand producer restarts on request
    it.close()
    wait_until(lambda: src.closed == [0], timeout=10)


@pytest.mark.parametrize("prefetch", [False, True])
def test_a_request_never_meets_a_producer_parking_at_that_moment(monkeypatch, prefetch, preempt_at_every_line):
    """On demand, the consumer checked `running` without the lock and then queued its request: a
    producer that parked in between left no thread to answer, and next() blocked forever."""
    from hpc_runner.data import buffer as buffer_module
    from hpc_runner.data.buffer import BufferIterator

    monkeypatch.setattr(buffer_module, "IDLE_EXIT_S", 0.001)  # the producer parks between most items
    n = 1000
    it = ThreadBuffer(range(n), prefetch=prefetch).iterate()
    got: list[int] = []

    def consume():
        target = BufferIterator.__next__.__code__
        sys.settrace(preempt_at_every_line(lambda code: code is target, max_sleep=0.0003))
        got.extend(it)

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    seen = -1
    while consumer.is_alive() and len(got) != seen:  # a hang is 10 s without a single item
        seen = len(got)
        consumer.join(10)
    assert not consumer.is_alive(), f"next() hung after {len(got)} items"
    assert got == list(range(n))

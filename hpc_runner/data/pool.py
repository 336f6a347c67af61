"""Ordered, bounded thread-parallel map for transforms that release the GIL (numpy, scipy, torch).

Each worker thread owns a private state (a per-thread copy of the dataset or transform); results come
back in input order; at most `in_flight` items are submitted ahead of the consumer; idle workers exit
after ``IDLE_EXIT_S`` so an abandoned map leaves no thread behind.
"""

from __future__ import annotations

import collections
import contextlib
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from typing import Any, Generic, TypeVar

from hpc_runner.data.buffer import IDLE_EXIT_S
from hpc_runner.data.items import item_error
from hpc_runner.data.seeding import copy_transform, describe, item_seeds, random_targets, reseed
from hpc_runner.data.threads import data_thread_setup
from hpc_runner.data.workers import default_num_workers

WORKER_NAME = "hpc-runner-data-worker"

S = TypeVar("S")
T = TypeVar("T")


class WorkerPool(Generic[S]):
    """Threads that each own a state from `make_state()`; they start on demand and exit when idle."""

    def __init__(
        self,
        max_workers: int,
        make_state: Callable[[], S],
        name: str = WORKER_NAME,
        priority: str = "normal",
    ) -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers}")
        self.max_workers = max_workers
        self._make_state = make_state
        self._name = name
        self._setup = data_thread_setup(priority)
        self._tasks: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.RLock()  # re-entrant: OrderedMap.__del__ may close us from a worker
        self._live = 0
        self._idle = 0
        self._queued = 0
        self._closed = False
        self._states: list[S] = []  # states of exited workers, reused by the next ones
        self._count = 0

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        """Run fn(state, *args) on a worker; return its Future."""
        fut: Future[T] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("submit on a closed WorkerPool")
            self._tasks.put((fut, fn, args))
            self._queued += 1
            if self._queued > self._idle and self._live < self.max_workers:
                self._live += 1
                self._count += 1
                threading.Thread(
                    target=self._worker, name=f"{self._name}-{self._count}", daemon=True
                ).start()
        return fut

    def _worker(self) -> None:
        with contextlib.suppress(Exception):  # an optimisation hook must not stop the data
            self._setup()
        with self._lock:
            state = self._states.pop() if self._states else None
        try:
            if state is None:
                state = self._make_state()
        except BaseException as exc:
            state = None
            setup_error: BaseException | None = exc
        else:
            setup_error = None
        counted = True  # this worker is still in self._live
        try:
            while True:
                with self._lock:
                    if self._closed:
                        return
                    self._idle += 1
                try:
                    task = self._tasks.get(timeout=IDLE_EXIT_S)
                except queue.Empty:
                    with self._lock:
                        self._idle -= 1
                        if self._queued == 0 or self._closed:
                            # Decide to exit and leave the live count in one locked section: a
                            # submit() that ran between two sections saw this worker as live,
                            # started none, and its task waited forever.
                            self._live -= 1
                            counted = False
                            if state is not None and not self._closed:
                                self._states.append(state)
                            return  # idle: exit; submit() starts a new worker when needed
                    continue
                with self._lock:
                    self._idle -= 1
                    self._queued -= 1
                if task is None:
                    return
                fut, fn, args = task
                if not fut.set_running_or_notify_cancel():
                    continue
                if setup_error is not None:
                    fut.set_exception(setup_error)
                    continue
                try:
                    result = fn(state, *args)
                except BaseException as exc:
                    fut.set_exception(exc)
                    del exc
                else:
                    fut.set_result(result)
                    del result
                del fut, fn, args, task
        finally:
            if counted:
                with self._lock:
                    self._live -= 1
                    if state is not None and not self._closed:
                        self._states.append(state)

    def close(self) -> None:
        """Stop accepting work; workers finish their current task and exit. Does not wait."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            live = self._live
            self._states.clear()
        while True:  # cancel what no worker has started
            try:
                task = self._tasks.get_nowait()
            except queue.Empty:
                break
            if task is not None:
                task[0].cancel()
        for _ in range(live):
            self._tasks.put(None)


class OrderedMap(Iterator[T]):
    """Iterator of work(state, i, x) over `items` on a WorkerPool, in input order, `in_flight` ahead."""

    def __init__(
        self,
        items: Iterable[Any],
        work: Callable[[Any, int, Any], T],
        make_state: Callable[[], Any],
        num_workers: int,
        in_flight: int,
        priority: str = "normal",
    ) -> None:
        self._items = enumerate(items)
        self._work = work
        self._pool: WorkerPool[Any] = WorkerPool(num_workers, make_state, priority=priority)
        self._in_flight = max(1, int(in_flight))
        self._futures: collections.deque[Future[T]] = collections.deque()
        self._exhausted = False
        self._closed = False

    def _top_up(self) -> None:
        while not self._exhausted and len(self._futures) < self._in_flight:
            try:
                i, x = next(self._items)
            except StopIteration:
                self._exhausted = True
                break
            self._futures.append(self._pool.submit(self._work, i, x))

    def __iter__(self) -> OrderedMap[T]:
        return self

    def __next__(self) -> T:
        if self._closed:
            raise StopIteration
        self._top_up()
        if not self._futures:
            self.close()
            raise StopIteration
        fut = self._futures.popleft()
        try:
            result = fut.result()
        except BaseException:
            self.close()
            raise
        self._top_up()
        return result

    def close(self) -> None:
        """Cancel queued items and let the workers exit; does not wait for the ones running."""
        if self._closed:
            return
        self._closed = True
        for f in self._futures:
            f.cancel()
        self._futures.clear()
        self._pool.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


class _TransformState:
    __slots__ = ("targets", "transform")

    def __init__(self, transform: Callable[[Any], Any]) -> None:
        self.transform = copy_transform(transform)
        self.targets = random_targets(self.transform)


def thread_map(
    transform: Callable[[Any], T],
    items: Iterable[Any],
    num_workers: int | None = None,
    *,
    seed: int = 0,
    epoch: int = 0,
    in_flight: int | None = None,
    priority: str = "normal",
) -> OrderedMap[T]:
    """Apply `transform` to `items` on `num_workers` threads; results in input order.

    Each thread calls its own copy of the random part of `transform`; item i is transformed with
    random states derived from (seed, epoch, i), so results do not depend on the thread count. A
    failing item raises DataItemError naming its index and the transform, from the original error.
    `num_workers=None` uses default_num_workers(); at most `in_flight` (default 2 x workers) items
    are computed ahead of the consumer. `priority` ("normal", "low", "idle") lowers the workers' CPU
    priority (see lower_thread_priority).
    """
    workers = default_num_workers() if num_workers is None else max(1, int(num_workers))
    name = describe(transform)

    def work(state: _TransformState, i: int, x: Any) -> T:
        if state.targets:
            reseed(state.targets, item_seeds(seed, epoch, i, i, len(state.targets)))
        try:
            return state.transform(x)
        except Exception as exc:
            raise item_error(exc, position=i, index=None, epoch=None, fallback=name) from exc

    return OrderedMap(
        items, work, lambda: _TransformState(transform), workers, in_flight or 2 * workers, priority=priority
    )

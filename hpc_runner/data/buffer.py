"""ThreadBuffer: iterate a source on a producer thread and hand its items to the consumer.

Differences from ``monai.data.ThreadBuffer`` (1.6.1), each one a measured problem there:

* a producer exception is re-raised in the consumer with its original traceback, never a short epoch;
* blocking waits on a condition with an end sentinel, no 10 ms polling loop;
* leaving early (``break``, an exception in the step, ``close()``) never waits for the item in progress:
  the producer drops it, closes the source iterator (``.close()``) and exits;
* a producer whose buffer stays full for ``IDLE_EXIT_S`` parks: its thread exits and the consumer's
  next ``next()`` starts a new one, so an abandoned iterator that is still referenced leaves no thread;
* every iteration has its own buffer, so an epoch never sees items of the last one;
* ``repeats`` can deep-copy (``copy_repeats=True``) so in-place changes do not leak between repeats.
"""

from __future__ import annotations

import collections
import copy
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

#: Seconds a producer waits on a full buffer before its thread exits (it restarts on the next get).
IDLE_EXIT_S = 0.2

PRODUCER_NAME = "hpc-runner-data-producer"

_END = object()


class _Raised:
    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def lower_thread_priority(policy: str) -> None:
    """Lower the calling thread's CPU priority: "low" (nice 19), "idle" (SCHED_IDLE) or "normal" (no-op)."""
    if policy == "normal" or not hasattr(os, "setpriority"):
        return
    tid = threading.get_native_id()
    try:
        if policy == "idle" and hasattr(os, "sched_setscheduler") and hasattr(os, "SCHED_IDLE"):
            os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
        else:
            os.setpriority(os.PRIO_PROCESS, tid, 19)
    except OSError:  # a restricted container may refuse; priority is an optimisation only
        pass


class _Feed:
    """State shared by one iteration's consumer and its producer thread (never the consumer's handle)."""

    def __init__(
        self,
        src: Iterable[Any],
        capacity: int,
        repeats: int,
        copy_repeats: bool,
        skip_first: int,
        thread_setup: Callable[[], None] | None,
        name: str,
    ) -> None:
        self.src = src
        self.it: Iterator[Any] | None = None
        self.capacity = max(1, int(capacity))
        self.repeats = repeats
        self.copy_repeats = copy_repeats and repeats > 1
        self.thread_setup = thread_setup
        self.name = name
        self.lock = threading.Lock()
        self.not_empty = threading.Condition(self.lock)
        self.not_full = threading.Condition(self.lock)
        self.items: collections.deque[Any] = collections.deque()
        self.pending: Any = _END  # an item made but not yet queued (kept across a park)
        self.has_pending = False
        self.pending_terminal = False
        self.held: Any = None  # copy_repeats: the pristine batch, yielded last
        self.held_left = 0
        self.skip_first = skip_first
        self.running = False
        self.finished = False  # the terminal item (end or error) is queued
        self.closed = False
        self.source_closed = False

    # -- producer side -----------------------------------------------------------------------------
    def start(self) -> None:
        """Start a producer thread; caller holds the lock."""
        self.running = True
        t = threading.Thread(target=self._run, name=self.name, daemon=True)
        t.start()

    def _make(self) -> tuple[Any, bool]:
        """Return (next item to queue, is_terminal); runs on the producer, outside the lock."""
        if self.held_left > 0:
            self.held_left -= 1
            return copy.deepcopy(self.held), False
        if self.held is not None:
            item, self.held = self.held, None
            return item, False
        try:
            if self.it is None:
                self.it = iter(self.src)
            item = next(self.it)
        except StopIteration:
            return _END, True
        except BaseException as exc:
            return _Raised(exc), True
        if self.copy_repeats:
            # Copies go first and the pristine batch last, each copy made just before it is queued,
            # so the consumer's in-place changes to one repeat never reach the next.
            self.held = item
            self.held_left = self.repeats - 2 - self.skip_first
            self.skip_first = 0
            if self.held_left < 0:
                self.held_left = 0
                item, self.held = self.held, None
                return item, False
            return copy.deepcopy(item), False
        return item, False

    def _run(self) -> None:
        if self.thread_setup is not None:
            try:
                self.thread_setup()
            except Exception:
                pass  # an optimisation hook must not stop the data
        parked = False
        try:
            while True:
                if not self.has_pending:
                    if self.closed:  # unlocked read; confirmed under the lock below
                        break
                    self.pending, self.pending_terminal = self._make()
                    self.has_pending = True
                with self.lock:
                    # The end marker and errors may exceed the capacity: they are small and let the
                    # producer finish instead of parking.
                    while not self.pending_terminal and len(self.items) >= self.capacity and not self.closed:
                        if (
                            not self.not_full.wait(IDLE_EXIT_S)
                            and len(self.items) >= self.capacity
                            and not self.closed
                        ):
                            # Park: this thread exits, keeping the pending item; the consumer's next
                            # get() starts a new producer. After this point the thread owns nothing.
                            self.running = False
                            parked = True
                            return
                    if self.closed:
                        break
                    self.items.append(self.pending)
                    self.pending, self.has_pending = _END, False
                    self.not_empty.notify()
                    if self.pending_terminal:
                        self.finished = True
                        break
        except BaseException as exc:  # a bug here must reach the consumer, not hang it
            with self.lock:
                self.items.append(_Raised(exc))
                self.finished = True
                self.not_empty.notify()
        finally:
            if not parked:
                with self.lock:
                    self.running = False
                    owns = self.closed or self.finished
                    if self.closed:
                        self.pending, self.has_pending, self.held = _END, False, None
                if owns:
                    self.close_source()

    def close_source(self) -> None:
        """Close the source iterator (generators and iterators with close()); only its owner calls this."""
        with self.lock:
            if self.source_closed:
                return
            self.source_closed = True
            it, self.it = self.it, None
        close = getattr(it, "close", None)
        if callable(close):
            try:
                close()
            except Exception:
                pass

    # -- consumer side -----------------------------------------------------------------------------
    def get(self) -> Any:
        with self.lock:
            while not self.items:
                if self.closed:
                    return _END
                if not self.running and not self.finished:
                    self.start()
                self.not_empty.wait()
            item = self.items.popleft()
            if not self.running and not self.finished and not self.closed:
                self.start()  # it parked on a full buffer; there is room again
            else:
                self.not_full.notify()
            return item

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
            self.items.clear()
            self.not_full.notify_all()
            self.not_empty.notify_all()
            producer_live = self.running
            if not producer_live:
                self.pending, self.has_pending, self.held = _END, False, None
        if not producer_live:
            # Parked or finished: no thread touches the source, so it is ours to close. A live
            # producer closes it itself once its current item is done.
            self.close_source()


class BufferIterator(Iterator[Any]):
    """The consumer's handle on one iteration of a ThreadBuffer; close() or dropping it stops the producer."""

    def __init__(self, feed: _Feed, repeats: int, copy_repeats: bool, skip_first: int) -> None:
        self._feed = feed
        self._repeats = repeats
        self._copy = copy_repeats and repeats > 1
        self._last: Any = None
        self._left = 0
        self._skip_first = 0 if self._copy else skip_first
        self._done = False

    def __iter__(self) -> BufferIterator:
        return self

    def __next__(self) -> Any:
        if self._left > 0:
            self._left -= 1
            return self._last
        if self._done:
            raise StopIteration
        item = self._feed.get()
        if item is _END:
            self.close()
            raise StopIteration
        if type(item) is _Raised:
            self.close()
            exc = item.exc
            item = None
            raise exc  # the producer's traceback is kept on exc.__traceback__; ours is appended
        if not self._copy and self._repeats > 1:
            self._last = item
            self._left = self._repeats - 1 - self._skip_first
            self._skip_first = 0
        return item

    def close(self) -> None:
        """Stop the producer, drop buffered items and close the source; returns without waiting."""
        self._done = True
        self._last = None
        self._left = 0
        self._feed.close()

    def __enter__(self) -> BufferIterator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


class ThreadBuffer:
    """Iterate `src` on a producer thread, buffering up to `buffer_size` items (drop-in for MONAI's).

    `timeout` is accepted for compatibility and ignored: waits block on a condition, never poll.
    `repeats` yields each item that many times; `copy_repeats=True` deep-copies all but the last.
    `thread_setup` runs first on each producer thread (e.g. ``lower_thread_priority``).
    """

    def __init__(
        self,
        src: Iterable[Any],
        buffer_size: int = 1,
        timeout: float | None = None,
        repeats: int = 1,
        copy_repeats: bool = False,
        thread_setup: Callable[[], None] | None = None,
    ) -> None:
        if int(repeats) < 1:
            raise ValueError(f"repeats must be >= 1, got {repeats}")
        if int(buffer_size) < 1:
            raise ValueError(f"buffer_size must be >= 1, got {buffer_size}")
        self.src = src
        self.buffer_size = int(buffer_size)
        self.timeout = timeout
        self.repeats = int(repeats)
        self.copy_repeats = bool(copy_repeats)
        self.thread_setup = thread_setup

    def iterate(self, skip_repeats: int = 0) -> BufferIterator:
        """Start a producer and return the consumer's iterator; skip the first `skip_repeats` repeats."""
        skip = max(0, min(int(skip_repeats), self.repeats - 1))
        feed = _Feed(
            self.src, self.buffer_size, self.repeats, self.copy_repeats, skip, self.thread_setup, PRODUCER_NAME
        )
        with feed.lock:
            feed.start()
        return BufferIterator(feed, self.repeats, self.copy_repeats, skip)

    def __iter__(self) -> BufferIterator:
        return self.iterate()


def buffer_iterator(
    src: Iterable[Any], buffer_size: int = 1, timeout: float | None = None, repeats: int = 1
) -> BufferIterator:
    """Return an iterator over `src` made on a producer thread (MONAI's ``buffer_iterator``)."""
    return ThreadBuffer(src, buffer_size=buffer_size, timeout=timeout, repeats=repeats).iterate()

"""ThreadBuffer: iterate a source on a producer thread and hand its items to the consumer.

Differences from ``monai.data.ThreadBuffer`` (1.6.1), each one a measured problem there:

* a producer exception is re-raised in the consumer with its original traceback, never a short epoch;
* blocking waits on a condition with an end sentinel, no 10 ms polling loop;
* leaving early (``break``, an exception in the step, ``close()``) never waits for the item in progress:
  the producer drops it, closes the source iterator (``.close()``) and exits;
* a producer whose buffer stays full for ``IDLE_EXIT_S`` (0.5 s) parks: its thread exits and the consumer's
  next ``next()`` starts a new one, so an abandoned iterator that is still referenced leaves no thread
  (a source with a ``park()`` method, such as worker processes, is told to let them go then, after its
  own ``idle_exit_s``);
* every iteration has its own buffer, so an epoch never sees items of the last one;
* ``repeats`` can deep-copy (``copy_repeats=True``) so in-place changes do not leak between repeats.
"""

from __future__ import annotations

import contextlib
import copy
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from hpc_runner.data.threads import data_thread_setup

#: Seconds an idle producer or worker waits before its thread exits (it restarts on the next get).
#: Long enough that a step shorter than this keeps its producer warm (a fresh thread per batch made
#: the batch ~20 % slower), short enough that nothing outlives an abandoned iterator by a second.
IDLE_EXIT_S = 0.5

PRODUCER_NAME = "hpc-runner-data-producer"

_END = object()
_NONE = object()
_GO, _STOP, _PARK = object(), object(), object()  # what a producer does after an idle wait


class _Raised:
    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class _Feed:
    """State shared by one iteration's consumer and its producer thread (never the consumer's handle).

    The per-item path uses only C-level ``queue.SimpleQueue`` calls: `items` carries items and the
    end/error sentinel, `slots` holds one token per free buffer place. Measured on a 2-vCPU VM, each
    extra Python-level lock/Condition call costs microseconds per item right after a sleep (cold
    caches), which is the whole overlap budget.
    """

    def __init__(
        self,
        src: Iterable[Any],
        capacity: int,
        repeats: int,
        copy_repeats: bool,
        skip_first: int,
        thread_setup: Callable[[], None] | None,
        name: str,
        prefetch: bool = True,
    ) -> None:
        self.src = src
        # on demand: the producer makes an item only when the consumer asks (a token per request)
        self.on_demand = not prefetch
        self.it: Iterator[Any] | None = None
        self.repeats = repeats
        self.copy_repeats = copy_repeats and repeats > 1
        self.thread_setup = thread_setup
        self.name = name
        self.items: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.slots: queue.SimpleQueue[None] = queue.SimpleQueue()
        for _ in range(0 if self.on_demand else max(1, int(capacity))):
            self.slots.put(None)
        # Re-entrant: a GC finalizer (BufferIterator.__del__) may run close() on a thread inside it.
        self.lock = threading.RLock()  # guards running/closed/finished and who owns the source
        self.pending: Any = _NONE  # an item made but not yet queued, kept across a park
        self.held: Any = _NONE  # copy_repeats: the pristine batch, yielded last
        self.held_left = 0
        self.skip_first = skip_first
        self.running = False
        self.finished = False  # the terminal item (end or error) is queued
        self.closed = False
        self.source_closed = False

    # -- producer side -----------------------------------------------------------------------------
    def start(self) -> None:
        """Start a producer thread; the caller holds the lock."""
        self.running = True
        threading.Thread(target=self._run, name=self.name, daemon=True).start()

    def restart(self) -> None:
        """Start a producer again after it parked on a full buffer."""
        with self.lock:
            if not self.running and not self.finished and not self.closed:
                self.start()

    def request(self) -> None:
        """On demand: ask for the next item, starting a producer if the last one parked.

        The token and the liveness check go in one locked section: a producer parks only inside
        this lock after finding no token, so either it sees this request or we see it parked. (A
        check outside the lock let a producer park between the check and the token: no thread was
        left to answer, and the consumer waited forever.)
        """
        with self.lock:
            self.slots.put(None)
            if not self.running and not self.finished and not self.closed:
                self.start()

    def _next_copy(self, it: Iterator[Any]) -> Any:
        """copy_repeats: copies go first, each made just before it is queued; the pristine batch last."""
        if self.held_left > 0:
            self.held_left -= 1
            return copy.deepcopy(self.held)
        if self.held is not _NONE:
            item, self.held = self.held, _NONE
            return item
        item = next(it)
        left = self.repeats - 1 - self.skip_first
        self.skip_first = 0
        if left <= 0:
            return item
        self.held, self.held_left = item, left - 1
        return copy.deepcopy(item)

    def _after_idle(self, item: Any) -> object:
        """No request for IDLE_EXIT_S: _GO if one slipped in, _STOP if closed, else _PARK keeping ``item``.

        A parked producer thread exits holding nothing; the consumer's next get starts a new one.
        """
        with self.lock:
            if self.closed:
                return _STOP
            try:
                self.slots.get_nowait()
            except queue.Empty:
                # A source that holds more than a thread (worker processes) lets them go now; it
                # starts them again if the consumer comes back. Under the lock: once `running` is
                # False a new producer may use the source.
                park = getattr(self.it, "park", None)
                if callable(park):
                    park()
                self.pending = item
                self.running = False
                return _PARK
            return _GO

    def _run(self) -> None:
        if self.thread_setup is not None:
            with contextlib.suppress(Exception):  # an optimisation hook must not stop the data
                self.thread_setup()
        items_put = self.items.put
        slots_get = self.slots.get
        on_demand = self.on_demand
        # a source whose restart is costly (worker processes) may ask for a longer idle wait
        idle_s = getattr(self.src, "idle_exit_s", None) or IDLE_EXIT_S
        parked = False
        try:
            while True:
                item = self.pending
                if item is _NONE:
                    if self.closed:
                        break
                    if on_demand:
                        # Wait for the consumer's request before making anything.
                        try:
                            slots_get(True, idle_s)
                        except queue.Empty:
                            after = self._after_idle(_NONE)
                            if after is _STOP:
                                break
                            if after is _PARK:
                                parked = True
                                return
                        if self.closed:
                            break
                    try:
                        it = self.it
                        if it is None:
                            it = self.it = iter(self.src)
                        item = self._next_copy(it) if self.copy_repeats else next(it)
                    except StopIteration:
                        self.finished = True
                        items_put(_END)
                        break
                    except BaseException as exc:
                        self.finished = True
                        items_put(_Raised(exc))
                        del exc
                        break
                    if on_demand:
                        items_put(item)  # its request token was taken above
                        item = None
                        continue
                else:
                    self.pending = _NONE
                try:
                    slots_get(True, idle_s)
                except queue.Empty:
                    after = self._after_idle(item)
                    if after is _STOP:
                        break
                    if after is _PARK:
                        parked = True
                        return
                if self.closed:  # the token may be close()'s wake-up call
                    break
                items_put(item)
                item = None
        except BaseException as exc:  # a bug here must reach the consumer, not hang it
            self.finished = True
            items_put(_Raised(exc))
        finally:
            if not parked:
                with self.lock:
                    self.running = False
                    owns = self.closed or self.finished
                    if self.closed:
                        self.pending = self.held = _NONE
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
            with contextlib.suppress(Exception):
                close()

    # -- consumer side -----------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the producer without waiting for it; close the source now if no thread holds it."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
            producer_live = self.running
            if not producer_live:
                self.pending = self.held = _NONE
        self.slots.put(None)  # wakes a producer waiting for a free place
        while True:  # drop buffered items now rather than when the feed is collected
            try:
                self.items.get_nowait()
            except queue.Empty:
                break
        if not producer_live:
            # Parked or finished: no thread touches the source, so it is ours to close. A live
            # producer closes it itself once its current item is done.
            self.close_source()


class BufferIterator(Iterator[Any]):
    """The consumer's handle on one iteration of a ThreadBuffer; close() or dropping it stops the producer."""

    def __init__(
        self,
        feed: _Feed,
        repeats: int,
        copy_repeats: bool,
        skip_first: int,
        on_first: Callable[[], None] | None = None,
    ) -> None:
        self._feed: _Feed | None = feed
        self._on_first = on_first
        self._repeats = repeats
        self._consumer_repeats = repeats if not (copy_repeats and repeats > 1) else 1
        self._last: Any = None
        self._left = 0
        self._skip_first = skip_first if self._consumer_repeats > 1 else 0

    def __iter__(self) -> BufferIterator:
        return self

    def __next__(self) -> Any:
        if self._left:
            self._left -= 1
            return self._last
        feed = self._feed
        if feed is None:
            raise StopIteration
        if feed.on_demand:
            feed.request()
            item = feed.items.get()
        else:
            # Unlocked check: with prefetch a producer parks only on a full buffer, so an item is
            # queued for this get even if it parks right after the check.
            if not feed.running and not feed.finished:
                feed.restart()
            item = feed.items.get()
            feed.slots.put(None)  # a buffer place is free again
        if type(item) is _Raised:
            self.close()
            exc = item.exc
            del item
            raise exc  # the producer's frames stay on exc.__traceback__; ours are added on top
        if item is _END:
            self.close()
            raise StopIteration
        if self._on_first is not None:
            first, self._on_first = self._on_first, None
            first()
        if self._consumer_repeats > 1:
            self._last = item
            self._left = self._consumer_repeats - 1 - self._skip_first
            self._skip_first = 0
        return item

    def close(self) -> None:
        """Stop the producer, drop buffered items and close the source; returns without waiting."""
        feed, self._feed = self._feed, None
        self._last = None
        self._left = 0
        if feed is not None:
            feed.close()

    def __enter__(self) -> BufferIterator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


class ThreadBuffer:
    """Iterate `src` on a producer thread, buffering up to `buffer_size` items (drop-in for MONAI's).

    `timeout` is accepted for compatibility and ignored: waits block on a condition, never poll.
    `repeats` yields each item that many times; `copy_repeats=True` deep-copies all but the last.
    `thread_setup` runs first on each producer thread (default ``data_thread_setup()``: torch ops on it
    run single-threaded, see ``hpc_runner.data.threads``).
    `prefetch=False` makes each item only when the consumer asks for it (no overlap with the step).
    """

    def __init__(
        self,
        src: Iterable[Any],
        buffer_size: int = 1,
        timeout: float | None = None,
        repeats: int = 1,
        copy_repeats: bool = False,
        thread_setup: Callable[[], None] | None = None,
        prefetch: bool = True,
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
        self.thread_setup = thread_setup if thread_setup is not None else data_thread_setup()
        self.prefetch = bool(prefetch)

    def iterate(self, skip_repeats: int = 0, on_first: Callable[[], None] | None = None) -> BufferIterator:
        """Start a producer and return the consumer's iterator.

        The first item is yielded `repeats - skip_repeats` times; `on_first` is called when the
        consumer receives its first item.
        """
        skip = max(0, min(int(skip_repeats), self.repeats - 1))
        feed = _Feed(
            self.src,
            self.buffer_size,
            self.repeats,
            self.copy_repeats,
            skip,
            self.thread_setup,
            PRODUCER_NAME,
            prefetch=self.prefetch,
        )
        with feed.lock:
            feed.start()
        return BufferIterator(feed, self.repeats, self.copy_repeats, skip, on_first)

    def __iter__(self) -> BufferIterator:
        return self.iterate()


def buffer_iterator(
    src: Iterable[Any], buffer_size: int = 1, timeout: float | None = None, repeats: int = 1
) -> BufferIterator:
    """Return an iterator over `src` made on a producer thread (MONAI's ``buffer_iterator``)."""
    return ThreadBuffer(src, buffer_size=buffer_size, timeout=timeout, repeats=repeats).iterate()

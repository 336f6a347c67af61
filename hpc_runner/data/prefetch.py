"""Copy batches to the GPU on a side stream, overlapping the steps already queued on the compute stream.

On CUDA, each batch is copied with ``non_blocking=True`` on a side stream and handed over after
``current_stream.wait_stream(side)``; ``record_stream`` tells the caching allocator the memory is
used on the compute stream. The copy of batch N+1 is queued when the loop asks for it: the host is
then ahead of the GPU (the loop does not synchronise per step), so the copy runs while the GPU still
computes step N, and step N never waits for the loader to make batch N+1. A batch yielded again
(``repeats``) is copied once. On CPU the prefetcher is a passthrough with no thread.

Pinning (``pin_memory``): ``"auto"`` (the default) copies unpinned batches until the first batches
show, on CUDA events, that the compute stream hardly waits for data, and pins from then on
(``hpc_runner.data.pin_choice`` says why); ``True`` pins every batch, on the loader's producer thread
when the loader is a ``ThreadDataLoader``; ``False`` never pins. A pinned batch freed while its copy
still reads it is safe: torch's pinned-memory cache reuses a block only after the copies recorded
on it have completed.
"""

from __future__ import annotations

import collections.abc
import contextlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from monai.data import MetaTensor

from hpc_runner.data.pin_choice import PinChoice


def map_tensors(fn: Callable[[torch.Tensor], torch.Tensor], obj: Any) -> Any:
    """Apply fn to every tensor in nested dicts, lists, tuples and namedtuples; MetaTensors keep their meta."""
    if isinstance(obj, torch.Tensor):
        if isinstance(obj, MetaTensor):
            plain = obj.as_tensor()  # plain view: no __torch_function__ cost per op
            out = fn(plain)
            if out is plain:
                return obj
            meta = out.as_subclass(MetaTensor)
            # by reference, as MONAI does for batches: copying the meta dict (and its affine) per
            # batch is host time on the training loop's critical path
            meta.copy_meta_from(obj, copy_attr=False)
            return meta
        return fn(obj)
    if isinstance(obj, collections.abc.Mapping):
        items = {k: map_tensors(fn, v) for k, v in obj.items()}
        if type(obj) is dict:
            return items
        try:
            return type(obj)(items)
        except TypeError:
            return items
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # namedtuple
        return type(obj)(*(map_tensors(fn, v) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(map_tensors(fn, v) for v in obj)
    return obj


def iter_tensors(obj: Any) -> Iterator[torch.Tensor]:
    """Yield every tensor in a nested batch (plain views of MetaTensors)."""
    if isinstance(obj, torch.Tensor):
        yield obj.as_tensor() if isinstance(obj, MetaTensor) else obj
    elif isinstance(obj, collections.abc.Mapping):
        for v in obj.values():
            yield from iter_tensors(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from iter_tensors(v)


def _pin(t: torch.Tensor) -> torch.Tensor:
    if t.device.type != "cpu" or t.is_pinned():
        return t
    return t.pin_memory()


def pin_batch(batch: Any) -> Any:
    """Return the batch with its CPU tensors in pinned memory (no-op without CUDA)."""
    if not torch.cuda.is_available():
        return batch
    return map_tensors(_pin, batch)


def move_to_device(batch: Any, device: torch.device | str, non_blocking: bool = True) -> Any:
    """Return the batch with every tensor on `device` (MetaTensor meta kept)."""
    dev = torch.device(device)
    return map_tensors(lambda t: t.to(dev, non_blocking=non_blocking), batch)


def _cuda_device(device: torch.device | str) -> torch.device:
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


class _DeviceCopyIterator(Iterator[Any]):
    """Copies each batch to the device when the loop asks for it, hands it back at once; see DevicePrefetcher.

    Batch N is returned without asking the source for batch N+1: a loader that is still making
    N+1 would otherwise hold back step N (the loader's own producer thread is what runs ahead). A
    batch the source yields again (``repeats``) is the same object: its device copy is reused.
    """

    def __init__(
        self,
        source: Iterator[Any],
        copy: Callable[[Any], Any],
        handover: Callable[[Any], Any],
        asked: Callable[[], None] | None = None,
    ) -> None:
        self._source = source
        self._copy = copy
        self._handover = handover
        self._asked = asked  # told when the loop asks for a batch: the end of the previous batch's work
        self._last_cpu: Any = None
        self._last_dev: Any = None

    def __iter__(self) -> _DeviceCopyIterator:
        return self

    def __next__(self) -> Any:
        if self._asked is not None:
            self._asked()
        try:
            cpu = next(self._source)
        except BaseException:
            self.close()
            raise
        if cpu is not self._last_cpu:
            # keep only the newest pair: an older device batch would pin its memory for nothing
            self._last_cpu, self._last_dev = None, None
            self._last_dev, self._last_cpu = self._copy(cpu), cpu
        return self._handover(self._last_dev)

    def close(self) -> None:
        """Drop the batch held for repeats and close the source iterator."""
        self._last_cpu, self._last_dev = None, None
        close = getattr(self._source, "close", None)
        if callable(close):
            close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


class _IdleClock:
    """CUDA events on the compute stream: how long it sat idle waiting for each batch, and computed before it.

    ``asked`` is recorded when the loop asks for a batch (the GPU reaches it when it has done the
    previous batch's work), ``ready`` after the handover's wait for the copy. The times are read
    when the events have completed (``query``, no synchronisation) and feed `choice`, as does the
    number of batches whose events the GPU has not reached; once it has decided, no more events are
    recorded.
    """

    def __init__(self, device: torch.device, choice: PinChoice) -> None:
        self.device = device
        self.choice = choice
        self._asked: Any = None
        self._ready: Any = None
        self._open: deque[tuple[Any, Any, Any]] = deque()  # (previous ready, asked, ready) not yet completed

    def _record(self) -> Any:
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self.device))
        return event

    def asked(self) -> None:
        """Mark, on the compute stream, the end of the work queued for the previous batch."""
        if self.choice.decided is None:
            self._asked = self._record()

    def ready(self) -> None:
        """Mark the compute stream's start on the batch just handed over; count the batches whose events completed."""
        if self.choice.decided is not None or self._asked is None:
            return
        ready = self._record()
        if self._ready is not None:
            self._open.append((self._ready, self._asked, ready))
        self._ready, self._asked = ready, None
        while self._open and self._open[0][2].query():
            before, asked, at = self._open.popleft()
            # elapsed_time is in milliseconds
            self.choice.observe(idle_s=asked.elapsed_time(at) / 1e3, busy_s=before.elapsed_time(asked) / 1e3)
        self.choice.queued(len(self._open))


class _CudaCopy:
    """Queue host-to-device copies on a side stream; the compute stream waits for each batch at handover."""

    def __init__(self, device: torch.device, non_blocking: bool, pin: bool | str) -> None:
        self.device = device
        self.non_blocking = non_blocking
        self.choice = PinChoice() if pin == "auto" else None
        self.clock = _IdleClock(device, self.choice) if self.choice is not None else None
        self._pin_always = pin is True
        self.stream = torch.cuda.Stream(device=device)

    @property
    def pin(self) -> bool:
        """Whether the next batch is pinned before its copy."""
        return self.choice.pin if self.choice is not None else self._pin_always

    def copy(self, cpu: Any) -> Any:
        """Queue the copy of one batch on the side stream (pinned first when the choice says so)."""
        if self.pin:
            # only pinned memory copies without the host waiting; no-op for tensors already pinned
            cpu = map_tensors(_pin, cpu)
        with torch.cuda.stream(self.stream):
            # queued now, behind nothing on the side stream: it runs while the compute stream
            # still works through the steps the host queued before
            return map_tensors(lambda t: t.to(self.device, non_blocking=self.non_blocking), cpu)

    def handover(self, batch: Any) -> Any:
        """Make the compute stream wait for the copies queued so far and own the batch's memory."""
        compute = torch.cuda.current_stream(self.device)
        compute.wait_stream(self.stream)
        for t in iter_tensors(batch):
            if t.device.type == "cuda":
                # memory allocated on the side stream is used on the compute stream; without this the
                # allocator could hand it to the next copy while the step still reads it
                t.record_stream(compute)
        if self.clock is not None:
            self.clock.ready()
        return batch


class DevicePrefetcher:
    """Iterate `iterable` with each batch on `device`; on CUDA, the copy overlaps the steps queued before it.

    On CPU it is a passthrough (``iter(prefetcher)`` is ``iter(iterable)``); other devices get a
    synchronous ``.to(device)``; no device starts a thread. `set_epoch`, `skip_batches`,
    `len()`, `dataset` and `batch_size` reach the wrapped loader. `pin_memory` is True, False or
    ``"auto"`` (see the module's docstring); `pin_choice` is the latest CUDA iteration's ``PinChoice``
    under ``"auto"``.
    """

    def __init__(
        self,
        iterable: Iterable[Any],
        device: torch.device | str,
        non_blocking: bool = True,
        pin_memory: bool | str = "auto",
    ) -> None:
        if not (isinstance(pin_memory, bool) or pin_memory == "auto"):
            raise ValueError(f"DevicePrefetcher pin_memory {pin_memory!r} is not one of True, False, 'auto'")
        self.iterable = iterable
        self.device = torch.device(device)
        self.non_blocking = non_blocking
        self.pin_memory = pin_memory
        self.pin_choice: PinChoice | None = None

    def _source(self, pin_in_producer: bool) -> Iterator[Any]:
        iter_from = getattr(self.iterable, "iter_from", None)
        if pin_in_producer and callable(iter_from):
            # Our ThreadDataLoader pins on its producer thread, off the training loop's critical path.
            return iter_from(None, pin_memory=True)
        return iter(self.iterable)

    def __iter__(self) -> Iterator[Any]:
        if self.device.type == "cpu":
            return iter(self.iterable)
        if self.device.type == "cuda":
            if not torch.cuda.is_available():
                raise RuntimeError(f"DevicePrefetcher: device {self.device} requested but CUDA is not available")
            cuda = _CudaCopy(_cuda_device(self.device), self.non_blocking, self.pin_memory)
            self.pin_choice = cuda.choice
            asked = cuda.clock.asked if cuda.clock is not None else None
            return _DeviceCopyIterator(self._source(self.pin_memory is True), cuda.copy, cuda.handover, asked)
        return _DeviceCopyIterator(
            iter(self.iterable), lambda b: move_to_device(b, self.device, non_blocking=False), lambda b: b
        )

    def __len__(self) -> int:
        return len(self.iterable)  # type: ignore[arg-type]

    def set_epoch(self, epoch: int) -> None:
        """Forward to the wrapped loader's set_epoch, if it has one."""
        fn = getattr(self.iterable, "set_epoch", None)
        if callable(fn):
            fn(epoch)

    def __getattr__(self, name: str) -> Any:
        if name in {"iterable", "device", "non_blocking", "pin_memory", "pin_choice"}:
            raise AttributeError(name)
        return getattr(self.iterable, name)


def prefetch_to_device(
    iterable: Iterable[Any], device: torch.device | str, non_blocking: bool = True
) -> Iterator[Any]:
    """Return an iterator over `iterable` with batches on `device`, prefetched on CUDA."""
    return iter(DevicePrefetcher(iterable, device, non_blocking=non_blocking))

"""Copy batch N+1 to the GPU on a side stream while step N runs.

On CUDA, each batch is pinned (on the loader's producer thread when the loader is a
``ThreadDataLoader``, else here), copied with ``non_blocking=True`` on a side stream, and handed
over after ``current_stream.wait_stream(side)``; ``record_stream`` tells the caching allocator the
memory is used on the compute stream. On CPU the prefetcher is a passthrough with no thread.
"""

from __future__ import annotations

import collections.abc
import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from monai.data import MetaTensor


def map_tensors(fn: Callable[[torch.Tensor], torch.Tensor], obj: Any) -> Any:
    """Apply fn to every tensor in nested dicts, lists, tuples and namedtuples; MetaTensors keep their meta."""
    if isinstance(obj, torch.Tensor):
        if isinstance(obj, MetaTensor):
            plain = obj.as_tensor()  # plain view: no __torch_function__ cost per op
            out = fn(plain)
            if out is plain:
                return obj
            meta = out.as_subclass(MetaTensor)
            meta.copy_meta_from(obj, copy_attr=True)
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


class _CudaPrefetchIterator(Iterator[Any]):
    """Keeps one batch in flight on a side stream; see DevicePrefetcher."""

    def __init__(self, source: Iterator[Any], device: torch.device, non_blocking: bool, pin: bool) -> None:
        self._source = source
        self._device = device
        self._non_blocking = non_blocking
        self._pin = pin
        self._stream = torch.cuda.Stream(device=device)
        self._next: Any = None
        self._has_next = False
        self._done = False
        self._error: BaseException | None = None
        self._preload()

    def _preload(self) -> None:
        try:
            cpu = next(self._source)
        except StopIteration:
            self._done = True
            return
        except BaseException as exc:
            # Raised after batch N is handed over, not instead of it: no batch is lost.
            self._error, self._done = exc, True
            return
        if self._pin:
            cpu = map_tensors(_pin, cpu)  # no-op for tensors the loader already pinned
        with torch.cuda.stream(self._stream):
            # Copies are queued on the side stream; they overlap the step queued on the compute stream.
            self._next = map_tensors(
                lambda t: t.to(self._device, non_blocking=self._non_blocking), cpu
            )
        self._has_next = True

    def __iter__(self) -> _CudaPrefetchIterator:
        return self

    def __next__(self) -> Any:
        if not self._has_next:
            error, self._error = self._error, None
            self.close()
            if error is not None:
                raise error
            raise StopIteration
        compute = torch.cuda.current_stream(self._device)
        # The compute stream waits for this batch's copies only: wait_stream is recorded before the
        # next batch's copies are queued on the side stream.
        compute.wait_stream(self._stream)
        batch = self._next
        for t in iter_tensors(batch):
            if t.device.type == "cuda":
                # Memory allocated on the side stream is now used on the compute stream; without
                # this the allocator could hand it to the next copy while the step still reads it.
                t.record_stream(compute)
        self._next, self._has_next = None, False
        if not self._done:
            self._preload()
        return batch

    def close(self) -> None:
        """Drop the batch in flight and close the source iterator."""
        self._next, self._has_next, self._done = None, False, True
        close = getattr(self._source, "close", None)
        if callable(close):
            close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


class DevicePrefetcher:
    """Iterate `iterable` with each batch already on `device`; on CUDA, batch N+1 copies during step N.

    On a non-CUDA device it is a passthrough (``iter(prefetcher)`` is ``iter(iterable)`` for CPU,
    a synchronous ``.to(device)`` for others) and starts no thread. `set_epoch`, `skip_batches`,
    `len()`, `dataset` and `batch_size` reach the wrapped loader.
    """

    def __init__(
        self,
        iterable: Iterable[Any],
        device: torch.device | str,
        non_blocking: bool = True,
        pin_memory: bool = True,
    ) -> None:
        self.iterable = iterable
        self.device = torch.device(device)
        self.non_blocking = non_blocking
        self.pin_memory = pin_memory

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
            dev = _cuda_device(self.device)
            src = self._source(self.pin_memory)
            return _CudaPrefetchIterator(src, dev, self.non_blocking, self.pin_memory)
        return (move_to_device(b, self.device, non_blocking=False) for b in self.iterable)

    def __len__(self) -> int:
        return len(self.iterable)  # type: ignore[arg-type]

    def set_epoch(self, epoch: int) -> None:
        """Forward to the wrapped loader's set_epoch, if it has one."""
        fn = getattr(self.iterable, "set_epoch", None)
        if callable(fn):
            fn(epoch)

    def __getattr__(self, name: str) -> Any:
        if name in {"iterable", "device", "non_blocking", "pin_memory"}:
            raise AttributeError(name)
        return getattr(self.iterable, name)


def prefetch_to_device(
    iterable: Iterable[Any], device: torch.device | str, non_blocking: bool = True
) -> Iterator[Any]:
    """Return an iterator over `iterable` with batches on `device`, prefetched on CUDA."""
    return iter(DevicePrefetcher(iterable, device, non_blocking=non_blocking))

"""ThreadDataLoader: a drop-in for ``monai.data.ThreadDataLoader`` with seeded, restartable epochs.

Batches are made on a producer thread (``ThreadBuffer``) so loading overlaps the training step.
With ``use_thread_workers=True`` and ``num_workers > 0`` items are transformed on worker threads,
each with a private copy of the random transforms; with ``use_thread_workers=False`` and
``num_workers > 0`` on torch worker processes. In every mode item i of epoch e is transformed with
random states derived from (seed, e, i, dataset index) and the shuffle order from (seed, e), so:

* batches are identical for any worker count, thread or process;
* an epoch can be re-run, or resumed at batch k without computing batches 0..k-1 (``iter_from``).
"""

from __future__ import annotations

import collections
import functools
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from monai.data.utils import list_data_collate
from monai.data.utils import worker_init_fn as monai_worker_init_fn

from hpc_runner.data.buffer import BufferIterator, ThreadBuffer
from hpc_runner.data.device_transforms import DeviceTail
from hpc_runner.data.items import ItemFetcher
from hpc_runner.data.pool import OrderedMap
from hpc_runner.data.prefetch import pin_batch
from hpc_runner.data.seeding import derive_seed
from hpc_runner.data.threads import data_thread_setup
from hpc_runner.data.workers import default_num_workers

_SHUFFLE_STREAM = 0x5EED5  # keeps the shuffle stream apart from the item streams


class EpochShuffleSampler(torch.utils.data.Sampler[int]):
    """A permutation of range(len(data_source)) that depends only on (seed, epoch)."""

    def __init__(self, data_source: Sequence[Any], seed: int) -> None:
        self.data_source = data_source
        self.seed = int(seed)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Select the permutation of this epoch."""
        self.epoch = int(epoch)

    def __iter__(self) -> Iterator[int]:
        g = torch.Generator()
        g.manual_seed(derive_seed(self.seed, self.epoch, _SHUFFLE_STREAM))
        return iter(torch.randperm(len(self.data_source), generator=g).tolist())

    def __len__(self) -> int:
        return len(self.data_source)


class EpochShardSampler(torch.utils.data.Sampler[int]):
    """One rank's share of an epoch, as ``DistributedSampler``: the (seed, epoch) permutation (or
    ``range``) padded by wrapping, or with `drop_last` cut, to a multiple of `world_size`, then every
    `world_size`-th index from `rank`. Every rank must use the same seed."""

    def __init__(
        self,
        data_source: Sequence[Any],
        seed: int,
        rank: int,
        world_size: int,
        shuffle: bool = True,
        drop_last: bool = False,
    ) -> None:
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"need 0 <= rank < world_size, got rank {rank} of {world_size}")
        self.data_source = data_source
        self.seed = int(seed)
        self.rank = rank
        self.world_size = world_size
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Select the permutation of this epoch (the same on every rank)."""
        self.epoch = int(epoch)

    def _total(self) -> int:
        n, w = len(self.data_source), self.world_size
        return (n // w) * w if self.drop_last else -(-n // w) * w

    def __iter__(self) -> Iterator[int]:
        n = len(self.data_source)
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(derive_seed(self.seed, self.epoch, _SHUFFLE_STREAM))
            order = torch.randperm(n, generator=g).tolist()
        else:
            order = list(range(n))
        total = self._total()
        if total > n and n:
            order += (order * (-(-(total - n) // n)))[: total - n]
        return iter(order[self.rank : total : self.world_size])

    def __len__(self) -> int:
        return self._total() // self.world_size


class _ListSampler(torch.utils.data.Sampler[Any]):
    """Yields a prepared list (of keys or key batches); the list is replaced each epoch."""

    def __init__(self, items: list[Any]) -> None:
        self.items = items

    def __iter__(self) -> Iterator[Any]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)


class _SeededItems(torch.utils.data.Dataset):
    """Dataset over keys (epoch, position, index) for worker processes: seeds each item, then fetches it."""

    def __init__(self, dataset: Any, seed: int, device_point: int | None = None) -> None:
        self.dataset = dataset
        self.seed = seed
        self.device_point = device_point
        self._fetcher: ItemFetcher | None = None

    def __getitem__(self, key: tuple[int, int, Any]) -> Any:
        if self._fetcher is None:
            # A worker process has its own copy of the dataset: no per-thread copy needed.
            self._fetcher = ItemFetcher(self.dataset, self.seed, private=False, device_point=self.device_point)
        epoch, position, index = key
        return self._fetcher(epoch, position, index)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_fetcher"] = None
        return state


#: Seconds a held, unread process-worker iterator keeps its worker processes before it stops them
#: (they start again at the next batch if it is read again). Longer than IDLE_EXIT_S because
#: starting processes costs ~1 s: a training step up to this long keeps them warm.
PROCESS_IDLE_EXIT_S = 30.0


class SupersededIteration(RuntimeError):
    """An iterator of a persistent_workers loader was read after a newer iteration took the workers."""


class _ProcessBatches(Iterator[Any]):
    """One iteration's batches from torch worker processes, in order, restartable at the next batch.

    ``park()`` (called by ThreadBuffer when the consumer stops asking) stops the worker processes of a
    non-persistent loader, so a ``break`` with the iterator still referenced leaves no process behind;
    reading again starts them at the next batch. With ``persistent_workers`` the processes belong to
    the loader: the newest iteration takes them over, and an older one read afterwards raises
    SupersededIteration instead of blocking the new epoch (or yielding its batches).
    """

    def __init__(self, loader: ThreadDataLoader, keyed: list[Any], auto: bool, pin: bool) -> None:
        self._loader = loader
        self._left = collections.deque(keyed)  # batches not yet yielded
        self._auto = auto
        self._pin = pin
        self._persistent = bool(loader.persistent_workers)
        self._pinned_by_torch = bool(loader.pin_memory)
        self._it: Any = None
        self._closed = False
        self._token = object()  # what the loader holds to say whom its persistent workers serve (no cycle)

    @property
    def idle_exit_s(self) -> float:
        """How long ThreadBuffer's producer waits on an unread buffer before it parks (and calls park)."""
        return PROCESS_IDLE_EXIT_S

    def __iter__(self) -> _ProcessBatches:
        return self

    def _inner(self, keyed: list[Any]) -> torch.utils.data.DataLoader:
        loader, sampler = self._loader, _ListSampler(keyed)
        items = _SeededItems(loader.dataset, loader.seed, loader.device_point)
        if self._auto:
            return torch.utils.data.DataLoader(items, batch_sampler=sampler, **loader._inner_kwargs())
        return torch.utils.data.DataLoader(items, batch_size=None, sampler=sampler, **loader._inner_kwargs())

    def _start(self) -> None:
        keyed = list(self._left)
        if not self._persistent:
            self._it = iter(self._inner(keyed))
            return
        loader = self._loader
        # caller holds loader._inner_lock
        if loader._inner is None:
            loader._inner = self._inner(keyed)
        else:
            (loader._inner.batch_sampler if self._auto else loader._inner.sampler).items = keyed  # type: ignore[union-attr]
        self._it = iter(loader._inner)  # resets the one persistent iterator: it is ours now
        loader._inner_owner = self._token

    def __next__(self) -> Any:
        if self._closed or not self._left:
            self.close()
            raise StopIteration
        if self._persistent:
            loader = self._loader
            superseded = False
            # Held only for one next(), never across a yield: an abandoned iteration must not block
            # the next epoch's.
            with loader._inner_lock:
                if self._it is None:
                    self._start()
                superseded = loader._inner_owner is not self._token
                batch = _DONE if superseded else next(self._it, _DONE)
            if superseded:
                # No frame of the traceback may hold the loader: in a reference cycle, the garbage
                # collector finalizes its worker queues before it stops the workers (10 s stall).
                del loader
                self.close()
                raise SupersededIteration(
                    "this iteration of a persistent_workers ThreadDataLoader was read after a newer one "
                    "started: the worker processes serve one iteration at a time"
                )
        else:
            if self._it is None:
                self._start()
            batch = next(self._it, _DONE)
        if batch is _DONE:
            self.close()
            raise StopIteration
        self._left.popleft()
        return pin_batch(batch) if self._pin and not self._pinned_by_torch else batch

    def park(self) -> None:
        """Stop the worker processes of a non-persistent loader; the next read starts them again."""
        if not self._persistent:
            self._stop()

    def _stop(self) -> None:
        it, self._it = self._it, None
        if it is not None and not self._persistent:
            shutdown: Callable[[], None] | None = getattr(it, "_shutdown_workers", None)
            if shutdown is not None:
                shutdown()

    def close(self) -> None:
        """Stop the worker processes (unless persistent) and end this iteration."""
        self._closed = True
        self._left.clear()
        self._stop()
        self._loader = None  # type: ignore[assignment]  # nothing more to read; frees a persistent loader


_DONE = object()


class ThreadDataLoader(torch.utils.data.DataLoader):
    """Drop-in for ``monai.data.ThreadDataLoader``: batches made on a producer thread, seeded per item.

    MONAI's arguments keep their meaning: `buffer_size` (batches buffered), `buffer_timeout`
    (accepted, unused: nothing polls), `repeats` (yield each batch that many times),
    `use_thread_workers` (workers are threads, not processes) and the torch DataLoader kwargs
    (batch_size, shuffle, sampler, batch_sampler, collate_fn, drop_last, generator, pin_memory...).
    ``collate_fn`` defaults to MONAI's ``list_data_collate``.

    Added: `copy_repeats` deep-copies repeats so in-place changes do not leak between them; `seed`
    (default ``torch.initial_seed()``, or the generator's) fixes shuffle and item random states with
    ``set_epoch``; ``num_workers=None`` means ``default_num_workers()``; `max_in_flight` bounds the
    items being transformed ahead (thread workers); `thread_priority` ("normal", "low", "idle") is the
    CPU priority of our producer and worker threads: "low" (nice 19) lets the training loop's threads
    (torch intra-op, CUDA launches) preempt data work instead of sharing cores with it, but starves
    the data threads when other processes saturate the CPUs. `prefetch=False` makes each batch only
    when the loop asks for it (no overlap with the step; thread workers still run `max_in_flight`
    items ahead).
    """

    def __init__(
        self,
        dataset: Any,
        buffer_size: int = 1,
        buffer_timeout: float = 0.01,
        repeats: int = 1,
        use_thread_workers: bool = False,
        *,
        copy_repeats: bool = False,
        seed: int | None = None,
        max_in_flight: int | None = None,
        thread_priority: str = "normal",
        prefetch: bool = True,
        **kwargs: Any,
    ) -> None:
        if int(repeats) < 1:
            raise ValueError(f"repeats must be >= 1, got {repeats}")
        data_thread_setup(thread_priority)  # validates it
        num_workers = kwargs.pop("num_workers", 0)
        if num_workers is None:
            num_workers = default_num_workers()
        num_workers = int(num_workers)
        generator = kwargs.get("generator")
        if seed is None:
            seed = generator.initial_seed() if generator is not None else torch.initial_seed()
        iterable = isinstance(dataset, torch.utils.data.IterableDataset)
        batched = kwargs.get("batch_sampler") is not None or kwargs.get("batch_size", 1) is not None
        if batched:
            kwargs.setdefault("collate_fn", list_data_collate)
        shuffle = kwargs.pop("shuffle", None)
        if shuffle and not iterable and kwargs.get("sampler") is None and kwargs.get("batch_sampler") is None:
            kwargs["sampler"] = EpochShuffleSampler(dataset, seed)
        elif shuffle is not None:
            kwargs["shuffle"] = shuffle  # torch validates the combination
        # Thread workers serve map-style datasets; an IterableDataset keeps torch's own workers.
        thread_workers = bool(use_thread_workers) and num_workers > 0 and not iterable
        if thread_workers:
            # torch would check (and warn about) a process count and process-only options.
            kwargs.pop("persistent_workers", None)
            kwargs.pop("prefetch_factor", None)
        elif iterable and num_workers > 0:
            kwargs.setdefault("worker_init_fn", monai_worker_init_fn)
        super().__init__(dataset, num_workers=0 if thread_workers else num_workers, **kwargs)
        self.num_workers = num_workers
        self.buffer_size = int(buffer_size)
        self.buffer_timeout = buffer_timeout
        self.repeats = int(repeats)
        self.copy_repeats = bool(copy_repeats)
        self.use_thread_workers = thread_workers
        self.seed = int(seed) & ((1 << 64) - 1)
        self.max_in_flight = max_in_flight
        self.thread_priority = thread_priority
        self.prefetch = bool(prefetch)
        self.device_point: int | None = None  # set by defer_random_transforms (gpu_transforms)
        self._epoch = 0
        self._epoch_used = False
        self._pending_skip = 0
        self._inner: torch.utils.data.DataLoader | None = None
        self._inner_owner: object | None = None  # token of the _ProcessBatches the persistent workers serve
        self._inner_lock = threading.Lock()

    # -- epochs ------------------------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        """The epoch the next iteration uses."""
        return self._epoch + 1 if self._epoch_used else self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration epoch `epoch`: its shuffle order and item random states."""
        self._epoch = int(epoch)
        self._epoch_used = False
        self._sync_samplers(self._epoch)

    def _sync_samplers(self, epoch: int) -> None:
        for s in (self.sampler, self.batch_sampler):
            fn = getattr(s, "set_epoch", None)
            if callable(fn):
                fn(epoch)

    def skip_batches(self, k: int) -> None:
        """Make the next iteration start at yielded batch `k`, without computing batches 0..k-1."""
        if int(k) < 0:
            raise ValueError(f"skip_batches needs k >= 0, got {k}")
        self._pending_skip = int(k)

    def _begin_epoch(self) -> int:
        if self._epoch_used:  # iterated again without set_epoch: move on, as a DataLoader would
            self._epoch += 1
            self._epoch_used = False
        self._sync_samplers(self._epoch)
        return self._epoch

    def _mark_used(self, epoch: int) -> None:
        # An epoch counts as used once a batch of it reached the consumer, so an iterator that is
        # made and dropped unread (e.g. before skip_batches) does not move the loader on.
        if self._epoch == epoch:
            self._epoch_used = True

    def shard(self, rank: int, world_size: int) -> ThreadDataLoader:
        """Make this loader yield only `rank`'s share of every epoch (in place); returns self.

        Same split as ``DistributedSampler`` over the loader's own (seed, epoch) order, so the
        ranks must share ``seed``. Per-item random states include the dataset index, so ranks do
        not repeat each other's augmentations.
        """
        if world_size <= 1 or isinstance(self.sampler, EpochShardSampler):
            return self
        if isinstance(self.dataset, torch.utils.data.IterableDataset):
            raise ValueError("cannot shard an IterableDataset loader; shard the dataset itself")
        if isinstance(self.sampler, EpochShuffleSampler):
            shuffle = True
        elif isinstance(self.sampler, torch.utils.data.SequentialSampler):
            shuffle = False
        else:
            raise ValueError(
                f"cannot shard a loader with a custom sampler ({type(self.sampler).__name__}); "
                "give it a DistributedSampler instead"
            )
        if self.batch_sampler is not None and self.batch_size is None:
            raise ValueError("cannot shard a loader with a custom batch_sampler")
        sampler = EpochShardSampler(self.dataset, self.seed, rank, world_size, shuffle, drop_last=self.drop_last)
        sampler.set_epoch(self._epoch)
        # torch forbids setting these after __init__; the loader is not iterating now.
        object.__setattr__(self, "sampler", sampler)
        if self.batch_sampler is not None:
            batches = torch.utils.data.BatchSampler(sampler, self.batch_size, self.drop_last)
            object.__setattr__(self, "batch_sampler", batches)
        return self

    def defer_random_transforms(self) -> DeviceTail:
        """Leave the random transforms of every item to the returned DeviceTail, to run after the device copy.

        From now on the loader runs each item's chain only up to its device point and passes the item's
        seeds along; the DeviceTail, called on each batch once it is on the device, runs the rest with
        those seeds, so a batch is augmented as the loader alone would have done it.
        """
        if isinstance(self.dataset, torch.utils.data.IterableDataset):
            raise ValueError("gpu_transforms needs a map-style dataset; this loader's is an IterableDataset")
        tail = DeviceTail(self.dataset, self.collate_fn)
        self.device_point = tail.point
        return tail

    # -- iteration ---------------------------------------------------------------------------------
    def __iter__(self) -> BufferIterator:  # type: ignore[override]
        return self.iter_from(None)

    def iter_from(self, start_batch: int | None = None, *, pin_memory: bool | None = None) -> BufferIterator:
        """Iterate this epoch from yielded batch `start_batch` (repeats count), identical to a full run.

        Skipped batches are not computed for map-style datasets (an IterableDataset computes and
        drops them). `None` uses the skip set by skip_batches(). `pin_memory` (default: the
        loader's) pins batches on the producer thread when CUDA is available.
        """
        if start_batch is None:
            start_batch, self._pending_skip = self._pending_skip, 0
        if int(start_batch) < 0:
            raise ValueError(f"start_batch must be >= 0, got {start_batch}")
        epoch = self._begin_epoch()
        first, skip_repeats = divmod(int(start_batch), self.repeats)
        pin = bool(self.pin_memory if pin_memory is None else pin_memory) and torch.cuda.is_available()
        if isinstance(self.dataset, torch.utils.data.IterableDataset):
            src = self._torch_batches(first, pin)
        elif self.num_workers > 0 and not self.use_thread_workers:
            src = self._process_batches(epoch, first, pin)
        else:
            src = self._thread_batches(epoch, first, pin)
        buf = ThreadBuffer(
            src,
            self.buffer_size,
            repeats=self.repeats,
            copy_repeats=self.copy_repeats,
            thread_setup=data_thread_setup(self.thread_priority),
            prefetch=self.prefetch,
        )
        return buf.iterate(skip_repeats=skip_repeats, on_first=functools.partial(self._mark_used, epoch))

    def _index_batches(self) -> list[Any]:
        if self._auto_collation:
            return [list(b) for b in self.batch_sampler]
        return list(self.sampler)

    def _collate(self, items: Any, pin: bool) -> Any:
        batch = self.collate_fn(items) if self.collate_fn is not None else items
        return pin_batch(batch) if pin else batch

    def _thread_batches(self, epoch: int, first: int, pin: bool) -> Iterator[Any]:
        batches = self._index_batches()
        auto = self._auto_collation
        sizes = [len(b) for b in batches] if auto else [1] * len(batches)
        position = sum(sizes[:first])
        todo = batches[first:]
        if self.num_workers == 0 or not self.use_thread_workers:
            fetch = ItemFetcher(self.dataset, self.seed, device_point=self.device_point)
            for b in todo:
                if auto:
                    items = [fetch(epoch, position + j, idx) for j, idx in enumerate(b)]
                    position += len(b)
                else:
                    items = fetch(epoch, position, b)
                    position += 1
                yield self._collate(items, pin)
            return
        keys: list[tuple[int, Any]] = []
        for b in todo:
            for idx in b if auto else [b]:
                keys.append((position, idx))
                position += 1
        workers = self.num_workers
        per_batch = max(sizes) if sizes else 1
        in_flight = self.max_in_flight or max(2 * workers, 2 * per_batch)
        dataset, seed, point = self.dataset, self.seed, self.device_point

        def work(fetch: ItemFetcher, _: int, key: tuple[int, Any]) -> Any:
            return fetch(epoch, key[0], key[1])

        omap: OrderedMap[Any] = OrderedMap(
            keys, work, lambda: ItemFetcher(dataset, seed, device_point=point), workers, in_flight,
            priority=self.thread_priority,
        )
        try:
            for b in todo:
                items = [next(omap) for _ in b] if auto else next(omap)
                yield self._collate(items, pin)
        finally:
            omap.close()

    def _inner_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {
            "num_workers": self.num_workers,
            "collate_fn": self.collate_fn,
            "pin_memory": self.pin_memory,
            "timeout": self.timeout,
            "worker_init_fn": self.worker_init_fn,
            "multiprocessing_context": self.multiprocessing_context,
            "generator": self.generator,
            "prefetch_factor": self.prefetch_factor,
            "persistent_workers": self.persistent_workers,
        }
        for name in ("pin_memory_device", "in_order"):
            if hasattr(self, name):
                kw[name] = getattr(self, name)
        return kw

    def _process_batches(self, epoch: int, first: int, pin: bool) -> Iterator[Any]:
        batches = self._index_batches()
        auto = self._auto_collation
        position = sum(len(b) for b in batches[:first]) if auto else first
        keyed: list[Any] = []
        for b in batches[first:]:
            if auto:
                keyed.append([(epoch, position + j, idx) for j, idx in enumerate(b)])
                position += len(b)
            else:
                keyed.append((epoch, position, b))
                position += 1
        return _ProcessBatches(self, keyed, auto, pin)

    def _torch_batches(self, first: int, pin: bool) -> Iterator[Any]:
        it = torch.utils.data.DataLoader.__iter__(self)
        try:
            for k, batch in enumerate(it):
                if k >= first:
                    yield pin_batch(batch) if pin and not self.pin_memory else batch
        finally:
            shutdown: Callable[[], None] | None = getattr(it, "_shutdown_workers", None)
            if shutdown is not None and not self.persistent_workers:
                shutdown()
            del it

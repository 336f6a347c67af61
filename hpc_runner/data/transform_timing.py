"""How long each transform of the data pipeline takes: per call, per thread, cached or every epoch.

`TimedCompose` is a MONAI ``Compose`` that times each of its transforms with ``time.perf_counter_ns``
and adds the time to an accumulator of the calling thread (no lock on that path); `TransformTimer.rows()`
merges the threads' accumulators when the run ends. ``hpc_runner.data.compose.chain`` returns one and
``CachedDataset`` makes one of the chain it is given, so every run of a bundle built from them is
measured; ``HPCR_TRANSFORM_TIMING=0`` turns it off (`timed` then returns the chain as it is).

A call is the *cached* stage when a cache fills its deterministic prefix: MONAI's CacheDataset and our
PersistentCacheDataset call the chain from transform 0 with ``threading=True`` or an ``end`` before the
first random transform. Every other call (the random part after the cache, or a whole chain without a
cache) is the *every epoch* stage. Transforms that run in torch worker processes (``num_workers > 0``
without ``use_thread_workers``) are timed in those processes and not reported.

A file-reading transform (``LoadImage(d)``, ``hpc_runner.data.reads.is_reader``) runs through
``reads.call_reading``: its loads are counted and, from shared storage, bounded by the node's read slots; its
time (the wait for a slot included) is what the run report shows as the data wait's reading part.
"""

from __future__ import annotations

import copy
import functools
import re
import threading
import time
from collections.abc import Iterable
from typing import Any

from monai.transforms import Compose
from monai.transforms.traits import RandomizableTrait
from monai.transforms.transform import Transform

from hpc_runner.data.reads import call_reading, is_reader
from hpc_runner.records.environment import switch

ENV = "HPCR_TRANSFORM_TIMING"
CACHED, EVERY_EPOCH = "cached", "every epoch"
RANDOM, DETERMINISTIC, CALLABLE = "random", "deterministic", "callable"
_LAST_NUMBER = re.compile(r"\d+")


def enabled() -> bool:
    """Whether transform timing is on (``HPCR_TRANSFORM_TIMING`` unset or 1/true/yes/on; 0/false/no/off turn it
    off; any other value is refused, naming it)."""
    return switch(ENV, default=True)


def kind_of(transform: Any) -> str:
    """Return "random", "deterministic", or "callable" (not a MONAI Transform: MONAI's cache stops before it)."""
    if isinstance(transform, RandomizableTrait):
        return RANDOM
    return DETERMINISTIC if isinstance(transform, Transform) else CALLABLE


def transform_label(transform: Any) -> str:
    """Return the name a transform is reported under: its class, or the function's name."""
    if isinstance(transform, Compose):
        return f"Compose[{', '.join(transform_label(t) for t in transform.transforms[:4])}" + (
            ", ...]" if len(transform.transforms) > 4 else "]"
        )
    name = getattr(transform, "__name__", None)
    return str(name) if isinstance(name, str) else type(transform).__name__


class TransformTimer:
    """Per-thread accumulators of (transform, stage) -> [calls, nanoseconds]; shared by every copy of a chain.

    A thread registers its accumulator once (under a lock); after that, adding a time is two integer
    additions in a dict only that thread writes. Deep copies and pickles of a chain keep the same timer
    in the same process (``__deepcopy__`` returns it).
    """

    def __init__(self) -> None:
        self._local = threading.local()
        self._lock = threading.Lock()
        self._threads: list[tuple[str, dict[tuple[str, str, str], list[int]]]] = []

    def __deepcopy__(self, memo: dict) -> TransformTimer:
        return self  # the per-thread copies of a dataset report into one timer

    def __reduce__(self) -> tuple[Any, ...]:
        return (TransformTimer, ())  # a worker process times into its own (unreported) timer

    def accumulator(self) -> dict[tuple[str, str, str], list[int]]:
        """Return the calling thread's accumulator (registering it the first time)."""
        acc = getattr(self._local, "acc", None)
        if acc is None:
            acc = self._local.acc = {}
            with self._lock:
                self._threads.append((threading.current_thread().name, acc))
        return acc

    def rows(self) -> list[dict[str, Any]]:
        """Return one row per (transform, stage), slowest total first: calls, total_s, mean_ms, thread names."""
        with self._lock:
            threads = list(self._threads)
        merged: dict[tuple[str, str, str], list[Any]] = {}
        for thread, acc in threads:
            for key, (calls, ns) in acc.copy().items():  # dict.copy is atomic under the GIL
                row = merged.setdefault(key, [0, 0, set()])
                row[0] += calls
                row[1] += ns
                row[2].add(thread)
        return sorted(
            (_row(name, stage, kind, calls, ns, names) for (name, stage, kind), (calls, ns, names) in merged.items()),
            key=lambda r: (-r["total_s"], r["name"]),
        )


def _row(name: str, stage: str, kind: str, calls: int, ns: int, threads: set[str]) -> dict[str, Any]:
    return {
        "name": name,
        "calls": calls,
        "total_s": round(ns / 1e9, 6),
        "mean_ms": round(ns / 1e6 / calls, 4) if calls else 0.0,
        "stage": stage,
        "kind": kind,
        "threads": sorted(threads),
    }


def thread_groups(names: Iterable[str]) -> list[str]:
    """Return thread names with numbered siblings folded: ``hpc-runner-data-worker-1..7`` -> ``...-N (7 threads)``."""
    groups: dict[str, set[str]] = {}
    for name in names:
        digits = list(_LAST_NUMBER.finditer(name))
        key = name if not digits else name[: digits[-1].start()] + "N" + name[digits[-1].end() :]
        groups.setdefault(key, set()).add(name)
    out = []
    for key, members in sorted(groups.items()):
        out.append(next(iter(members)) if len(members) == 1 else f"{key} ({len(members)} threads)")
    return out


class TimedCompose(Compose):
    """A ``Compose`` that reports the time of each transform to its `TransformTimer` (``.timer``).

    With lazy resampling on, one call is reported as a whole (the work happens when pending
    operations are applied, not in the transform that queued them).
    """

    _labels: tuple[list[Any], list[tuple[str, str]]] | None = None
    _readers: tuple[list[Any], list[bool]] | None = None

    def __init__(self, *args: Any, timer: TransformTimer | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.timer = timer or TransformTimer()

    def _keys(self) -> list[tuple[str, str]]:
        """(label, kind) of each transform; labels of repeated classes get ``#2``, ``#3`` by position."""
        cached = self._labels
        if cached is not None and cached[0] is self.transforms and len(cached[1]) == len(self.transforms):
            return cached[1]
        seen: dict[str, int] = {}
        keys = []
        for t in self.transforms:
            label = transform_label(t)
            seen[label] = seen.get(label, 0) + 1
            keys.append((label if seen[label] == 1 else f"{label} #{seen[label]}", kind_of(t)))
        self._labels = (self.transforms, keys)
        return keys

    def _reads(self) -> list[bool]:
        """Whether each transform reads files (``hpc_runner.data.reads.is_reader``)."""
        cached = self._readers
        if cached is not None and cached[0] is self.transforms and len(cached[1]) == len(self.transforms):
            return cached[1]

        flags = [is_reader(t) for t in self.transforms]
        self._readers = (self.transforms, flags)
        return flags

    def __call__(self, input_: Any, start: int = 0, end: int | None = None, threading: bool = False,
                 lazy: bool | None = None) -> Any:
        """Run transforms ``start``..``end`` as Compose does, timing each one."""
        if self._lazy if lazy is None else lazy:
            return self._timed_whole(input_, start, end, threading, lazy)
        stop = len(self.transforms) if end is None else end
        stage = CACHED if start == 0 and (threading or end is not None) else EVERY_EPOCH
        keys = self._keys()
        reads = self._reads()
        acc = self.timer.accumulator()
        data = input_
        call = super().__call__
        clock = time.perf_counter_ns
        for i in range(start, stop):
            t0 = clock()
            if reads[i]:
                one = functools.partial(call, data, start=i, end=i + 1, threading=threading, lazy=lazy)
                data = call_reading(one, self.transforms[i], data)
            else:
                data = call(data, start=i, end=i + 1, threading=threading, lazy=lazy)
            dt = clock() - t0
            label, kind = keys[i]
            entry = acc.get((label, stage, kind))
            if entry is None:
                entry = acc[(label, stage, kind)] = [0, 0]
            entry[0] += 1
            entry[1] += dt
        return data

    def _timed_whole(self, input_: Any, start: int, end: int | None, threading: bool, lazy: bool | None) -> Any:
        t0 = time.perf_counter_ns()
        data = super().__call__(input_, start=start, end=end, threading=threading, lazy=lazy)
        dt = time.perf_counter_ns() - t0
        stage = CACHED if start == 0 and (threading or end is not None) else EVERY_EPOCH
        key = (f"lazy {transform_label(self)}", stage, DETERMINISTIC if stage == CACHED else RANDOM)
        entry = self.timer.accumulator().setdefault(key, [0, 0])
        entry[0] += 1
        entry[1] += dt
        return data


def timed(transform: Any, timer: TransformTimer | None = None) -> Any:
    """Return ``transform`` as a `TimedCompose` (a plain Compose, unchanged otherwise; no copy of its transforms).

    The new object shares the transforms, their random states and the settings of the original; unlike
    building a new Compose, it does not reseed the transforms.
    """
    if isinstance(transform, TimedCompose) or not enabled():
        return transform
    if type(transform) is not Compose:
        return transform  # OneOf, RandomOrder...: their own __call__ decides what runs; not timed
    out = copy.copy(transform)
    out.__class__ = TimedCompose
    out.timer = timer or TransformTimer()
    return out


def timers_in(*roots: Any, depth: int = 4) -> list[TransformTimer]:
    """Return the timers of the TimedComposes reachable from ``roots`` (loaders, datasets), each once."""
    found: dict[int, TransformTimer] = {}
    seen: set[int] = set()

    def walk(obj: Any, level: int) -> None:
        if obj is None or id(obj) in seen or level > depth:
            return
        seen.add(id(obj))
        if isinstance(obj, TimedCompose):
            found.setdefault(id(obj.timer), obj.timer)
            return
        for name in ("dataset", "datasets", "transform"):
            try:
                value = getattr(obj, name, None)
            except Exception:  # a property that cannot answer (e.g. a dataset not set up)
                continue
            if isinstance(value, list | tuple):
                for v in value[:64]:
                    walk(v, level + 1)
            else:
                walk(value, level + 1)

    for root in roots:
        walk(root, 0)
    return list(found.values())


def merged_rows(timers: Iterable[TransformTimer]) -> list[dict[str, Any]]:
    """Return the rows of several timers merged by (name, stage, kind), slowest first; numbered threads folded."""
    merged: dict[tuple[str, str, str], dict[str, Any]] = {}
    for timer in timers:
        for row in timer.rows():
            key = (row["name"], row["stage"], row["kind"])
            if key not in merged:
                merged[key] = dict(row)
                continue
            m = merged[key]
            m["calls"] += row["calls"]
            m["total_s"] = round(m["total_s"] + row["total_s"], 6)
            m["mean_ms"] = round(1000 * m["total_s"] / m["calls"], 4) if m["calls"] else 0.0
            m["threads"] = sorted(set(m["threads"]) | set(row["threads"]))
    for m in merged.values():
        m["threads"] = thread_groups(m["threads"])
    return sorted(merged.values(), key=lambda r: (-r["total_s"], r["name"]))


def table_text(rows: list[dict[str, Any]], limit: int = 10) -> str:
    """Return the rows as an aligned text table (the slowest ``limit``)."""
    if not rows:
        return "no transform timed"
    shown = rows[:limit]
    width = max(9, *(len(r["name"]) for r in shown))
    head = f"{'transform':<{width}}  {'stage':<11}  {'kind':<13}  {'calls':>6}  {'total s':>8}  {'mean ms':>8}  threads"
    lines = [head]
    for r in shown:
        lines.append(
            f"{r['name']:<{width}}  {r['stage']:<11}  {r.get('kind', ''):<13}  {r['calls']:>6}  {r['total_s']:>8.3f}  "
            f"{r['mean_ms']:>8.2f}  {', '.join(r['threads'])}"
        )
    if len(rows) > limit:
        lines.append(f"... and {len(rows) - limit} more")
    return "\n".join(lines)

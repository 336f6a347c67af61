"""What each dataset of a bundle caches, what it recomputes every epoch, and what that costs.

`cache_plan(cfg)` finds every dataset in the config (an id with a `_target_` dataset class, `data` and
`transform`), splits its transform chain where MONAI does (the first random or non-MONAI transform),
and, with ``measure=True``, really runs the chain on the data: each transform is timed per item, the
cached items are sized, and one cache fill is set against one uncached epoch. It also warns about
orders that waste the cache: an expensive deterministic transform after the first random one (it runs
every epoch), padding before the cache (the cache stores the padding), a cache stopped by a callable
MONAI cannot classify, and MONAI `PersistentDataset` keys that ignore the transforms (MONAI #999).

`fill_caches(cfg)` builds the persistent datasets of a config once, so that later runs reuse the
files (``hpc-runner cache``); `log_cache_summary(cfg, expanded, logger)` is the line a run prints at start.
"""

from __future__ import annotations

import contextlib
import io
import logging
import time
from collections.abc import Iterator
from copy import deepcopy
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hpc_runner.config.bundle_config import META_KEY, BundleConfig
from hpc_runner.config.ids import get_by_id
from hpc_runner.config.monai_bridge import build_parser, bundle_on_sys_path, run_expr
from hpc_runner.data.cache_key import cache_split, item_key, stop_reason, transform_key, transform_name
from hpc_runner.errors import ConfigError

INIT_ID = "initialize"
DEFAULT_MAX_ITEMS = 16
MiB = 1024 * 1024

# Deterministic transforms that cost real time per item: recomputing them every epoch is the waste.
EXPENSIVE = frozenset(
    {
        "LoadImage", "Spacing", "Orientation", "Resample", "SpatialResample", "ResampleToMatch", "Resize", "Zoom",
        "Affine", "Rotate", "CropForeground", "GaussianSmooth", "MedianSmooth", "SavitzkyGolaySmooth",
        "HistogramNormalize", "DistanceTransformEDT", "KeepLargestConnectedComponent", "FillHoles",
        "RemoveSmallObjects", "LabelToContour", "ForegroundMask",
    }
)
# Transforms that make an image bigger; before the cache they make every cached item bigger.
PADDING = frozenset({"SpatialPad", "BorderPad", "DivisiblePad", "Pad", "ResizeWithPadOrCrop"})
# A deterministic transform after the cache taking this share of an uncached item's time is worth caching.
SLOW_SHARE, SLOW_MIN_S = 0.2, 0.002


def base_name(name: str) -> str:
    """Return the array-transform name of a dictionary transform (``Spacingd`` -> ``Spacing``)."""
    for suffix in ("Dict", "d", "D"):
        if name.endswith(suffix) and name[: -len(suffix)] in EXPENSIVE | PADDING:
            return name[: -len(suffix)]
    return name


@dataclass
class TransformStep:
    """One transform of a dataset's chain, where it runs and what it cost per item."""

    name: str
    cached: bool
    random: bool
    seconds: float | None = None  # mean per item, when measured
    growth: float | None = None  # output elements / input elements, when measured and defined


@dataclass
class DatasetPlan:
    """The cache plan of one dataset id."""

    id: str
    target: str
    kind: str  # "memory", "persistent", "monai-persistent" or "none"
    cache_dir: str | None = None
    folder: str | None = None  # the persistent folder of this transform chain
    items: int | None = None
    cached_items: int | None = None
    present: int | None = None  # persistent items already in the folder
    steps: list[TransformStep] = field(default_factory=list)
    stop: str | None = None  # why the cache stops where it does
    measured_items: int = 0
    bytes_per_item: float | None = None
    disk_bytes_per_item: float | None = None
    fill_s: float | None = None
    uncached_epoch_s: float | None = None
    cached_epoch_s: float | None = None
    keep_in_memory: bool = False
    error: str | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def cached(self) -> list[TransformStep]:
        """The transforms computed once and cached."""
        return [s for s in self.steps if s.cached]

    @property
    def per_epoch(self) -> list[TransformStep]:
        """The transforms that run every epoch."""
        return [s for s in self.steps if not s.cached]

    @property
    def memory_bytes(self) -> float | None:
        """Bytes the cache holds in memory (None when not measured)."""
        if self.bytes_per_item is None or self.cached_items is None:
            return None
        if self.kind in ("memory",) or self.keep_in_memory:
            return self.bytes_per_item * self.cached_items
        return 0.0

    @property
    def disk_bytes(self) -> float | None:
        """Bytes the persistent cache holds on disk (None when not measured or not persistent)."""
        if self.disk_bytes_per_item is None or self.cached_items is None or self.kind == "memory":
            return None
        return self.disk_bytes_per_item * self.cached_items


@dataclass
class CachePlan:
    """The cache plan of a bundle config: one `DatasetPlan` per dataset id."""

    bundle: str
    datasets: list[DatasetPlan]
    measured: bool
    initialized: bool = False
    seconds: float = 0.0
    max_items: int = DEFAULT_MAX_ITEMS

    @property
    def warnings(self) -> list[str]:
        """Every dataset's warnings, each prefixed by its id."""
        return [f"{d.id}: {w}" for d in self.datasets for w in d.warnings]

    def to_dict(self) -> dict:
        """Return a JSON-ready dict."""
        out = asdict(self)
        for d, plan in zip(out["datasets"], self.datasets):
            d["memory_bytes"], d["disk_bytes"] = plan.memory_bytes, plan.disk_bytes
        out["warnings"] = self.warnings
        return out

    def summary_line(self) -> str:
        """Return the one line a run prints at start: per dataset, how many transforms are cached and where."""
        if not self.datasets:
            return "cache: no dataset with data and transform in the config"
        parts = []
        for d in self.datasets:
            if d.error:
                parts.append(f"{d.id} (not analysed: {d.error})")
                continue
            where = {"memory": "in memory", "persistent": f"in {d.folder}",
                     "monai-persistent": f"in {d.cache_dir} (MONAI PersistentDataset)"}.get(d.kind)
            cached, epoch = d.cached, d.per_epoch
            if where is None or not cached:
                parts.append(f"{d.id} caches nothing, {len(epoch)} transforms every epoch")
                continue
            span = cached[0].name if len(cached) == 1 else f"{cached[0].name}..{cached[-1].name}"
            tail = f", {len(epoch)} every epoch (from {epoch[0].name})" if epoch else ", nothing every epoch"
            parts.append(f"{d.id} caches {len(cached)} ({span}) {where}{tail}")
        return "cache: " + "; ".join(parts)

    def format(self) -> str:
        """Return the plan as the text ``hpc-runner config --cache-plan`` prints."""
        lines = []
        if self.measured:
            init = f"ran '{INIT_ID}' as a run does, then " if self.initialized else ""
            lines.append(
                f"Cache plan of {self.bundle}, measured on the data: {init}ran each dataset's transforms on up to "
                f"{self.max_items} items in one thread ({self.seconds:.1f} s). Larger datasets are extrapolated."
            )
        else:
            lines.append(f"Cache plan of {self.bundle} (not measured: the transforms only, no data read)")
        for d in self.datasets:
            lines.append("")
            lines.extend(_format_dataset(d))
        lines.append("")
        warns = self.warnings
        if warns:
            lines.append("warnings:")
            lines.extend(f"  - {w}" for w in warns)
        else:
            lines.append("warnings: none")
        return "\n".join(lines)


def _ms(seconds: float | None) -> str:
    return "" if seconds is None else f" {seconds * 1000:.1f} ms"


def _size(n: float | None) -> str:
    if n is None:
        return "?"
    for unit, scale in (("GiB", 1024 * MiB), ("MiB", MiB), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def _items(n: int | None) -> str:
    return f"{n} item" if n == 1 else f"{n} items"


def _format_dataset(d: DatasetPlan) -> list[str]:
    short = d.target.rsplit(".", 1)[-1]
    if d.error:
        return [f"{d.id}: {short}: not analysed: {d.error}"]
    where = {
        "memory": "cached in memory" + (" (MONAI CacheDataset, cache_dir: null)" if short == "CachedDataset" else ""),
        "persistent": f"persistent cache in {d.folder}",
        "monai-persistent": f"MONAI persistent cache in {d.cache_dir}",
        "none": "no cache: every transform runs every epoch",
    }[d.kind]
    count = ""
    if d.items is not None:
        count = f", {_items(d.items)}, {d.cached_items} cached"
        if d.present is not None:
            count += f" ({d.present} of them already on disk)"
    lines = [f"{d.id}: {short}, {where}{count}"]
    per_item = " (per item)" if any(s.seconds is not None for s in d.steps) else ""
    cached = ", ".join(f"{s.name}{_ms(s.seconds)}" for s in d.cached) or "(nothing)"
    epoch = ", ".join(f"{s.name}{_ms(s.seconds)}" for s in d.per_epoch) or "(nothing)"
    lines.append(f"  cached once:  {cached}{per_item if d.cached else ''}")
    stop = f"  [the cache stops here: {d.stop}]" if d.stop and d.kind != "none" else ""
    lines.append(f"  every epoch:  {epoch}{stop}")
    if d.measured_items:
        if d.kind == "memory" or d.keep_in_memory:
            lines.append(f"  memory:       {_size(d.memory_bytes)} ({_size(d.bytes_per_item)} per item)")
        if d.kind in ("persistent", "monai-persistent"):
            mem = "" if d.keep_in_memory else "; nothing kept in memory (items are read each epoch)"
            lines.append(f"  disk:         {_size(d.disk_bytes)} ({_size(d.disk_bytes_per_item)} per item){mem}")
        if d.kind == "none":
            lines.append(f"  a cache would hold {_size((d.bytes_per_item or 0) * (d.items or 0))} in memory")
        fill = f"cache fill {d.fill_s:.2f} s" if d.kind != "none" else f"a cache fill would take {d.fill_s:.2f} s"
        if d.kind in ("persistent",) and d.present == d.cached_items and d.cached_items:
            fill += " (already filled: a run only reads)"
        cached_epoch = d.cached_epoch_s if d.kind != "none" else d.uncached_epoch_s
        sampled = d.items and d.measured_items < d.items
        lines.append(
            f"  time:         {fill}; one uncached epoch {d.uncached_epoch_s:.2f} s; "
            f"one epoch {'from the cache' if d.kind != 'none' else 'as configured'} {cached_epoch:.2f} s"
            + (f" (measured on {d.measured_items} of {d.items} items)" if sampled else "")
        )
        saved = (d.uncached_epoch_s or 0.0) - (d.cached_epoch_s or 0.0)
        if d.kind != "none" and saved > 0:
            lines.append(f"                the cache saves {saved:.2f} s per epoch")
        elif d.kind != "none":
            lines.append("                reading the cache was not measurably faster than recomputing here")
    return lines


# -- finding datasets in a config ----------------------------------------------------------------


def _walk(node: Any, prefix: str) -> Iterator[tuple[str, dict]]:
    if isinstance(node, dict):
        if isinstance(node.get("_target_"), str) and "transform" in node and "data" in node:
            yield prefix, node
            return
        for k, v in node.items():
            if prefix == "" and k == META_KEY:
                continue
            yield from _walk(v, f"{prefix}::{k}" if prefix else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, f"{prefix}::{i}" if prefix else str(i))


def dataset_ids(config: dict) -> list[str]:
    """Return the ids of the config entries that look like datasets (`_target_`, `data` and `transform`)."""
    return [i for i, node in _walk(config, "") if not _disabled(node)]


def _disabled(node: dict) -> bool:
    flag = node.get("_disabled_", False)
    return flag.strip().lower() == "true" if isinstance(flag, str) else bool(flag)


def _dataset_class(parser: Any, ds_id: str) -> type | None:
    from pydoc import locate

    import torch

    item = parser.ref_resolver.get_item(ds_id)
    name = item.resolve_module_name() if item is not None else None
    cls = locate(name) if isinstance(name, str) else name
    return cls if isinstance(cls, type) and issubclass(cls, torch.utils.data.Dataset) else None


def _kind(cls: type, cache_dir: Any) -> str:
    from monai.data import CacheDataset, PersistentDataset

    from hpc_runner.data.cached import CachedDataset, PersistentCacheDataset  # deferred: imports torch

    if issubclass(cls, CachedDataset):
        return "memory" if cache_dir is None or str(cache_dir).strip() in ("", "null", "None") else "persistent"
    if issubclass(cls, PersistentCacheDataset):
        return "persistent"
    if issubclass(cls, PersistentDataset):
        return "monai-persistent"
    if issubclass(cls, CacheDataset):
        return "memory"
    return "none"


def _arg(parser: Any, ds_id: str, node: dict, name: str, default: Any = None) -> Any:
    if name not in node:
        return default
    return parser.get_parsed_content(f"{ds_id}::{name}")


@contextlib.contextmanager
def _parser_for(cfg: BundleConfig, expanded: dict | None = None):
    with bundle_on_sys_path(cfg.code_dir):
        parser = build_parser(cfg, expanded)
        parser.parse(reset=True)
        yield parser


# -- analysing and measuring one dataset -----------------------------------------------------------


def _static_steps(compose: Any, split: int) -> list[TransformStep]:
    from monai.transforms import RandomizableTrait

    return [
        TransformStep(transform_name(t), cached=i < split, random=isinstance(t, RandomizableTrait))
        for i, t in enumerate(compose.transforms)
    ]


def _numel(obj: Any) -> int:
    if hasattr(obj, "shape") and hasattr(obj, "dtype"):
        n = 1
        for s in obj.shape:
            n *= int(s)
        return n
    if isinstance(obj, dict):
        return sum(_numel(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_numel(v) for v in obj)
    return 0


def _run_timed(compose: Any, data: Any, start: int, end: int, times: list[float], growth: list[list[float]],
               threading: bool) -> Any:
    if getattr(compose, "lazy", False):  # lazy resampling fuses transforms: time the segment as a whole
        t0 = time.perf_counter()
        data = compose(data, start=start, end=end, threading=threading)
        times[start] += time.perf_counter() - t0
        return data
    for i in range(start, end):
        before = _numel(data)
        t0 = time.perf_counter()
        data = compose(data, start=i, end=i + 1, threading=threading)
        times[i] += time.perf_counter() - t0
        after = _numel(data)
        if before > 0:
            growth[i].append(after / before)
    return data


def _measure(plan: DatasetPlan, compose: Any, split: int, data: Any, max_items: int, copy_cache: bool) -> None:
    import torch

    from hpc_runner.data.cached import nbytes  # deferred: imports torch

    n = len(data)
    plan.items = n
    k = min(n, max_items)
    if k == 0:
        return
    count = len(compose.transforms)
    times = [0.0] * count
    growth: list[list[float]] = [[] for _ in range(count)]
    sizes: list[int] = []
    disk: list[int] = []
    copy_s = save_s = load_s = 0.0
    persistent = plan.kind in ("persistent", "monai-persistent")
    # one untimed item first: the first read of a format imports and sets up its reader
    warm = compose(deepcopy(data[0]), end=split, threading=True)
    if split < count:
        compose(warm, start=split)
    for idx in range(k):
        item = _run_timed(compose, deepcopy(data[idx]), 0, split, times, growth, threading=True)
        sizes.append(nbytes(item))
        t0 = time.perf_counter()
        copied = deepcopy(item) if copy_cache else item
        copy_s += time.perf_counter() - t0
        if persistent:
            from monai.utils import convert_to_tensor

            buf = io.BytesIO()
            t0 = time.perf_counter()
            torch.save(convert_to_tensor(item, convert_numeric=False, track_meta=False), buf)
            save_s += time.perf_counter() - t0
            disk.append(buf.tell())
            buf.seek(0)
            t0 = time.perf_counter()
            copied = torch.load(buf, weights_only=False)
            load_s += time.perf_counter() - t0
        _run_timed(compose, copied, split, count, times, growth, threading=False)
    mean = [t / k for t in times]
    for step, t, g in zip(plan.steps, mean, growth):
        step.seconds = t
        step.growth = max(g) if g else None
    prefix = sum(mean[:split])
    suffix = sum(mean[split:])
    cached = plan.cached_items or 0
    plan.measured_items = k
    plan.bytes_per_item = sum(sizes) / k
    read = (load_s if persistent and not plan.keep_in_memory else copy_s) / k
    plan.fill_s = (cached if plan.kind != "none" else n) * (prefix + save_s / k)  # "none": what a fill would take
    plan.uncached_epoch_s = n * (prefix + suffix)
    plan.cached_epoch_s = cached * (read + suffix) + (n - cached) * (prefix + suffix)
    if disk:
        plan.disk_bytes_per_item = sum(disk) / k


def _warn(plan: DatasetPlan, compose: Any, split: int, measured: bool, memory_available: int | None,
          transforms_hashed: bool = False) -> None:
    from monai.transforms import Compose, Transform

    steps = plan.steps
    if plan.kind == "none":
        if any(base_name(s.name) in EXPENSIVE for s in steps if not s.random):
            plan.warnings.append(
                f"{plan.target.rsplit('.', 1)[-1]} caches nothing, so its deterministic transforms run every epoch: "
                "use hpc_runner.data.cached.CachedDataset (cache_dir: null for memory, a folder for disk)"
            )
        return
    if split < len(compose.transforms):
        stopper = compose.transforms[split]
        if isinstance(stopper, Compose) or not isinstance(stopper, Transform):
            hint = ("flatten it into the outer list ($@a + @b)" if isinstance(stopper, Compose)
                    else "if it is deterministic, make it a MONAI Transform (e.g. Lambdad) so it can be cached")
            plan.warnings.append(f"the cache stops at {steps[split].name} (position {split}): {plan.stop}; {hint}")
    first_random = next((s.name for s in steps[split:] if s.random), steps[split].name if split < len(steps) else None)
    total = sum(s.seconds or 0.0 for s in steps)
    for s in steps[split + 1 :] if split < len(steps) else []:
        if s.random:
            continue
        slow = s.seconds is not None and s.seconds >= SLOW_MIN_S and total > 0 and s.seconds / total >= SLOW_SHARE
        if base_name(s.name) in EXPENSIVE or slow:
            cost = f" ({s.seconds * 1000:.1f} ms per item)" if s.seconds is not None else ""
            plan.warnings.append(
                f"{s.name} is deterministic and expensive{cost} but comes after {first_random}, so it runs every "
                f"epoch instead of being cached; move it before {first_random} if the order does not matter"
            )
    for s in steps[:split]:
        if base_name(s.name) not in PADDING:
            continue
        if measured and s.growth is not None:
            if s.growth > 1.01 and plan.bytes_per_item:
                extra = plan.bytes_per_item * (1 - 1 / s.growth) * (plan.cached_items or 0)
                plan.warnings.append(
                    f"{s.name} grows each item {s.growth:.2f}x before the cache, which then holds {_size(extra)} of "
                    f"padding; pad after the cache (right before {first_random or 'the random crop'}): padding is cheap"
                )
        elif not measured and base_name(s.name) != "ResizeWithPadOrCrop":
            plan.warnings.append(
                f"{s.name} pads before the cache: if it grows the image, every cached item holds the padding; "
                "pad after the cache instead (see hpc-runner config --cache-plan)"
            )
    if plan.kind == "monai-persistent" and not transforms_hashed:
        plan.warnings.append(_MONAI_999)
    if memory_available and plan.memory_bytes and plan.kind == "memory" and plan.memory_bytes > 0.5 * memory_available:
        plan.warnings.append(
            f"the in-memory cache needs {_size(plan.memory_bytes)}, more than half of the {_size(memory_available)} "
            "available here (and every DDP rank holds its own copy): set cache_dir to a folder for a persistent cache"
        )


_MONAI_999 = (
    "MONAI PersistentDataset names its files by the data item only unless hash_transform is set, and with "
    "json_hashing by the transforms' class names only, so a changed transform or argument reuses a stale cache "
    "(MONAI issue #999); use hpc_runner.data.cached.CachedDataset with cache_dir, whose key hashes the "
    "transforms with their arguments"
)


def _memory_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _plan_dataset(parser: Any, ds_id: str, node: dict, *, measure: bool, max_items: int) -> DatasetPlan:
    from monai.transforms import Compose

    plan = DatasetPlan(id=ds_id, target=str(node.get("_target_")), kind="none")
    cls = _dataset_class(parser, ds_id)
    if cls is None:
        plan.error = f"_target_ {plan.target!r} is not a dataset class"
        return plan
    plan.target = f"{cls.__module__}.{cls.__qualname__}"
    cache_dir = _arg(parser, ds_id, node, "cache_dir")
    plan.kind = _kind(cls, cache_dir)
    plan.cache_dir = None if cache_dir is None else str(cache_dir)
    plan.keep_in_memory = bool(_arg(parser, ds_id, node, "keep_in_memory", False))
    transform = parser.get_parsed_content(f"{ds_id}::transform")
    compose = transform if isinstance(transform, Compose) else Compose(transform)
    split = cache_split(compose) if plan.kind != "none" else 0
    n_trans = _arg(parser, ds_id, node, "cache_n_trans")
    if n_trans is not None:
        split = min(split, int(n_trans))
    if split < len(compose.transforms):
        plan.stop = stop_reason(compose.transforms[split]) if n_trans is None or split < int(n_trans) else (
            f"cache_n_trans is {n_trans}")
    plan.steps = _static_steps(compose, split)
    if plan.kind == "persistent":
        track_meta = bool(_arg(parser, ds_id, node, "track_meta", False))
        key = transform_key(compose.transforms[:split], extra={"track_meta": track_meta})
        plan.folder = str(Path(str(cache_dir)).expanduser() / key[:16])
    hashed = False
    if plan.kind == "monai-persistent":
        from monai.data.utils import json_hashing

        hash_transform = _arg(parser, ds_id, node, "hash_transform")
        hashed = hash_transform is not None and hash_transform is not json_hashing
    if measure:
        data = parser.get_parsed_content(f"{ds_id}::data")
        n = len(data)
        if plan.kind == "none":
            plan.cached_items = 0
        else:
            cache_num = _arg(parser, ds_id, node, "cache_num")
            rate = float(_arg(parser, ds_id, node, "cache_rate", 1.0))
            plan.cached_items = min(n, int(n * rate), int(cache_num) if cache_num is not None else n)
            if plan.kind == "monai-persistent":
                plan.cached_items = n
        # a dataset without a cache is measured at MONAI's split too: what a cache would hold and save
        measure_split = split if plan.kind != "none" else cache_split(compose)
        _measure(plan, compose, measure_split, data, max_items, bool(_arg(parser, ds_id, node, "copy_cache", True)))
        if plan.kind == "persistent" and plan.folder:
            hash_files = bool(_arg(parser, ds_id, node, "hash_files", True))
            folder = Path(plan.folder)
            plan.present = sum(
                (folder / f"{item_key(data[i], hash_files=hash_files)}.pt").is_file()
                for i in range(plan.cached_items or 0)
            )
    _warn(plan, compose, split, measure, _memory_available(), transforms_hashed=hashed)
    return plan


# -- the public functions --------------------------------------------------------------------------


def cache_plan(cfg: BundleConfig, *, measure: bool = True, max_items: int = DEFAULT_MAX_ITEMS,
               initialize: bool = True, expanded: dict | None = None) -> CachePlan:
    """Return the cache plan of every dataset in ``cfg``; ``measure`` runs the transforms on up to ``max_items``.

    Measuring runs the bundle's ``initialize`` first (as a run does: it may create the data) unless
    ``initialize`` is False, then resolves each dataset's ``data`` and ``transform`` (the dataset itself
    is never built, so no cache is filled).
    """
    start = time.perf_counter()
    data = expanded if expanded is not None else cfg.expanded()
    ids = dataset_ids({k: v for k, v in data.items() if k != META_KEY})
    plans: list[DatasetPlan] = []
    initialized = False
    with _parser_for(cfg, data) as parser:
        if measure and initialize and INIT_ID in parser and ids:
            run_expr(parser, INIT_ID)
            initialized = True
        for ds_id in ids:
            node = _node(data, ds_id)
            try:
                plans.append(_plan_dataset(parser, ds_id, node, measure=measure, max_items=max_items))
            except Exception as exc:  # one dataset that cannot be resolved must not hide the others
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                plans.append(DatasetPlan(id=ds_id, target=str(node.get("_target_")), kind="none",
                                         error=f"{type(exc).__name__}: {first[:300]}"))
    return CachePlan(bundle=cfg.name, datasets=plans, measured=measure, initialized=initialized,
                     seconds=time.perf_counter() - start, max_items=max_items)


def _node(config: dict, ds_id: str) -> dict:
    return get_by_id(config, ds_id)


EPOCH_KEYS = ("max_epochs", "epochs", "num_epochs", "n_epochs")


def _has_epochs(config: Any) -> bool:
    """True when any id of the config is an epoch count (the data is read more than once)."""
    if isinstance(config, dict):
        return any(k in EPOCH_KEYS or _has_epochs(v) for k, v in config.items())
    return isinstance(config, list) and any(_has_epochs(v) for v in config)


def log_cache_summary(cfg: BundleConfig, expanded: dict, logger: logging.Logger | None = None) -> CachePlan | None:
    """Print the one-line cache summary and the plan's warnings at run start; never raise (returns the plan).

    The lines go to stdout, as the trainer's, so they reach the terminal and the run's log.txt.
    Nothing is measured: only the transforms are built, no data is read.
    """
    logger = logger or logging.getLogger("hpc_runner.runner")
    try:
        if not dataset_ids({k: v for k, v in expanded.items() if k != META_KEY}):
            return None
        plan = cache_plan(cfg, measure=False, expanded=expanded)
    except Exception as exc:  # the summary is advice; a run must not fail because of it
        logger.debug("no cache summary: %s", exc)
        return None
    if not _has_epochs(expanded):
        # inference and evaluation read each item once: a missing cache costs nothing there
        for d in plan.datasets:
            if d.kind == "none":
                d.warnings = []
    print(f"hpc-runner: {plan.summary_line()}", flush=True)
    for w in plan.warnings:
        print(f"hpc-runner: warning: cache: {w} (hpc-runner config --cache-plan measures it)", flush=True)
    return plan


@dataclass
class FillResult:
    """What ``hpc-runner cache`` did for one dataset."""

    id: str
    folder: str | None
    items: int = 0
    computed: int = 0
    reused: int = 0
    bytes: int = 0
    seconds: float = 0.0
    waited: int = 0  # items another job was computing when this one reached them
    skipped: str | None = None


def fill_caches(cfg: BundleConfig, *, only: list[str] | None = None, initialize: bool = True) -> list[FillResult]:
    """Build every persistent `CachedDataset` of ``cfg`` once, filling its cache folder; return what each did.

    Raises ConfigError when no dataset has a persistent cache (``cache_dir`` unset) or ``only`` names
    an id that is not a dataset.
    """
    from hpc_runner.data.cached import CachedDataset, PersistentCacheDataset  # deferred: imports torch

    data = cfg.expanded()
    ids = dataset_ids({k: v for k, v in data.items() if k != META_KEY})
    if only:
        unknown = [i for i in only if i not in ids]
        if unknown:
            raise ConfigError(f"{', '.join(unknown)} is not a dataset id of the config",
                              expected=f"one of: {', '.join(ids) or '(no dataset ids)'}")
        ids = [i for i in ids if i in only]
    results: list[FillResult] = []
    with _parser_for(cfg, data) as parser:
        targets = []
        for ds_id in ids:
            node = _node(data, ds_id)
            cls = _dataset_class(parser, ds_id)
            cache_dir = _arg(parser, ds_id, node, "cache_dir")
            kind = _kind(cls, cache_dir) if cls is not None else "none"
            if kind == "persistent":
                targets.append(ds_id)
            else:
                why = {"memory": "cache_dir is null: an in-memory cache lives only in its run",
                       "monai-persistent": "a MONAI PersistentDataset: its keys ignore the transforms (MONAI #999); "
                                           "use hpc_runner.data.cached.CachedDataset"}.get(kind, "caches nothing")
                results.append(FillResult(ds_id, None, skipped=why))
        if not targets:
            raise ConfigError(
                "no dataset of the config has a persistent cache to fill",
                where=", ".join(str(p) for p in cfg.config_files),
                expected="a dataset with _target_ hpc_runner.data.cached.CachedDataset and cache_dir set to a folder",
                hint="Pass the folder as an override, e.g. --cache_dir /scratch/$USER/hpcr-cache for the example "
                "bundle, and the same override to every run or sweep that should reuse it",
            )
        if initialize and INIT_ID in parser:
            run_expr(parser, INIT_ID)
        for ds_id in targets:
            ds = parser.get_parsed_content(ds_id)
            inner = ds.dataset if isinstance(ds, CachedDataset) else ds
            if not isinstance(inner, PersistentCacheDataset):
                why = f"built a {type(inner).__name__}, not a persistent cache"
                results.append(FillResult(ds_id, None, skipped=why))
                continue
            s = inner.stats
            results.append(FillResult(ds_id, s.folder, s.items, s.computed, s.reused, s.bytes, s.seconds,
                                      s.waited_for_others))
            parser.ref_resolver.remove_resolved_content(ds_id)
            del ds, inner
    order = {i: n for n, i in enumerate(ids)}
    return sorted(results, key=lambda r: order.get(r.id, 0))

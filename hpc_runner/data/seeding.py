"""Per-item random seeds and per-thread copies of the random part of a dataset.

Every item is transformed with random states derived from (seed, epoch, position, index) alone, so
a batch does not depend on which thread made it, on the thread count, or on what ran before it. A
thread gets its own copy of every random or thread-unsafe transform; data lists and caches are shared.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from monai.transforms import Compose, Randomizable
from monai.transforms.traits import RandomizableTrait, ThreadUnsafe
from monai.transforms.transform import Transform

_SEED_MASK = (1 << 64) - 1
# Lists longer than this are data (file names, dicts), never lists of transforms or datasets.
_MAX_WALKED_LIST = 64


def item_seeds(seed: int, epoch: int, position: int, index: int, count: int) -> list[int]:
    """Return `count` independent uint32 seeds for one item, derived from (seed, epoch, position, index)."""
    if count <= 0:
        return []
    entropy = [int(seed) & _SEED_MASK, int(epoch) & _SEED_MASK, int(position) & _SEED_MASK, int(index) & _SEED_MASK]
    return [int(s) for s in np.random.SeedSequence(entropy).generate_state(count)]


def derive_seed(seed: int, *words: int) -> int:
    """Return one 63-bit seed derived from `seed` and `words` (shuffle orders, sub-streams)."""
    entropy = [int(seed) & _SEED_MASK, *(int(w) & _SEED_MASK for w in words)]
    lo, hi = np.random.SeedSequence(entropy).generate_state(2)
    return ((int(hi) << 32) | int(lo)) & ((1 << 63) - 1)


def _shareable(t: Any) -> bool:
    """A deterministic MONAI transform, safe to call from several threads (MONAI's own CacheDataset does)."""
    return (
        isinstance(t, Transform)
        and not isinstance(t, (Compose, RandomizableTrait, ThreadUnsafe))
    )


def _collect_shareable(t: Any, memo: dict[int, Any]) -> None:
    if isinstance(t, Compose):
        for child in t.transforms:
            _collect_shareable(child, memo)
    elif _shareable(t):
        memo[id(t)] = t


def copy_transform(transform: Any) -> Any:
    """Return a copy of `transform` whose random and thread-unsafe parts are private; the rest is shared."""
    if transform is None or _shareable(transform):
        return transform
    if isinstance(transform, (list, tuple)):
        return type(transform)(copy_transform(t) for t in transform)
    memo: dict[int, Any] = {}
    _collect_shareable(transform, memo)
    return copy.deepcopy(transform, memo)


def _is_transform_like(v: Any) -> bool:
    return isinstance(v, (Transform, Randomizable, RandomizableTrait, ThreadUnsafe))


def _walked_list(v: Any) -> bool:
    return (
        isinstance(v, (list, tuple))
        and 0 < len(v) <= _MAX_WALKED_LIST
        and any(isinstance(x, torch.utils.data.Dataset) or _is_transform_like(x) for x in v)
    )


def isolate(obj: Any) -> Any:
    """Return a per-thread view of a dataset (or transform): private random transforms, shared data and cache.

    A dataset is copied shallowly so that `data`, `_cache` (MONAI CacheDataset) and file handles stay
    shared; its transform attributes and nested datasets (Subset, ConcatDataset, ZipDataset) are
    isolated recursively.
    """
    if isinstance(obj, torch.utils.data.Dataset):
        clone = copy.copy(obj)
        attrs = getattr(clone, "__dict__", None)
        if attrs is not None:
            for key, value in list(attrs.items()):
                new = _isolate_attr(value)
                if new is not value:
                    attrs[key] = new  # bypass property setters: this is a private copy
        return clone
    return _isolate_attr(obj)


def _isolate_attr(value: Any) -> Any:
    if isinstance(value, torch.utils.data.Dataset):
        return isolate(value)
    if _is_transform_like(value):
        return copy_transform(value)
    if _walked_list(value):
        return type(value)(_isolate_attr(v) for v in value)
    if callable(value) and hasattr(value, "__dict__") and not isinstance(value, type) and not _is_function(value):
        # An unknown callable object (a torchvision transform, a user class): copy it, as MONAI's
        # CacheDataset treats non-MONAI callables as the start of the random part.
        return copy.deepcopy(value)
    return value


def _is_function(value: Any) -> bool:
    import types

    return isinstance(value, (types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.ModuleType))


def random_targets(obj: Any) -> list[Any]:
    """Return the objects of a dataset or transform to reseed before each item, in a fixed order."""
    found: list[Any] = []
    seen: set[int] = set()
    _collect_targets(obj, found, seen)
    return found


def _collect_targets(obj: Any, found: list[Any], seen: set[int]) -> None:
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, Randomizable):
        # A Compose reseeds its children with seeds drawn from its own, so each random transform in it
        # gets its own stream rather than one shared seed.
        found.append(obj)
        if not isinstance(obj, torch.utils.data.Dataset):
            return
    if isinstance(obj, torch.utils.data.Dataset):
        for value in list(getattr(obj, "__dict__", {}).values()):
            if isinstance(value, (torch.utils.data.Dataset, Randomizable)):
                _collect_targets(value, found, seen)
            elif _walked_list(value):
                for v in value:
                    _collect_targets(v, found, seen)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _collect_targets(v, found, seen)


def reseed(targets: list[Any], seeds: list[int]) -> None:
    """Give each target its seed (MONAI `Randomizable.set_random_state`)."""
    for target, s in zip(targets, seeds):
        target.set_random_state(seed=s)


def describe(fn: Callable[..., Any] | Any) -> str:
    """Return a short readable name for a transform or callable."""
    if isinstance(fn, Compose):
        names = [describe(t) for t in fn.transforms]
        return f"Compose[{', '.join(names)}]" if len(names) <= 6 else f"Compose[{len(names)} transforms]"
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if name is None:
        name = type(fn).__qualname__
    return str(name)

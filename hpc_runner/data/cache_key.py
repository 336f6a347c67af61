"""Cache keys: where MONAI splits a transform chain, and stable hashes of data items and transforms.

A persistent cache is only safe if its key changes whenever the cached result could: the data item
(and the files it names), every deterministic transform *with its arguments*, and the MONAI version.
MONAI's `PersistentDataset` hashes only the data item unless `hash_transform` is given (its issue #999),
and `json_hashing` falls back to the transforms' class names, so a changed argument reuses a stale
cache. Here a transform is described by its class and its whole instance state, recursively, in a
canonical form that is the same in every process (no ids, addresses or set order).
"""

from __future__ import annotations

import enum
import functools
import hashlib
import json
import os
import re
import types
from collections.abc import Callable, Sequence
from pathlib import PurePath
from typing import Any

# Bump when the layout or the content of cache files changes: old caches are then never read.
CACHE_FORMAT = 1
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_MAX_DEPTH = 24
_MAX_PATH_LEN = 4096


def _qualname(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', getattr(obj, '__name__', '?'))}"


def _is_random_or_opaque(t: Any) -> bool:
    """MONAI's rule (CacheDataset, PersistentDataset): the cache stops at the first transform this is true for."""
    from monai.transforms import RandomizableTrait, Transform

    return isinstance(t, RandomizableTrait) or not isinstance(t, Transform)


def cache_split(compose: Any) -> int:
    """Return how many leading transforms of ``compose`` MONAI caches (all of them when none is random)."""
    index = compose.get_index_of_first(_is_random_or_opaque)
    return len(compose.transforms) if index is None else int(index)


def stop_reason(t: Any) -> str:
    """Say why MONAI stops caching at ``t``."""
    from monai.transforms import Compose, RandomizableTrait, Transform

    name = transform_name(t)
    if isinstance(t, Compose):
        return f"{name} is a nested Compose, which MONAI counts as random without looking inside"
    if isinstance(t, RandomizableTrait):
        return f"{name} is random"
    if not isinstance(t, Transform):
        return f"{name} is not a MONAI Transform, so MONAI cannot tell that it is deterministic"
    return f"{name} ends the cached part"


def transform_name(t: Any) -> str:
    """Return a short readable name of a transform or callable."""
    if isinstance(t, (types.FunctionType, types.BuiltinFunctionType, functools.partial)):
        func = t.func if isinstance(t, functools.partial) else t
        return getattr(func, "__qualname__", getattr(func, "__name__", type(t).__name__))
    return type(t).__name__


def describe(obj: Any) -> Any:
    """Return a JSON-ready, process-independent description of ``obj``: its type and full state."""
    return _describe(obj, set(), 0)


def _describe(obj: Any, stack: set[int], depth: int) -> Any:
    if obj is None or isinstance(obj, bool):
        return obj
    if isinstance(obj, enum.Enum):  # before str/int: MONAI's modes are str enums
        return {"enum": _qualname(type(obj)), "name": obj.name}
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return {"float": repr(float(obj))}
    if isinstance(obj, str):
        return str(obj)
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return {"bytes": hashlib.sha256(bytes(obj)).hexdigest()}
    if isinstance(obj, PurePath):
        return {"path": str(obj)}
    if isinstance(obj, type):
        return {"type": _qualname(obj)}
    if isinstance(obj, complex):
        return {"complex": repr(obj)}
    array = _array_description(obj)
    if array is not None:
        return array
    if depth > _MAX_DEPTH:
        return {"deep": _qualname(type(obj))}
    if id(obj) in stack:
        return {"cycle": _qualname(type(obj))}
    stack.add(id(obj))
    try:
        return _describe_container(obj, stack, depth + 1)
    finally:
        stack.discard(id(obj))


def _array_description(obj: Any) -> dict | None:
    import numpy as np

    if isinstance(obj, np.dtype):
        return {"dtype": str(obj)}
    if isinstance(obj, np.generic):
        return {"scalar": str(obj.dtype), "value": repr(obj.item())}
    if isinstance(obj, np.ndarray):
        data = np.ascontiguousarray(obj)
        if data.dtype == object:
            return {"ndarray": "object", "shape": list(data.shape), "items": [describe(x) for x in data.ravel()]}
        digest = hashlib.sha256(data.tobytes()).hexdigest()
        return {"ndarray": str(data.dtype), "shape": list(data.shape), "sha256": digest}
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return None
    if isinstance(obj, (torch.dtype, torch.device)):
        return {"torch": str(obj)}
    if isinstance(obj, torch.Tensor):
        t = obj.detach().cpu().contiguous()
        raw = t.view(torch.uint8) if t.dtype.is_floating_point or t.dtype.is_complex else t
        digest = hashlib.sha256(raw.numpy().tobytes() if raw.numel() else b"").hexdigest()
        return {"tensor": str(t.dtype), "shape": list(t.shape), "sha256": digest}
    return None


def _describe_container(obj: Any, stack: set[int], depth: int) -> Any:
    d = functools.partial(_describe, stack=stack, depth=depth)
    if isinstance(obj, (list, tuple)):
        return {type(obj).__name__: [d(x) for x in obj]}
    if isinstance(obj, dict):
        pairs = [[d(k), d(v)] for k, v in obj.items()]
        return {"dict": sorted(pairs, key=lambda kv: json.dumps(kv[0], sort_keys=True))}
    if isinstance(obj, (set, frozenset)):
        return {"set": sorted((d(x) for x in obj), key=lambda x: json.dumps(x, sort_keys=True))}
    if isinstance(obj, functools.partial):
        return {"partial": d(obj.func), "args": d(obj.args), "keywords": d(obj.keywords or {})}
    if isinstance(obj, types.FunctionType):
        closure = [c.cell_contents for c in obj.__closure__ or () if _cell_filled(c)]
        return {
            "function": _qualname(obj),
            "code": _code_description(obj.__code__),
            "defaults": d(obj.__defaults__),
            "kwdefaults": d(obj.__kwdefaults__),
            "closure": d(closure),
        }
    if isinstance(obj, types.MethodType):
        return {"method": obj.__func__.__name__, "function": d(obj.__func__), "self": d(obj.__self__)}
    if isinstance(obj, (types.BuiltinFunctionType, types.BuiltinMethodType)):
        return {"builtin": _qualname(obj)}
    if isinstance(obj, types.ModuleType):
        return {"module": obj.__name__}
    if isinstance(obj, types.CodeType):
        return {"code": _code_description(obj)}
    return _describe_object(obj, d)


def _cell_filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - probing an empty closure cell raises
    except ValueError:
        return False
    return True


def _code_description(code: types.CodeType) -> dict:
    consts = []
    for c in code.co_consts:
        consts.append(_code_description(c) if isinstance(c, types.CodeType) else describe(c))
    return {
        "sha256": hashlib.sha256(code.co_code).hexdigest(),
        "consts": consts,
        "names": list(code.co_names),
    }


def _volatile_types() -> tuple[type, ...]:
    import threading
    import weakref

    return (
        threading.local,
        type(threading.Lock()),
        type(threading.RLock()),
        threading.Event,
        threading.Condition,
        threading.Semaphore,
        weakref.ref,
    )


def _runtime_attrs(obj: Any) -> frozenset[str]:
    """Attributes a transform sets while it runs: they say nothing about what it computes."""
    try:
        from monai.data.image_reader import ImageReader
    except ImportError:  # pragma: no cover - monai is a dependency
        return frozenset()
    # a reader remembers the last files it read
    return frozenset({"filenames"}) if isinstance(obj, ImageReader) else frozenset()


def _describe_object(obj: Any, d: Callable[[Any], Any]) -> Any:
    import logging

    cls = type(obj)
    name = _qualname(cls)
    volatile = _volatile_types()
    # locks, thread-locals (MONAI keeps a per-thread tracing flag in one) and loggers hold runtime state
    if isinstance(obj, (logging.Logger, *volatile)):
        return {"object": name}
    state: dict[str, Any] = {}
    if hasattr(obj, "__dict__"):
        state.update(vars(obj))
    for klass in cls.__mro__:
        slots = getattr(klass, "__slots__", ())
        for slot in (slots,) if isinstance(slots, str) else slots:
            if slot not in ("__dict__", "__weakref__") and hasattr(obj, slot):
                state.setdefault(slot, getattr(obj, slot))
    skip = _runtime_attrs(obj)
    state = {k: v for k, v in state.items() if k not in skip and not isinstance(v, volatile)}
    if not state and not hasattr(obj, "__dict__"):
        return {"object": name, "repr": _ADDRESS.sub("", repr(obj))}
    return {"object": name, "state": d(state)}


def _digest(description: Any) -> str:
    text = json.dumps(description, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def transform_key(transforms: Sequence[Any], *, extra: dict | None = None) -> str:
    """Return the sha256 of the cached transforms with all their arguments, the MONAI version and ``extra``."""
    import monai

    return _digest(
        {
            "format": CACHE_FORMAT,
            "monai": monai.__version__,
            "transforms": [describe(t) for t in transforms],
            "extra": describe(extra or {}),
        }
    )


def _file_stats(item: Any, found: list) -> None:
    if isinstance(item, (str, PurePath)):
        text = str(item)
        if 0 < len(text) <= _MAX_PATH_LEN and "\n" not in text:
            try:
                st = os.stat(text)
            except (OSError, ValueError):
                return
            if not os.path.isdir(text):
                found.append([text, st.st_size, st.st_mtime_ns])
    elif isinstance(item, dict):
        for v in item.values():
            _file_stats(v, found)
    elif isinstance(item, (list, tuple)):
        for v in item:
            _file_stats(v, found)


def item_key(item: Any, *, hash_files: bool = True) -> str:
    """Return the sha256 of a data list item; with ``hash_files`` also of the size and mtime of files it names."""
    stats: list = []
    if hash_files:
        _file_stats(item, stats)
    return _digest({"item": describe(item), "files": stats})

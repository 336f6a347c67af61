"""The data path: threaded loading, seeded thread-parallel transforms and device prefetch.

The names below are loaded on first use (PEP 562): the data path's modules import torch, and a light one
(``data.staging``, ``data.reads``: files and locks only) must not bring torch into the login node's process.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what __getattr__ loads, spelled for type checkers and the static _target_ check
    from hpc_runner.data.buffer import IDLE_EXIT_S, BufferIterator, ThreadBuffer, buffer_iterator
    from hpc_runner.data.device_transforms import DeviceTail
    from hpc_runner.data.items import DataItemError, ItemFetcher
    from hpc_runner.data.loader import EpochShardSampler, EpochShuffleSampler, ThreadDataLoader
    from hpc_runner.data.pool import OrderedMap, WorkerPool, thread_map
    from hpc_runner.data.prefetch import DevicePrefetcher, map_tensors, move_to_device, pin_batch, prefetch_to_device
    from hpc_runner.data.seeding import copy_transform, isolate, item_seeds
    from hpc_runner.data.threads import data_thread_setup, lower_thread_priority, single_threaded_torch
    from hpc_runner.data.workers import available_cpus, default_num_workers

_WHERE = {
    "IDLE_EXIT_S": "buffer", "BufferIterator": "buffer", "ThreadBuffer": "buffer", "buffer_iterator": "buffer",
    "DeviceTail": "device_transforms",
    "DataItemError": "items", "ItemFetcher": "items",
    "EpochShardSampler": "loader", "EpochShuffleSampler": "loader", "ThreadDataLoader": "loader",
    "OrderedMap": "pool", "WorkerPool": "pool", "thread_map": "pool",
    "DevicePrefetcher": "prefetch", "map_tensors": "prefetch", "move_to_device": "prefetch", "pin_batch": "prefetch",
    "prefetch_to_device": "prefetch",
    "copy_transform": "seeding", "isolate": "seeding", "item_seeds": "seeding",
    "data_thread_setup": "threads", "lower_thread_priority": "threads", "single_threaded_torch": "threads",
    "available_cpus": "workers", "default_num_workers": "workers",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'hpc_runner.data' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"hpc_runner.data.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "IDLE_EXIT_S",
    "BufferIterator",
    "DataItemError",
    "DevicePrefetcher",
    "DeviceTail",
    "EpochShardSampler",
    "EpochShuffleSampler",
    "ItemFetcher",
    "OrderedMap",
    "ThreadBuffer",
    "ThreadDataLoader",
    "WorkerPool",
    "available_cpus",
    "buffer_iterator",
    "copy_transform",
    "data_thread_setup",
    "default_num_workers",
    "isolate",
    "item_seeds",
    "lower_thread_priority",
    "map_tensors",
    "move_to_device",
    "pin_batch",
    "prefetch_to_device",
    "single_threaded_torch",
    "thread_map",
]

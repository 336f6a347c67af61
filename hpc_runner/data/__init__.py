"""The data path: threaded loading, seeded thread-parallel transforms and device prefetch."""

from hpc_runner.data.buffer import IDLE_EXIT_S, BufferIterator, ThreadBuffer, buffer_iterator
from hpc_runner.data.device_transforms import DeviceTail
from hpc_runner.data.items import DataItemError, ItemFetcher
from hpc_runner.data.loader import EpochShardSampler, EpochShuffleSampler, ThreadDataLoader
from hpc_runner.data.pool import OrderedMap, WorkerPool, thread_map
from hpc_runner.data.prefetch import DevicePrefetcher, map_tensors, move_to_device, pin_batch, prefetch_to_device
from hpc_runner.data.seeding import copy_transform, isolate, item_seeds
from hpc_runner.data.threads import data_thread_setup, lower_thread_priority, single_threaded_torch
from hpc_runner.data.workers import available_cpus, default_num_workers

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

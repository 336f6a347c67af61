"""Set-up of our data threads: keep them from competing with the training loop's threads.

* A data thread that runs a torch op (``torch.stack`` in a collate) gets an OpenMP team of its own,
  so a 2-core machine runs 4 OpenMP threads, and libgomp, managing more threads than CPUs, shortens
  the spinning of every team between parallel regions. ``single_threaded_torch`` runs torch ops on
  the data thread inline instead. (On the 2-vCPU development VM the notebook benchmark showed no
  difference beyond its +-4 % noise either way; it is kept because it removes the oversubscription.)
* A data thread at normal priority shares cores with the step's OpenMP threads: a busy one made a
  2-thread CPU step 2.4x slower. ``lower_thread_priority`` ("low", "idle") makes it yield instead.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import threading
from collections.abc import Callable
from typing import Any

import torch

PRIORITIES = ("normal", "low", "idle")


def lower_thread_priority(policy: str) -> None:
    """Lower the calling thread's CPU priority: "low" (nice 19), "idle" (SCHED_IDLE) or "normal" (no-op)."""
    if policy == "normal" or not hasattr(os, "setpriority"):
        return
    tid = threading.get_native_id()
    try:
        if policy == "idle" and hasattr(os, "sched_setscheduler") and hasattr(os, "SCHED_IDLE"):
            os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
        else:
            os.setpriority(os.PRIO_PROCESS, tid, 19)
    except OSError:  # a restricted container may refuse; priority is an optimisation only
        pass


@functools.lru_cache(maxsize=1)
def _omp_set_num_threads() -> Callable[[int], Any] | None:
    """omp_set_num_threads of the OpenMP runtime torch loaded (Linux), or None."""
    try:
        with open("/proc/self/maps") as f:
            paths = sorted({line.split()[-1] for line in f if line.rstrip().endswith((".so", ".so.1", ".so.5"))})
    except OSError:
        return None
    for path in paths:
        name = os.path.basename(path)
        if name.startswith(("libgomp", "libomp", "libiomp")):
            with contextlib.suppress(OSError, AttributeError):
                return ctypes.CDLL(path).omp_set_num_threads
    return None


def single_threaded_torch() -> None:
    """Make torch ops on the calling thread run inline, without an OpenMP team of its own.

    Only the calling thread's OpenMP setting changes (unlike ``torch.set_num_threads``, which also
    changes the default of threads started later and the global pthreadpool).
    """
    torch.get_num_threads()  # torch's per-thread lazy init first: it would reset our setting later
    fn = _omp_set_num_threads()
    if fn is not None:
        fn(1)


def data_thread_setup(priority: str = "normal") -> Callable[[], None]:
    """Return the set-up run first on each producer or worker thread."""
    if priority not in PRIORITIES:
        raise ValueError(f"thread priority must be one of {PRIORITIES}, got {priority!r}")

    def setup() -> None:
        single_threaded_torch()
        lower_thread_priority(priority)

    return setup

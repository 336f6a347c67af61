"""Make a process use exactly its CPU budget: the thread-count variables and torch's thread pools.

The variables reach child processes (data workers, DDP ranks, subprocesses of a bundle). One the user
set is kept (the record says so); one that hpc-runner set earlier in this process is ours to change.
torch's intra-op threads follow the budget (or a smaller OMP_NUM_THREADS the user set); its inter-op
threads can be set only once per process, before any inter-op work, so a later call records what
they already are.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any

from hpc_runner.records.numbers import outside_int
from hpc_runner.resources.cpus import CpuBudget, decide_cpus

THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "BLIS_NUM_THREADS",
)
_SET_HERE: dict[str, str] = {}  # variable -> the value this process wrote, to tell ours from the user's
_INTEROP_SET: list[int] = []


def _user_omp(env: dict[str, str] | Any) -> int | None:
    raw = env.get("OMP_NUM_THREADS", "").split(",")[0].strip()  # "4,2" = nested levels; the first counts
    return outside_int(raw, low=1)


def set_thread_variables(budget: CpuBudget, environ: Any = None) -> tuple[dict[str, str], list[str]]:
    """Set the thread-count variables to the budget unless the user set them; return (values, user-set names)."""
    env = os.environ if environ is None else environ
    user_set = []
    for name in THREAD_VARIABLES:
        current = env.get(name)
        if current is not None and _SET_HERE.get(name) != current:
            user_set.append(name)
            continue
        env[name] = _SET_HERE[name] = str(budget.count)
    return {name: env[name] for name in THREAD_VARIABLES}, user_set


def variables_set_here() -> dict[str, str]:
    """Return the thread-count variables this process set itself (not the user) with their current values."""
    return {name: value for name, value in _SET_HERE.items() if os.environ.get(name) == value}


def set_torch_threads(count: int) -> dict[str, Any]:
    """Set torch's intra-op threads to ``count`` and, once per process, its inter-op threads; return both."""
    import torch

    torch.set_num_threads(count)
    note = None
    if not _INTEROP_SET:
        try:
            torch.set_num_interop_threads(count)
            _INTEROP_SET.append(count)
        except RuntimeError as exc:  # inter-op work already ran, or someone else set it first
            note = f"inter-op threads left at {torch.get_num_interop_threads()}: {str(exc).strip()[:120]}"
    elif _INTEROP_SET[0] != count:
        note = f"inter-op threads stay at {_INTEROP_SET[0]}: torch sets them once per process"
    out: dict[str, Any] = {"torch_threads": torch.get_num_threads(),
                           "interop_threads": torch.get_num_interop_threads()}
    if note:
        out["note"] = note
    return out


def apply_cpu_budget(budget: CpuBudget, environ: Any = None) -> dict[str, Any]:
    """Apply ``budget`` to the variables and, if torch is importable, its thread pools; return the run.yaml record."""
    env = os.environ if environ is None else environ
    values, user_set = set_thread_variables(budget, env)
    record: dict[str, Any] = {**budget.record(), "variables": values}
    if user_set:
        record["user_set"] = user_set
    threads = budget.count
    if "OMP_NUM_THREADS" in user_set and (omp := _user_omp(env)) is not None and omp < threads:
        threads = omp  # the user asked for fewer OpenMP threads than the budget allows: honour it
    if "torch" in sys.modules or importlib.util.find_spec("torch") is not None:
        record.update(set_torch_threads(threads))
    return record


def use_cpu_budget(explicit: int | None = None) -> dict[str, Any]:
    """Decide this process's CPUs and apply them; return the record for run.yaml (``cpus:``)."""
    return apply_cpu_budget(decide_cpus(explicit=explicit))

"""Split a job's GPUs and CPUs among P points that run at once (``--pack-parallel P``), stdlib only.

Shares are contiguous and balanced: with 8 GPUs and P=3 the slots get 0-2, 3-5, 6-7 (the first slots
take the remainder), so a slot's GPUs sit next to each other on the node. With fewer GPUs (or CPUs)
than slots, a GPU is shared: slots 0-1 run on GPU 0 and slots 2-3 on GPU 1 for 2 GPUs and P=4, and
``Share.shared`` says so (the run.yaml of each point records it). A job with no GPU gives every slot
an empty GPU list.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from hpc_runner.resources.cpus import cpu_ranges

T = TypeVar("T")
# the job's GPUs, most specific first: what CUDA sees, then the step's, then the job's grant
GPU_VARIABLES = ("CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS")


@dataclass(frozen=True)
class Share:
    """One slot's GPUs and CPUs, and whether another slot uses the same ones."""

    slot: int
    gpus: tuple[str, ...]
    cpus: tuple[int, ...]
    gpu_shared: bool = False
    cpu_shared: bool = False

    def record(self) -> dict[str, object]:
        """Return the fields written to a point's run.yaml under ``binding``."""
        out: dict[str, object] = {"slot": self.slot, "gpus": list(self.gpus), "cpus": cpu_ranges(list(self.cpus))}
        shared = [name for name, flag in (("gpu", self.gpu_shared), ("cpu", self.cpu_shared)) if flag]
        if shared:
            out["shared"] = shared
        return out


def _split(items: Sequence[T], parallel: int) -> tuple[list[list[T]], bool]:
    """Contiguous balanced split of ``items`` into ``parallel`` parts; (parts, whether parts overlap)."""
    if parallel < 1:
        raise ValueError(f"parallel must be >= 1, not {parallel}")
    n = len(items)
    if n == 0:
        return [[] for _ in range(parallel)], False
    if n < parallel:  # fewer than slots: neighbouring slots share one item
        return [[items[slot * n // parallel]] for slot in range(parallel)], True
    base, extra = divmod(n, parallel)
    parts, start = [], 0
    for slot in range(parallel):
        size = base + (1 if slot < extra else 0)
        parts.append(list(items[start:start + size]))
        start += size
    return parts, False


def gpu_shares(gpus: Sequence[str], parallel: int) -> list[list[str]]:
    """Return each slot's GPU ids: contiguous and balanced; with fewer GPUs than slots, slots share one."""
    return _split(list(gpus), parallel)[0]


def cpu_shares(cpus: Sequence[int], parallel: int) -> list[list[int]]:
    """Return each slot's CPU ids: contiguous and balanced; with fewer CPUs than slots, slots share one."""
    return _split(sorted(cpus), parallel)[0]


def slot_shares(gpus: Sequence[str], cpus: Sequence[int], parallel: int) -> list[Share]:
    """Return the P shares of a job's GPUs and CPUs, each saying whether it is shared with another slot."""
    gparts, gshared = _split(list(gpus), parallel)
    cparts, cshared = _split(sorted(cpus), parallel)
    return [Share(s, tuple(gparts[s]), tuple(cparts[s]), gshared, cshared) for s in range(parallel)]


def job_gpus(environ: Mapping[str, str] | None = None) -> list[str]:
    """Return the GPU ids this job may use (CUDA_VISIBLE_DEVICES, else SLURM_STEP_GPUS, else SLURM_JOB_GPUS)."""
    env = os.environ if environ is None else environ
    for name in GPU_VARIABLES:
        raw = env.get(name)
        if raw is None:
            continue
        ids = [g.strip() for g in raw.split(",") if g.strip()]
        if name == "CUDA_VISIBLE_DEVICES" or ids:  # CUDA_VISIBLE_DEVICES="" means: no GPU
            return [g for g in ids if g not in ("-1", "NoDevFiles")]
    return []


def job_cpus() -> list[int]:
    """Return the CPU ids of this process's affinity mask (all CPUs where there is no affinity call)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def describe_shares(shares: Sequence[Share]) -> str:
    """One line for the task's log: which slot runs on which GPUs and CPUs."""
    parts = [f"slot {s.slot}: GPU {','.join(s.gpus) or '-'} CPU {cpu_ranges(list(s.cpus))}" for s in shares]
    notes = []
    if shares and shares[0].gpu_shared:
        notes.append("fewer GPUs than slots: slots share a GPU")
    if shares and shares[0].cpu_shared:
        notes.append("fewer CPUs than slots: slots share a CPU")
    return "; ".join(parts) + (f" ({'; '.join(notes)})" if notes else "")

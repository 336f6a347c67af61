"""Split a job's GPUs and CPUs among P points that run at once (``--pack-parallel P``), stdlib only.

Shares are contiguous and balanced: with 8 GPUs and P=3 the slots get 0-2, 3-5, 6-7 (the first slots
take the remainder), so a slot's GPUs sit next to each other on the node. With fewer GPUs (or CPUs)
than slots, a GPU is shared: slots 0-1 run on GPU 0 and slots 2-3 on GPU 1 for 2 GPUs and P=4, and
``Share.shared`` says so (the run.yaml of each point records it). A job with no GPU gives every slot
an empty GPU list.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from hpc_runner.records.numbers import is_ascii_digits
from hpc_runner.resources.cpus import cpu_ranges
from hpc_runner.scheduler.job_env import gpu_grant

T = TypeVar("T")


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
    # most specific first: what CUDA sees (CUDA_VISIBLE_DEVICES="" means: no GPU), then the scheduler's grant
    raw = env.get("CUDA_VISIBLE_DEVICES")
    if raw is not None:
        ids = [g.strip() for g in raw.split(",") if g.strip()]
    else:
        grant = gpu_grant(env)
        ids = grant[0] if grant is not None else []
    return [g for g in ids if g not in ("-1", "NoDevFiles")]


def job_cpus() -> list[int]:
    """Return the CPU ids of this process's affinity mask (all CPUs where there is no affinity call)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def device_binding(environ: Mapping[str, str] | None = None) -> dict[str, object]:
    """Return the GPU ids (CUDA_VISIBLE_DEVICES, else the scheduler's grant) and the CPU mask this process runs on.

    What a run record keeps under ``binding``.
    """
    env = os.environ if environ is None else environ
    return {
        "gpus": job_gpus(env),
        "cpus": cpu_ranges(job_cpus()),
        "cuda_visible_devices": env.get("CUDA_VISIBLE_DEVICES"),
    }


def describe_shares(shares: Sequence[Share]) -> str:
    """One line for the task's log: which slot runs on which GPUs and CPUs."""
    parts = [f"slot {s.slot}: GPU {','.join(s.gpus) or '-'} CPU {cpu_ranges(list(s.cpus))}" for s in shares]
    notes = []
    if shares and shares[0].gpu_shared:
        notes.append("fewer GPUs than slots: slots share a GPU")
    if shares and shares[0].cpu_shared:
        notes.append("fewer CPUs than slots: slots share a CPU")
    return "; ".join(parts) + (f" ({'; '.join(notes)})" if notes else "")


# ---------------------------------------------------------------- the GPU ids a slot's process is given

ASSIGNED_ENV = "HPCR_ASSIGNED_GPUS"  # read by hpc_runner.engine.assigned_gpus at the start of the point's run


def accessible_gpu_minors(dev: str = "/dev", can_open: Callable[[str], bool] | None = None) -> list[int] | None:
    """Return the numbers N of the ``/dev/nvidiaN`` this process may open, or None where there is no such file.

    Under SLURM's cgroup device limits (ConstrainDevices=yes) only the job's GPUs open; the others
    fail with EPERM although their files exist. CUDA numbers the GPUs a process can open from 0.
    """
    names = [n for n in _listdir(dev) if n.startswith("nvidia") and is_ascii_digits(n[6:])]
    if not names:
        return None
    opener = can_open or _can_open
    return sorted(int(n[6:]) for n in names if opener(os.path.join(dev, n)))


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _can_open(path: str) -> bool:
    try:
        os.close(os.open(path, os.O_RDONLY))
    except OSError:
        return False
    return True


def visible_gpu_ids(
    environ: Mapping[str, str] | None = None, accessible: Sequence[int] | None = None
) -> tuple[list[str], str]:
    """Return the GPU ids a child of this process can be given in CUDA_VISIBLE_DEVICES, and where they came from.

    A child inherits this process's device limits, so its CUDA_VISIBLE_DEVICES is read against what
    this process sees: this process's own CUDA_VISIBLE_DEVICES entries when it has one; else, from
    SLURM's grant (SLURM_STEP_GPUS, SLURM_JOB_GPUS: the node's global ids), the positions of those GPUs
    among the ones this process can open (``accessible``, /dev/nvidiaN minors): 0..n-1 under cgroup
    limits, where GPUs 4,5 of the node are this process's 0,1; the global ids where every GPU of the
    node opens. Without a device list to compare (``accessible`` None) the global ids are kept: a
    child that then sees no GPU is stopped by the assigned-GPU check, never run on the CPU.
    """
    env = os.environ if environ is None else environ
    raw = env.get("CUDA_VISIBLE_DEVICES")
    if raw is not None:
        ids = [g.strip() for g in raw.split(",") if g.strip()]
        return [g for g in ids if g not in ("-1", "NoDevFiles")], "CUDA_VISIBLE_DEVICES"
    grant = gpu_grant(env)  # the step's, else the job's: the node's numbering
    if grant is not None:
        granted, name = grant
        if accessible is None or not all(is_ascii_digits(g) for g in granted):
            return granted, f"{name} (global ids)"
        opened = sorted(accessible)
        if set(int(g) for g in granted) <= set(opened) and len(opened) == len(granted):
            return [str(opened.index(int(g))) for g in granted], f"{name}, renumbered from 0 (cgroup device limits)"
        return granted, f"{name} (global ids: every GPU of the node opens)"
    return [], "no GPU"


@dataclass(frozen=True)
class GpuPlan:
    """Which GPU ids each slot's process gets, which GPUs stay idle, and where the ids came from."""

    slots: tuple[tuple[str, ...], ...]
    idle: tuple[str, ...]
    shared: bool
    source: str

    def slot_environment(self, slot: int) -> dict[str, str]:
        """Return the variables to set in slot ``slot``'s process before torch loads (empty without GPUs)."""
        gpus = ",".join(self.slots[slot])
        return {"CUDA_VISIBLE_DEVICES": gpus, ASSIGNED_ENV: gpus} if gpus else {}

    def line(self) -> str:
        """One line for the task's log: each slot's GPU, the idle ones, the ids' origin."""
        parts = [f"slot {s}: GPU {','.join(g) or '-'}" for s, g in enumerate(self.slots)]
        notes = [f"ids from {self.source}"]
        if self.shared:
            notes.append("fewer GPUs than slots: slots share a GPU")
        if self.idle:
            notes.append(f"GPU {','.join(self.idle)} idle: a packed point is one process on one GPU; "
                         f"--pack-parallel {len(self.idle) + len(self.slots)} would use them")
        return "; ".join(parts) + f" ({'; '.join(notes)})"


def slot_gpu_plan(
    parallel: int, environ: Mapping[str, str] | None = None, accessible: Sequence[int] | None = None
) -> GpuPlan:
    """Return each of ``parallel`` slots' GPU ids: one GPU each (a point runs as one process), shared when too few.

    The ids are :func:`visible_gpu_ids`, so a slot's CUDA_VISIBLE_DEVICES means a GPU its process can open.
    """
    ids, source = visible_gpu_ids(environ, accessible)
    if parallel < 1:
        raise ValueError(f"parallel must be >= 1, not {parallel}")
    if not ids:
        return GpuPlan(tuple(() for _ in range(parallel)), (), False, source)
    if len(ids) >= parallel:
        return GpuPlan(tuple((g,) for g in ids[:parallel]), tuple(ids[parallel:]), False, source)
    parts, _ = _split(ids, parallel)
    return GpuPlan(tuple(tuple(p) for p in parts), (), True, source)

"""Seeds and random states: one seed for the run, one derived seed per epoch, exact save and restore."""

from __future__ import annotations

import hashlib
import os
import random
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch


def derive_seed(*parts: int | str) -> int:
    """Return a 31-bit seed derived from ``parts`` (stable across processes and Python versions)."""
    digest = hashlib.blake2b(":".join(str(p) for p in parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % (2**31 - 1)


CUBLAS_VARIABLE = "CUBLAS_WORKSPACE_CONFIG"
CUBLAS_DETERMINISTIC = ":4096:8"  # NVIDIA's value for reproducible cuBLAS (cuBLAS docs, "Results reproducibility")


def cublas_workspace_decision(
    environ: Mapping[str, str], deterministic: bool, cuda_started: bool
) -> tuple[str | None, str | None]:
    """Return ``(value to set as CUBLAS_WORKSPACE_CONFIG or None, the line to log or None)``.

    A deterministic run needs it from torch < 2.10 on (torch's alert "it uses CuBLAS and you have
    CUDA >= 10.2"; torch 2.10+ gives every handle its own workspace and no longer asks). It is read
    when cuBLAS makes its handle, so it is set only before CUDA starts; a user's value is kept.
    """
    if not deterministic:
        return None, None
    current = environ.get(CUBLAS_VARIABLE)
    if current:
        return None, f"deterministic: {CUBLAS_VARIABLE}={current} (set before the run)"
    if cuda_started:
        return None, (f"deterministic: CUDA had started before {CUBLAS_VARIABLE} could be set, so cuBLAS may not "
                      f"be deterministic with torch < 2.10; set {CUBLAS_VARIABLE}={CUBLAS_DETERMINISTIC} in the "
                      "job's environment")
    return CUBLAS_DETERMINISTIC, f"deterministic: set {CUBLAS_VARIABLE}={CUBLAS_DETERMINISTIC} before CUDA started"


def apply_cublas_workspace(deterministic: bool) -> str | None:
    """Set CUBLAS_WORKSPACE_CONFIG for a deterministic run as cublas_workspace_decision says; return its line."""
    started = False
    if deterministic:
        import torch

        started = torch.cuda.is_initialized()
    value, line = cublas_workspace_decision(os.environ, deterministic, started)
    if value is not None:
        os.environ[CUBLAS_VARIABLE] = value
    return line


def seed_everything(seed: int | None, deterministic: bool = False) -> None:
    """Seed Python, NumPy and torch (CPU and CUDA) unless ``seed`` is None; optionally ask for deterministic kernels."""
    if seed is not None:
        random.seed(seed)
        np.random.seed(seed % 2**32)
        torch.manual_seed(seed)
    if deterministic:
        apply_cublas_workspace(True)  # a no-op when the run set it before CUDA started (runner.prepare_run)
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False


def capture_rng() -> dict[str, Any]:
    """Return the global random states as tensors and plain tuples (loadable with weights_only=True).

    ``cuda`` is the state of this process's current GPU only: each rank has its own, and another
    rank's (or another GPU count's) list would not fit it after a requeue.
    """
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached)),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()  # the current device (torch/cuda/random.py)
    return state


def cuda_state_for_device(saved: Any, current: int) -> torch.Tensor | None:
    """Return the CUDA RNG state to give the current GPU ``current`` from a checkpoint's ``cuda`` entry.

    One state (this format) is the saving rank's current GPU. A list (``get_rng_state_all``, the old
    format) holds one per GPU of the saving process: the entry of ``current`` when there is one, else
    None: applying the whole list to a process that sees fewer GPUs raised IndexError.
    """
    if saved is None:
        return None
    if isinstance(saved, torch.Tensor):
        return saved
    if isinstance(saved, Sequence) and 0 <= current < len(saved):
        return saved[current]
    return None


def rng_for_rank(state: Mapping[str, Any], rank: int, world: int) -> tuple[dict[str, Any] | None, str | None]:
    """Return this rank's random states from a checkpoint, and a note when they are not its own.

    A checkpoint holds every rank's states (``rng_by_rank``); one written by a different number of
    ranks (or before they were kept per rank) gives each rank rank 0's states, which replays rank 0's
    randomness: said in the note.
    """
    by_rank = state.get("rng_by_rank")
    if isinstance(by_rank, Sequence) and len(by_rank) == world and 0 <= rank < world:
        return by_rank[rank], None
    single = state.get("rng")
    if world <= 1 or rank == 0:
        return single, None
    kept = f"{len(by_rank)} ranks" if isinstance(by_rank, Sequence) else "rank 0 only"
    return single, f"the checkpoint kept random states for {kept}, not {world}: rank {rank} continues from rank 0's"


def restore_rng(state: dict[str, Any]) -> None:
    """Restore what :func:`capture_rng` returned (the tensors must be on the CPU, as torch.set_rng_state needs)."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        cuda = cuda_state_for_device(state["cuda"], torch.cuda.current_device())
        if cuda is not None:
            torch.cuda.set_rng_state(cuda)  # the current device (torch/cuda/random.py)

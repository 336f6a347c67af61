"""Trained weights for inference: from a model.pt, a trainer checkpoint, a run dir or a folder of runs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from hpc_runner.engine.checkpoint import list_checkpoints
from hpc_runner.errors import UserError
from hpc_runner.records.rundir import CHECKPOINT_DIR

MODEL_FILE = "model.pt"  # what Trainer writes at the end of a run: the network's state_dict
# where a state dict sits inside a checkpoint: ours ("network"), then common MONAI/Lightning layouts
STATE_KEYS = ("network", "model", "state_dict", "net")
EXPECTED = (
    "a model.pt (state_dict), a trainer checkpoint (ckpt_*.pt), a run dir holding one, "
    "or a folder of run dirs (the newest with a model.pt is used)"
)


def _why(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__


def state_dict_of(obj: Any) -> dict[str, Any]:
    """Return the network weights held by a loaded file: a state dict, or the one inside a checkpoint."""
    if isinstance(obj, dict):
        for key in STATE_KEYS:
            if isinstance(obj.get(key), dict):
                return obj[key]
        if obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
            return obj
    what = f"keys: {', '.join(map(str, obj))[:200]}" if isinstance(obj, dict) else type(obj).__name__
    raise ValueError(f"holds no state dict ({what})")


def _load_file(network: torch.nn.Module, path: Path, map_location: Any) -> None:
    import pickle

    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:  # weights_only refused an object: loading it could run code
        raise _error(path, f"the file holds objects that torch's weights-only loader refuses (loading them could "
                     f"run code): {str(exc).splitlines()[0][:200]}") from None
    weights = state_dict_of(state)
    # DDP-saved weights carry "module."; the network built from the config does not
    if weights and all(k.startswith("module.") for k in weights):
        weights = {k[len("module."):]: v for k, v in weights.items()}
    network.load_state_dict(weights)


def _error(path: Path, message: str) -> UserError:
    return UserError(message, where=str(path), id_path="ckpt", expected=EXPECTED,
                     hint="Pass --ckpt FILE_OR_RUN_DIR, or train first (hpc-runner run --bundle ...)")


def _run_dirs(folder: Path) -> list[Path]:
    """Sub-folders that hold a model.pt, newest first (by the model's modification time)."""
    found = [d for d in folder.iterdir() if d.is_dir() and (d / MODEL_FILE).is_file()]
    return sorted(found, key=lambda d: ((d / MODEL_FILE).stat().st_mtime, d.name), reverse=True)


def load_weights(network: torch.nn.Module, ckpt: str | os.PathLike, map_location: Any = "cpu") -> Path:
    """Load trained weights into ``network`` from ``ckpt``; return the file they came from.

    ``ckpt``: a file (model.pt or a trainer checkpoint), a run dir (its model.pt, else its newest
    checkpoint that loads) or a folder of run dirs (the newest run dir with a model.pt). A missing or
    unloadable file is refused with one paragraph naming it.
    """
    path = Path(ckpt).expanduser()
    if not path.exists():
        raise _error(path, "the weights do not exist")
    if path.is_file():
        candidates = [path]
    elif (path / MODEL_FILE).is_file():
        candidates = [path / MODEL_FILE]
    elif list_checkpoints(path / CHECKPOINT_DIR):
        candidates = list(reversed(list_checkpoints(path / CHECKPOINT_DIR)))
    else:
        runs = _run_dirs(path)
        if not runs:
            raise _error(path, f"the folder holds no {MODEL_FILE}, no {CHECKPOINT_DIR}/ckpt_*.pt and no run dir "
                         f"with a {MODEL_FILE}")
        candidates = [runs[0] / MODEL_FILE]
        print(f"hpc-runner: weights from the newest run in {path}: {runs[0]}", flush=True)
    failed: list[str] = []
    for candidate in candidates:
        try:
            _load_file(network, candidate, map_location)
        except Exception as exc:  # damaged, not a state dict, or weights of another network
            failed.append(f"{candidate} ({_why(exc)})")
            continue
        if failed:
            print(f"hpc-runner: weights: {'; '.join(failed)} could not be loaded; using the older {candidate}",
                  flush=True)
        return candidate
    raise _error(path, "the weights cannot be loaded: " + "; ".join(failed))

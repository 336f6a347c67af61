"""Checkpoints: written atomically, found again after a restart, old ones pruned."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from hpc_runner.records.atomic import save_atomic

_NAME = re.compile(r"^ckpt_(\d{8})\.pt$")
FORMAT = 1


def checkpoint_path(folder: Path, step: int) -> Path:
    """Return the path of the checkpoint taken after ``step`` optimizer steps."""
    return folder / f"ckpt_{step:08d}.pt"


def list_checkpoints(folder: Path) -> list[Path]:
    """Return the checkpoints in ``folder``, oldest first."""
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found)]


def save_checkpoint(folder: Path, step: int, state: dict[str, Any], keep: int = 3) -> Path:
    """Write ``state`` atomically as the checkpoint of ``step`` and keep only the newest ``keep``."""
    state = {"format": FORMAT, "step": step, **state}
    path = save_atomic(checkpoint_path(folder, step), lambda f: torch.save(state, f))
    if keep > 0:
        for old in list_checkpoints(folder)[:-keep]:
            old.unlink(missing_ok=True)
    return path


def load_latest_checkpoint(folder: Path, map_location: Any = "cpu") -> tuple[Path, dict[str, Any]] | None:
    """Return the newest checkpoint that loads (skipping unreadable ones), or None."""
    for path in reversed(list_checkpoints(folder)):
        try:
            return path, torch.load(path, map_location=map_location, weights_only=True)
        except Exception:  # a file cut short by a crash outside our atomic writes: try the one before
            continue
    return None

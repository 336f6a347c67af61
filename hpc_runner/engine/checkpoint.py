"""Checkpoints: written atomically, found again after a restart (a damaged one named, never skipped
silently), old ones pruned."""

from __future__ import annotations

import re
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from hpc_runner.errors import UserError
from hpc_runner.records.atomic import save_atomic
from hpc_runner.records.rundir import CHECKPOINT_DIR, METRICS_FILE

_NAME = re.compile(r"^ckpt_([0-9]{8})\.pt\Z")
FORMAT = 1
RESTART_FLAG = "--restart"  # the `run --resume DIR` flag that starts a run over (see set_aside_for_restart)


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


class CheckpointError(UserError):
    """Checkpoints exist but none of them can be read: resuming would silently start over."""


def _why(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__


def read_checkpoint(path: Path, map_location: Any = "cpu") -> dict[str, Any]:
    """Load one checkpoint; raise ValueError if it loads but is not one of ours (no step)."""
    state = torch.load(path, map_location=map_location, weights_only=True)
    if not isinstance(state, dict) or not isinstance(state.get("step"), int):
        raise ValueError("not an hpc-runner checkpoint (no integer 'step')")
    return state


def load_latest_checkpoint(folder: Path, map_location: Any = "cpu") -> tuple[Path, dict[str, Any]] | None:
    """Return the newest checkpoint that loads, or None when ``folder`` holds none.

    A newer one that cannot be read is named with its error in a warning that also names the one
    resumed from; when checkpoints exist but none loads, raise CheckpointError naming each: silently
    starting at step 0 would redo the run and append its steps to metrics.jsonl a second time.
    """
    unreadable: list[tuple[Path, str]] = []
    for path in reversed(list_checkpoints(folder)):
        try:
            state = read_checkpoint(path, map_location)
        except Exception as exc:  # cut short or damaged outside our atomic writes (disk, copy)
            unreadable.append((path, _why(exc)))
            continue
        if unreadable:
            skipped = "; ".join(f"{p} ({why})" for p, why in unreadable)
            warnings.warn(
                f"checkpoint {skipped} could not be read; resuming from the older {path} (step {state['step']})",
                CheckpointFallbackWarning,
                stacklevel=2,
            )
        return path, state
    if unreadable:
        raise CheckpointError(
            "no checkpoint of this run can be read: "
            + "; ".join(f"{p.name} ({why})" for p, why in unreadable),
            where=str(folder),
            expected="a checkpoint that loads, to continue the run where it stopped",
            hint=f"To start this run over from step 0 instead, add {RESTART_FLAG} (the checkpoints and "
            "metrics.jsonl are moved aside, not deleted)",
        )
    return None


class CheckpointFallbackWarning(UserWarning):
    """The newest checkpoint could not be read; an older one was used."""


def check_resumable(folder: Path) -> Path | None:
    """Return the checkpoint a resume will continue from (None: there is none); raise CheckpointError."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CheckpointFallbackWarning)  # the trainer warns when it loads
        found = load_latest_checkpoint(folder)
    return found[0] if found else None


def set_aside_for_restart(run_dir: Path) -> Path | None:
    """Move the checkpoints and metrics.jsonl of ``run_dir`` into ``restarted-<time>/``; return it.

    What ``--restart`` does before a run starts over from step 0: nothing is deleted, and the new
    metrics.jsonl does not repeat the steps of the old one.
    """
    run_dir = Path(run_dir)
    moving = [p for p in (run_dir / CHECKPOINT_DIR, run_dir / METRICS_FILE) if p.exists()]
    if not moving:
        return None
    aside = run_dir / f"restarted-{time.strftime('%Y-%m-%d_%H-%M-%S')}"
    n = 1
    while aside.exists():
        n += 1
        aside = aside.with_name(f"{aside.name.split('.')[0]}.{n}")
    aside.mkdir()
    for p in moving:
        p.rename(aside / p.name)
    return aside

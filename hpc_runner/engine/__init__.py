"""Engine: the training loop, checkpoints, metrics, timing and the bundle runner."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hpc_runner.engine.trainer import Trainer, fit

__all__ = ["Trainer", "fit"]


def __getattr__(name: str) -> Any:
    # bundles say `_target_: hpc_runner.engine.Trainer`; importing torch waits until they do
    if name in __all__:
        from hpc_runner.engine import trainer  # deferred: imports torch

        return getattr(trainer, name)
    raise AttributeError(name)

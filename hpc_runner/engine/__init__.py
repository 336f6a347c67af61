"""Engine: the training loop, checkpoints, metrics, timing and the bundle runner."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hpc_runner.engine.trainer import Trainer

__all__ = ["Trainer"]


def __getattr__(name: str) -> Any:
    # bundles say `_target_: hpc_runner.engine.Trainer`; importing torch waits until they do
    if name == "Trainer":
        from hpc_runner.engine.trainer import Trainer

        return Trainer
    raise AttributeError(name)

"""Inference and evaluation over many volumes: inputs, weights, the loop, and background result writing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hpc_runner.inference.predictor import Predictor, evaluate, infer

__all__ = ["Predictor", "evaluate", "infer"]


def __getattr__(name: str) -> Any:
    # bundles say `_target_: hpc_runner.inference.infer`; importing torch waits until they do
    if name in __all__:
        from hpc_runner.inference import predictor  # deferred: imports torch

        return getattr(predictor, name)
    raise AttributeError(name)

"""The Trainer's plain arguments, checked when it is built: a value that makes no sense is bad input.

``max_epochs: -1`` used to train zero epochs and save an untrained model as if it had finished; such
values now raise a ConfigError, which the runner reports as bad input (exit 2, the new run dir removed).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

from hpc_runner.errors import ConfigError
from hpc_runner.records.environment import switch

AMP_ON_CPU = ("amp: true on the CPU runs bfloat16 autocast, which was ~20x slower than float32 on a 2-core VM "
              "(CPUs without native bfloat16 emulate it); set amp: false for CPU runs, or measure both")
GPU_TRANSFORMS_ENV = "HPCR_GPU_TRANSFORMS"  # set by `hpc-runner run --gpu_transforms`; jobs inherit it
_amp_on_cpu_warned = False  # one warning per process: a sweep or a tune builds many Trainers


def _whole(name: str, value: Any, minimum: int) -> None:
    ok = isinstance(value, int) and not isinstance(value, bool)
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        ok = True
    if not ok or value < minimum:
        raise ConfigError(f"Trainer {name} {value!r} is not valid", id_path=None,
                          expected=f"{name}: a whole number >= {minimum}")


METRIC_MODES = ("max", "min")


def better(value: float, best: float, mode: str) -> bool:
    """Whether ``value`` beats ``best`` for a metric where ``mode`` (max or min) is better."""
    return value < best if mode == "min" else value > best


def check_trainer_arguments(
    max_epochs: Any, val_interval: Any, checkpoint_interval: Any, keep_checkpoints: Any, scheduler_interval: Any,
    grad_clip_norm: Any = None, metric_mode: Any = "max",
) -> None:
    """ConfigError for an argument of the Trainer that cannot mean anything."""
    if metric_mode not in METRIC_MODES:
        raise ConfigError(f"Trainer metric_mode {metric_mode!r} is not valid",
                          expected="metric_mode: max (a higher metric is better: Dice) or min (lower: a loss, HD95)")
    _whole("max_epochs", max_epochs, 1)
    _whole("val_interval", val_interval, 1)
    _whole("checkpoint_interval", checkpoint_interval or 0, 0)
    _whole("keep_checkpoints", keep_checkpoints, 1)
    if scheduler_interval not in ("epoch", "iteration"):
        raise ConfigError(f"Trainer scheduler_interval {scheduler_interval!r} is not valid",
                          expected="scheduler_interval: epoch or iteration")
    if grad_clip_norm is not None and (isinstance(grad_clip_norm, bool) or not isinstance(grad_clip_norm, int | float)
                                       or not math.isfinite(grad_clip_norm) or grad_clip_norm <= 0):
        raise ConfigError(f"Trainer grad_clip_norm {grad_clip_norm!r} is not valid",
                          expected="grad_clip_norm: a positive number, or null")


def warn_amp_on_cpu(amp: bool, device_type: str) -> bool:
    """Warn, once per process, that AMP on the CPU is slow; return whether this call warned."""
    global _amp_on_cpu_warned
    if not amp or device_type != "cpu" or _amp_on_cpu_warned:
        return False
    _amp_on_cpu_warned = True
    warnings.warn(AMP_ON_CPU, RuntimeWarning, stacklevel=3)
    return True


def gpu_transforms_wanted(value: bool | None) -> bool:
    """Whether the random transforms run on the device: the Trainer's ``gpu_transforms``, else HPCR_GPU_TRANSFORMS."""
    if value is None:
        return switch(GPU_TRANSFORMS_ENV, default=False)
    if not isinstance(value, bool):
        raise ConfigError(f"Trainer gpu_transforms {value!r} is not valid",
                          expected="gpu_transforms: true, false, or null (then HPCR_GPU_TRANSFORMS decides)")
    return value

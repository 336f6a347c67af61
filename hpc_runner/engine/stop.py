"""Stop requests from SIGUSR2/SIGTERM (SLURM preemption, time limit): finish the step, checkpoint, exit."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterable

_stop = threading.Event()
_reason: list[str] = []


class Preempted(Exception):
    """Raised by the trainer after it checkpointed because a stop was requested."""

    def __init__(self, reason: str, checkpoint: str | None) -> None:
        super().__init__(f"stopped by {reason}; checkpoint {checkpoint}")
        self.reason = reason
        self.checkpoint = checkpoint


class Pruned(Exception):
    """Raised by a validation listener (``tune``'s pruner): the trainer stops at once, no checkpoint needed."""

    def __init__(self, epoch: int, metric_name: str, value: float, reason: str = "pruned") -> None:
        super().__init__(f"{reason} after epoch {epoch + 1} ({metric_name} {value:.4g})")
        self.epoch = epoch
        self.metric_name = metric_name
        self.value = value
        self.reason = reason


def request_stop(reason: str) -> None:
    """Ask the running trainer to checkpoint at the end of its current step and stop."""
    _reason.append(reason)
    _stop.set()


def stop_requested() -> str | None:
    """Return the reason of a pending stop request, or None."""
    return _reason[0] if _stop.is_set() and _reason else None


def clear_stop() -> None:
    """Forget a stop request (tests, and a process that runs several bundles)."""
    _stop.clear()
    _reason.clear()


def install_stop_handlers(signums: Iterable[int] = (signal.SIGUSR2, signal.SIGTERM)) -> Callable[[], None]:
    """Turn the given signals into stop requests; return a function that restores the old handlers.

    The handler only sets a flag: the checkpoint is written by the training loop between two steps,
    so it is never taken from a half-updated model.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {}

    def handler(signum: int, _frame: object) -> None:
        request_stop(signal.Signals(signum).name)

    for s in signums:
        previous[s] = signal.signal(s, handler)

    def restore() -> None:
        for s, h in previous.items():
            signal.signal(s, h)

    return restore

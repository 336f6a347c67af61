"""Listeners told of each validation result: how ``tune`` reports to Optuna without the trainer knowing it.

``Trainer.run`` calls :func:`notify` after it has written a validation record. A listener may raise
``hpc_runner.engine.stop.Pruned``: the trainer then writes that epoch's record and stops, and the run
ends with status ``pruned``. Listeners belong to the process (one trainer runs at a time in a worker).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

Listener = Callable[[int, str, float], None]
_listeners: list[Listener] = []
_lock = threading.Lock()


def add_listener(fn: Listener) -> None:
    """Call ``fn(epoch, metric_name, value)`` after each validation (epoch counts from 0, as in metrics.jsonl)."""
    with _lock:
        _listeners.append(fn)


def remove_listener(fn: Listener) -> None:
    """Stop calling ``fn`` (no error if it was not added)."""
    with _lock, contextlib.suppress(ValueError):
        _listeners.remove(fn)


@contextlib.contextmanager
def listening(fn: Listener) -> Iterator[None]:
    """Add ``fn`` for the duration of the block."""
    add_listener(fn)
    try:
        yield
    finally:
        remove_listener(fn)


def notify(epoch: int, metric_name: str, value: float) -> None:
    """Call every listener in the order added; what a listener raises (Pruned) reaches the trainer."""
    with _lock:
        listeners = list(_listeners)
    for fn in listeners:
        fn(epoch, metric_name, value)

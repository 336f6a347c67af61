"""Read an executor's submit limits in a thread while the caller does other work (a sweep checks its points).

sacctmgr and squeue wait ~0.3 s on slurmdbd and slurmctld; a 10,000-point sweep spends about as long
checking its points. Started together, the first read costs nothing extra; it is as fresh as any read
(the governor's answer to a limit refusal covers a slot taken in the meantime, as it always did).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from hpc_runner.scheduler.executor import Executor

LimitsReader = Callable[[Executor], Any]


def read_ahead(executor: Executor, reader: LimitsReader | None = None) -> LimitsReader:
    """Start ``reader(executor)`` (default ``executor.limits()``) now; return a reader whose first call for this
    executor returns that answer (or raises its error), and whose later calls read again."""
    read: LimitsReader = reader or (lambda ex: ex.limits())
    if not executor.answers_wait:
        return read
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["value"] = read(executor)
        except BaseException as exc:  # handed to the caller, which decides what it means
            box["error"] = exc

    # a daemon: a check that fails first must not wait for the scheduler's answer to exit
    thread = threading.Thread(target=work, name="hpcr-limits-ahead", daemon=True)
    thread.start()
    taken = threading.Event()

    def first_then_fresh(ex: Executor) -> Any:
        if ex is not executor or taken.is_set():
            return read(ex)
        taken.set()
        thread.join()
        if "error" in box:
            raise box["error"]
        return box["value"]

    return first_then_fresh

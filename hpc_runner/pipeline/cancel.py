"""``cancel DIR`` of a pipeline: every stage still planned, queued or running is cancelled, in the record first
(cause CANCELLED) and then its jobs and waiting points; completed stages and points keep their results
(``resume DIR`` queues the cancelled ones again)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from hpc_runner.pipeline import record as pr
from hpc_runner.pipeline.propagate import USER_CANCELLED, stop_stages
from hpc_runner.pipeline.view import PENDING, PLANNED, RUNNING, view

Log = Callable[[str], None]


def cancel_pipeline(directory: Path, log: Log = print) -> tuple[list[str], list[str]]:
    """Cancel the pipeline's stages that may still run; return them and the job ids asked to stop."""
    _, views = view(directory)
    live = [v.name for v in views if v.state in (PENDING, RUNNING, PLANNED)]
    if not live:
        return [], []
    with pr.locked(directory) as led:
        for name in live:
            if led.record.stage(name).get("state") in (pr.PLANNED, pr.QUEUED, pr.NOT_SUBMITTED):
                led.cancel(name, USER_CANCELLED, "cancelled by `hpc-runner cancel`")
        record = led.record
    return live, stop_stages(record, live, log)

"""TensorBoard event files of a run: ``RUN_DIR/tb/`` (a sweep point: ``points/NNNN/tb/<its overrides>/``).

``tensorboard --logdir RUN_DIR`` shows one run; ``tensorboard --logdir SWEEP_DIR`` lists each point as
``points/0007/tb/lr=0.001,batch_size=4``, so the points compare side by side. The ``tensorboard`` package is
optional (the ``tracking`` extra); without it the run says once that TensorBoard logging is off.
``HPCR_TENSORBOARD=0`` turns it off.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

from hpc_runner.records.environment import switch
from hpc_runner.tracking.settings import EXTRA, overrides_label, point_overrides

TB_DIR = "tb"
OFF_VAR = "HPCR_TENSORBOARD"
_said_off = False


def event_dir(run_dir: Path) -> Path:
    """Return the folder of the run's event files (named by its overrides for a sweep point)."""
    run_dir = Path(run_dir)
    values = point_overrides(run_dir)
    return run_dir / TB_DIR / overrides_label(values) if values is not None else run_dir / TB_DIR


def _writer_thread_hook(previous: Any) -> Any:
    """Return a ``threading.excepthook`` that leaves out the traceback of TensorBoard's writer thread failing
    on a write (a full or read-only filesystem): the same error reaches the run at its next add or flush, where it
    is reported as bad input in one paragraph; any other thread's exception goes to ``previous``."""

    def hook(args: Any) -> None:
        if type(args.thread).__name__ == "_AsyncWriterThread" and isinstance(args.exc_value, OSError):
            return
        previous(args)

    hook.hpcr_writer_hook = True  # type: ignore[attr-defined]
    return hook


def open_writer(run_dir: Path, purge_step: int | None = None) -> Any:
    """Return a SummaryWriter for the run (events after ``purge_step`` from before a resume are dropped), or None."""
    global _said_off
    if not switch(OFF_VAR, default=True):  # a value that is neither on nor off is refused, naming it
        return None
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        if not _said_off:
            _said_off = True
            print(f"hpc-runner: TensorBoard logging is off (the tensorboard package is not installed); "
                  f"turn it on with: {EXTRA}  (or pip install tensorboard)", file=sys.stderr, flush=True)
        return None
    if not getattr(threading.excepthook, "hpcr_writer_hook", False):  # once, before the writer's thread starts
        threading.excepthook = _writer_thread_hook(threading.excepthook)
    return SummaryWriter(log_dir=str(event_dir(run_dir)), purge_step=purge_step or None, flush_secs=20)

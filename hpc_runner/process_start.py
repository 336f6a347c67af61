"""How a process of ours starts: the one call each entry point makes first.

The ``hpc-runner`` command (every job of a sweep runs it too), the sandboxed job (``run --safe``) and a job's call
(``scheduler/job_call.py``) start the same way, before anything imports torch or MONAI: the collector's thresholds
raised while importing (``heap.py``), MLflow, pyplot and Optuna deferred until used (``optional_modules.py``), the
exit that skips collecting the heap without losing a write (``quick_exit.py``), and no progress bars without a
terminal (``progress_bars.py``). A caller of ``main()`` in-process (the tests, a notebook) calls none of these.
"""

from __future__ import annotations

from hpc_runner.heap import collect_less_while_importing
from hpc_runner.optional_modules import defer_when_monai_is_imported
from hpc_runner.progress_bars import no_bars_without_a_terminal
from hpc_runner.quick_exit import freeze_at_exit


def start_process() -> None:
    """Set this process up as an entry point of ours does, first thing (each part runs once per process)."""
    collect_less_while_importing()  # until the engine settles the heap before a run
    defer_when_monai_is_imported()  # MLflow, pyplot and Optuna load when used
    freeze_at_exit()
    no_bars_without_a_terminal()

"""What a Grid Engine job runs: ``python -m hpc_runner.scheduler.gridengine.job_call FILE.json``.

The job's arguments file (executor.py writes it beside the logs: the function by its module and name, each task's
arguments) is read by the one bounded reader and parsed with its nesting bounded; the function it names must be
one of hpc-runner's job entries (``JOB_ENTRIES``, looked up before anything is imported), so a file in a shared
folder that was edited can name no other code. Task ``SGE_TASK_ID - 1`` of an array (task 0 in a job that is no
array: ``SGE_TASK_ID`` is ``undefined``) is called.

How it ends: the call's return is exit status 0; an exception is its traceback on stderr and exit status 1; a
``SystemExit`` keeps its code (99 asks Grid Engine to run the job again: job_side.py); a ``MemoryError`` (the
address-space limit ``h_vmem`` sets makes an allocation past it fail in the job, where the kernel would have
killed it) is exit status 137, as the kernel's OOM killer's SIGKILL would give, so qacct's record reads as out
of memory (answers.py).
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any

from hpc_runner.records.numbers import outside_int
from hpc_runner.records.read import parse_json_text, read_record_text
from hpc_runner.scheduler.executor import JOB_ENTRIES, JOB_ENTRY

USAGE = "usage: python -m hpc_runner.scheduler.gridengine.job_call FILE.json (in a Grid Engine job or array task)"
MAX_ARGS_BYTES = 256 << 20
OUT_OF_MEMORY_EXIT = 137


def task_number(environ: dict[str, str] | os._Environ[str]) -> int:
    """Our task (0-based) from ``SGE_TASK_ID`` (1-based; ``undefined`` or unset outside an array)."""
    raw = environ.get("SGE_TASK_ID", "undefined")
    if raw.strip() in ("", "undefined"):
        return 0
    task = outside_int(raw, low=1)
    if task is None:
        raise ValueError(f"SGE_TASK_ID={raw[:40]!r} is not a task number")
    return task - 1


def task_call(args_file: Path, task: int) -> tuple[Any, list[Any]]:
    """Return the function and arguments of task ``task`` of the arguments file (ValueError when it has none)."""
    text = read_record_text(args_file, "job arguments file", MAX_ARGS_BYTES)
    data = None if text is None else parse_json_text(text, args_file, "job arguments file")
    if not isinstance(data, dict) or not isinstance(data.get("tasks"), list):
        raise ValueError(f"{args_file} is not a job's arguments file")
    function = data.get("function")
    if not isinstance(function, str) or function not in JOB_ENTRIES:  # checked before any import
        raise ValueError(f"{args_file} names {str(function)[:200]!r}, not a function of hpc-runner a job may run")
    module, _, name = function.partition(":")
    fn = getattr(importlib.import_module(module), name, None)
    if not getattr(fn, JOB_ENTRY, False):
        raise ValueError(f"{args_file} names {function!r}, not a function a job may run")
    if not 0 <= task < len(data["tasks"]) or not isinstance(data["tasks"][task], list):
        raise ValueError(f"{args_file} has no arguments for task {task}")
    return fn, data["tasks"][task]


def main(argv: list[str] | None = None) -> int:
    """Run this job's (or array task's) call; see the module's text for how it ends."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or not os.environ.get("JOB_ID"):
        print(USAGE, file=sys.stderr)
        return 2
    fn, args = task_call(Path(argv[0]), task_number(os.environ))
    try:
        fn(*args)
    except MemoryError:
        print("hpc-runner: out of memory (MemoryError: the job's h_vmem is its address-space limit)",
              file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(OUT_OF_MEMORY_EXIT)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What a command job runs: ``python -m hpc_runner.scheduler.slurm.job_call FILE.json``.

It reads the job's arguments file (scheduler/slurm/command_job.py: one bounded, regular-file read), takes the
arguments of array task ``SLURM_ARRAY_TASK_ID`` (task 0 in a job that is no array) and calls the function the
file names, which must be one of hpc-runner's job entries (``job_entry``: a sweep's task, a tune's worker, a
submitted run, a pipeline's stage, a MONAI command); a file in a shared folder may have been edited, and it can
name no other code. As under submitit's runner, ``SUBMITIT_FOLDER`` is the log folder (so
``submitit.JobEnvironment().paths`` names this job's logs), an exception ends the job with its traceback on
stderr and exit status 1, and the function's own handlers decide what USR2 and TERM do.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from hpc_runner.records.atomic import write_text_atomic
from hpc_runner.records.numbers import outside_int
from hpc_runner.records.read import parse_json_text, read_record_text
from hpc_runner.scheduler.executor import JOB_ENTRIES, JOB_ENTRY

RESULT_SUFFIX = "_result.json"  # beside ``<JOB>_<TASK>_log.out``, where submitit's ``_result.pkl`` would be
USAGE = "usage: python -m hpc_runner.scheduler.slurm.job_call FILE.json (in a SLURM job or array task)"


MAX_ARGS_BYTES = 256 << 20  # a 100,000-point sweep's arguments: a few MB


def task_call(args_file: Path, task: int) -> tuple[Any, list[Any]]:
    """Return the function and arguments of task ``task`` of the arguments file (ValueError when it has none).

    The file is read by the one bounded reader (a regular file, a size bound) and parsed with its nesting
    bounded; the function it names is looked up in ``JOB_ENTRIES`` before anything is imported, so a
    hand-edited file cannot make this process import (and so run the import-time code of) any other module."""
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
        raise ValueError(f"{args_file} names {data.get('function')!r}, not a function a job may run")
    if not 0 <= task < len(data["tasks"]) or not isinstance(data["tasks"][task], list):
        raise ValueError(f"{args_file} has no arguments for task {task}")
    return fn, data["tasks"][task]


def main(argv: list[str] | None = None) -> int:
    """Run this job's (or array task's) call; its exceptions propagate (traceback, exit status 1)."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or "SLURM_JOB_ID" not in os.environ:
        print(USAGE, file=sys.stderr)
        return 2
    args_file = Path(argv[0])
    os.environ["SUBMITIT_FOLDER"] = str(args_file.parent)
    raw_task = os.environ.get("SLURM_ARRAY_TASK_ID") or "0"
    task = outside_int(raw_task)
    if task is None:
        raise ValueError(f"SLURM_ARRAY_TASK_ID={raw_task[:40]!r} is not a task number")
    fn, args = task_call(args_file, task)
    try:
        fn(*args)
    except BaseException as exc:
        _mark_end(args_file.parent, "raised", f"{type(exc).__name__}: {exc}"[:500])
        raise
    _mark_end(args_file.parent, "returned")
    return 0


def _mark_end(folder: Path, how: str, error: str | None = None) -> None:
    """Write ``<JOB>_<TASK>_result.json`` beside the logs of a job that is no array, as submitit writes its result
    pickle there: `submit --wait` sees the call end at once, not at its next sacct call (an array's tasks write
    none: 2,000 more files)."""
    if os.environ.get("SLURM_ARRAY_TASK_ID"):
        return
    path = folder / f"{os.environ['SLURM_JOB_ID']}_{os.environ.get('SLURM_PROCID') or 0}{RESULT_SUFFIX}"
    with contextlib.suppress(OSError):  # a note for a follower, not the job's outcome (run.yaml and sacct are)
        write_text_atomic(path, json.dumps({"call": how, "error": error}) + "\n")


if __name__ == "__main__":
    sys.exit(main())

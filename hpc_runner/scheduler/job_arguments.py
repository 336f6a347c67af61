"""A job's arguments file, written on the submit side (``task_arguments``) and read in the job (``task_call``).

``{"function": "module:name", "tasks": [args...]}``: the function by its module and name (one of hpc-runner's job
entries, scheduler/executor.py ``JOB_ENTRIES``), each task's arguments (one task for a job that is no array), in
plain JSON. The same file for every backend; the job runs ``python -u -m hpc_runner job FILE`` (``JOB_COMMAND``:
cli/job.py, a command a user can read and run by hand; ``python -m JOB_CALL_MODULE FILE``, scheduler/job_call.py,
what scripts of an earlier version run, stays). Apart from the runner so that an executor can write the file
without importing the job side.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hpc_runner.records.read import RecordError, parse_json_text, read_record_text
from hpc_runner.scheduler.executor import JOB_ENTRIES, JOB_ENTRY, job_entry_name

JOB_CALL_MODULE = "hpc_runner.scheduler.job_call"  # what job scripts of an earlier version run: python -m ... FILE
JOB_COMMAND = ("-u", "-m", "hpc_runner", "job")  # what every backend's job script runs after python: ... FILE
# job entries that moved (issue 45: the jobs core left sweep/ for jobs/): an arguments file written before the move, of
# a job still queued or requeued, names the old place
MOVED_ENTRIES = {
    "hpc_runner.sweep.job:run_submitted": "hpc_runner.jobs.job:run_submitted",
    "hpc_runner.sweep.task:run_sweep_task": "hpc_runner.jobs.task:run_sweep_task",
}
MAX_ARGS_BYTES = 256 << 20  # a 100,000-point sweep's arguments: a few MB


def task_arguments(fn: Callable[..., Any], argument_lists: Sequence[Sequence[Any]]) -> str | None:
    """Return the JSON text of a job's tasks (``{"function": "module:name", "tasks": [args...]}``, one task for a
    job that is no array), or None when ``fn`` is not one of our job entries (scheduler/executor.py ``job_entry``)
    or an argument would not read back equal (a tuple, an object)."""
    if job_entry_name(fn) not in JOB_ENTRIES or not getattr(fn, JOB_ENTRY, False):
        return None
    data = {"function": job_entry_name(fn), "tasks": [list(args) for args in zip(*argument_lists, strict=True)]}
    try:
        text = json.dumps(data, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        return None
    try:  # read back as the job will (task_call): nesting bounded
        back = parse_json_text(text, "job arguments")
    except RecordError:
        return None
    return text if back == data else None


def task_call(args_file: Path, task: int) -> tuple[Any, list[Any]]:
    """Return the function and arguments of task ``task`` of the arguments file (ValueError when it has none)."""
    text = read_record_text(args_file, "job arguments file", MAX_ARGS_BYTES)
    data = None if text is None else parse_json_text(text, args_file, "job arguments file")
    if not isinstance(data, dict) or not isinstance(data.get("tasks"), list):
        raise ValueError(f"{args_file} is not a job's arguments file")
    function = data.get("function")
    function = MOVED_ENTRIES.get(function, function) if isinstance(function, str) else function
    if not isinstance(function, str) or function not in JOB_ENTRIES:  # checked before any import
        raise ValueError(f"{args_file} names {str(function)[:200]!r}, not a function of hpc-runner a job may run")
    module, _, name = function.partition(":")
    fn = getattr(importlib.import_module(module), name, None)
    if not getattr(fn, JOB_ENTRY, False):
        raise ValueError(f"{args_file} names {function!r}, not a function a job may run")
    if not 0 <= task < len(data["tasks"]) or not isinstance(data["tasks"][task], list):
        raise ValueError(f"{args_file} has no arguments for task {task}")
    return fn, data["tasks"][task]

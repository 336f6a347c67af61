"""What every backend's job runs: ``python -u -m hpc_runner.scheduler.job_call FILE.json``.

A group of tasks (one job, or an array) is submitted with its arguments in one JSON file beside its logs
(scheduler/job_arguments.py writes it and reads it back), and a script whose last line runs this module on that
file: a line a user can read, the arguments in plain text, the same file format for every scheduler.

In the job, ``task_call`` reads the file through the one bounded reader and looks the function it names up in
``JOB_ENTRIES`` (scheduler/executor.py) BEFORE anything is imported, so a file in a shared folder that was edited
can make this process import (and so run the import-time code of) no other module. The task called is the one
the active job side gives (scheduler/job_env.py: the backend whose variables are present; task 0 in a job that
is no array).

How it ends: the call's return is exit status 0 (the job side's ``requeue_exit_code`` when it returns that its
job was requeued: ``exit_status``); an exception is its traceback on stderr and exit status 1; a
``SystemExit`` keeps its code. What a backend adds around the call (SLURM: the log folder for submitit's
``JobEnvironment`` and a note when the call ended; Grid Engine: a ``MemoryError`` past ``h_vmem`` as the exit
status of a kill) is its job side's ``around_call``, in its own folder.
"""

from __future__ import annotations

import sys
from pathlib import Path

from hpc_runner.process_start import start_process
from hpc_runner.records.numbers import outside_int
from hpc_runner.scheduler.job_arguments import JOB_CALL_MODULE as MODULE
from hpc_runner.scheduler.job_arguments import MAX_ARGS_BYTES, task_arguments, task_call
from hpc_runner.scheduler.job_env import current

__all__ = ["MAX_ARGS_BYTES", "MODULE", "exit_status", "main", "task_arguments", "task_call", "task_index"]
USAGE = f"usage: python -m {MODULE} FILE.json (in a scheduler's job or array task)"


def task_index(raw: str | None) -> int:
    """Our task (0-based) from the job side's ``array_task_id`` (None outside an array: task 0)."""
    if raw is None:
        return 0
    task = outside_int(raw)
    if task is None:
        raise ValueError(f"array task {raw[:40]!r} is not a task number")
    return task


def main(argv: list[str] | None = None) -> int:
    """Run this job's (or array task's) call; see the module's text for how it ends."""
    argv = sys.argv[1:] if argv is None else argv
    side = current()
    if len(argv) != 1 or not side.in_job():
        print(USAGE, file=sys.stderr)
        return 2
    args_file = Path(argv[0])
    with side.around_call(args_file):
        fn, args = task_call(args_file, task_index(side.array_task_id))
        result = fn(*args)
    return exit_status(result, side.requeue_exit_code)


def exit_status(result: object, requeue_exit_code: int | None) -> int:
    """0, or the job side's ``requeue_exit_code`` when the call says its job was requeued (``{"requeued": id}``:
    a stop signal, a checkpoint, and ``requeue`` said yes) on a scheduler that requeues a job by its exit status
    (Grid Engine: 99); where the requeue was a command (SLURM's), the job ends as it would."""
    if requeue_exit_code is not None and isinstance(result, dict) and result.get("requeued"):
        print(f"hpc-runner: requeued: exit {requeue_exit_code} asks the scheduler to run this job again",
              file=sys.stderr, flush=True)
        return requeue_exit_code
    return 0


if __name__ == "__main__":
    start_process()  # hpc_runner/process_start.py, as the hpc-runner entry point does
    sys.exit(main())

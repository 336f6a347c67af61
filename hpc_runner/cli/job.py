"""``hpc-runner job``: run what a job's arguments file names, as the job does (and a user can, by hand).

Every backend's job script ends with ``PYTHON -u -m hpc_runner job FILE`` (scheduler/job_arguments.py
``JOB_COMMAND``): the same call as ``python -m hpc_runner.scheduler.job_call FILE`` (kept for jobs queued by an
earlier version), through the same bounded reader and ``JOB_ENTRIES`` lookup (scheduler/job_arguments.py
``task_call``). In a job the task is the one the active job side gives; by hand, ``--task N`` (task 0 of a job
that is no array).
"""

from __future__ import annotations

import argparse

from hpc_runner.errors import UserError
from hpc_runner.scheduler.job_call import exit_status, task_call, task_index
from hpc_runner.scheduler.job_env import current

HELP = "run what a job's arguments file names (what a job script runs; by hand too)"
DESCRIPTION = """Run the call a job's arguments file names (array-<id>.json or job-<id>.json beside the job's logs),
as the job script does: the function, one of hpc-runner's job entries, with the task's arguments.
Given a run or sweep dir, the newest arguments file in it (or in its job folder) is run.
In a job the task comes from the scheduler (the array task); by hand, --task N (0-based)."""
EPILOG = """examples:
  hpc-runner job runs/synthetic_seg/sweep-2026-11-21_10-00-00/jobs/array-0123456789ab.json --task 3
  hpc-runner job runs/synthetic_seg/run-2026-11-21_10-00-00"""

ARGS_PATTERNS = ("array-*.json", "job-*.json")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the job options."""
    parser.add_argument("target", metavar="ARGS_FILE_OR_RUN_DIR",
                        help="a job's arguments file, or a run (sweep) dir whose newest one is run")
    parser.add_argument("--task", type=int, default=None, metavar="N",
                        help="the task of an array to run (0-based; in a job: the scheduler's array task)")


def arguments_file(target: str) -> str:
    """The arguments file ``target`` names: itself, or the newest ``array-*.json``/``job-*.json`` in the folder
    or one folder below it (UserError when there is none)."""
    from pathlib import Path


    path = Path(target)
    if not path.is_dir():
        return str(path)
    found = [f for pattern in ARGS_PATTERNS for f in [*path.glob(pattern), *path.glob(f"*/{pattern}")]
             if f.is_file()]
    if not found:
        raise UserError(f"{target} holds no job arguments file (array-*.json, job-*.json, or one folder below)",
                        expected="a job's arguments file, or the run or sweep dir of a submitted job")
    return str(max(found, key=lambda f: (f.stat().st_mtime, str(f))))


def main(args: argparse.Namespace) -> int:
    """Run the call (see the module's text): its exit status as the job's."""
    import sys
    import traceback
    from pathlib import Path


    side = current()
    args_file = Path(arguments_file(args.target))
    in_job = side.in_job()
    if args.task is not None:
        task = args.task
    else:
        try:
            task = task_index(side.array_task_id if in_job else None)
        except ValueError as exc:
            raise UserError(str(exc), expected="a job whose array task id is a number, or --task N") from None
    try:
        fn, call_args = task_call(args_file, task)
    except ValueError as exc:
        raise UserError(str(exc), expected="a job's arguments file as hpc-runner wrote it, and a task it holds "
                        "(--task N, 0-based)") from None
    if not in_job:
        print(f"hpc-runner job: task {task} of {args_file}: {getattr(fn, '__module__', '?')}."
              f"{getattr(fn, '__name__', '?')}", file=sys.stderr, flush=True)
    try:  # as scheduler/job_call.py: a traceback and exit 1, a SystemExit its code; the job side's wrapping
        with side.around_call(args_file):
            result = fn(*call_args)
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException:
        traceback.print_exc()
        return 1
    return exit_status(result, side.requeue_exit_code)

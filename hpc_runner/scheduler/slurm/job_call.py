"""SLURM's part of a job's call (the call itself is scheduler/job_call.py, the same for every backend).

As under submitit's runner, ``SUBMITIT_FOLDER`` is the log folder (so ``submitit.JobEnvironment().paths`` names
this job's logs), and a job that is no array writes ``<JOB>_<PROCID>_result.json`` beside its logs when its call
ends (``marked_end``), where submitit writes its result pickle: `submit --wait` (follow.py) sees the call end at
once, not at its next sacct call (an array's tasks write none: 2,000 more files).

``python -m hpc_runner.scheduler.slurm.job_call FILE`` (what scripts of an earlier version ran, as
``slurm.array_task`` before it) is scheduler/job_call.py: jobs still queued when hpc-runner is upgraded run.
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
from collections.abc import Iterator
from pathlib import Path

from hpc_runner.records.atomic import write_text_atomic
from hpc_runner.scheduler.job_arguments import JOB_CALL_MODULE, MAX_ARGS_BYTES, task_call

RESULT_SUFFIX = "_result.json"  # beside ``<JOB>_<TASK>_log.out``, where submitit's ``_result.pkl`` would be

__all__ = ["MAX_ARGS_BYTES", "RESULT_SUFFIX", "marked_end", "task_call"]


@contextlib.contextmanager
def marked_end(folder: Path) -> Iterator[None]:
    """Set ``SUBMITIT_FOLDER`` to the log folder, run the call, and note how it ended (see the module's text)."""
    os.environ["SUBMITIT_FOLDER"] = str(folder)
    try:
        yield
    except BaseException as exc:
        _mark_end(folder, "raised", f"{type(exc).__name__}: {exc}"[:500])
        raise
    _mark_end(folder, "returned")


def _mark_end(folder: Path, how: str, error: str | None = None) -> None:
    if os.environ.get("SLURM_ARRAY_TASK_ID"):
        return
    path = folder / f"{os.environ['SLURM_JOB_ID']}_{os.environ.get('SLURM_PROCID') or 0}{RESULT_SUFFIX}"
    with contextlib.suppress(OSError):  # a note for a follower, not the job's outcome (run.yaml and sacct are)
        write_text_atomic(path, json.dumps({"call": how, "error": error}) + "\n")


if __name__ == "__main__":  # the earlier name of scheduler/job_call.py (run by name: the job side imports this)
    runpy.run_module(JOB_CALL_MODULE, run_name="__main__", alter_sys=True)

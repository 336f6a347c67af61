"""Grid Engine's part of a job's call (the call itself is scheduler/job_call.py, the same for every backend).

A ``MemoryError`` (the address-space limit ``h_vmem`` sets makes an allocation past it fail in the job, where the
kernel would have killed it) ends the job with exit status 137, as the kernel's OOM killer's SIGKILL would give,
so qacct's record reads as out of memory (answers.py). Exit status 99 (the job side's ``requeue_exit_code``)
asks Grid Engine to run the job again (job_side.py).

``python -m hpc_runner.scheduler.gridengine.job_call FILE`` (what scripts of an earlier version ran) is
scheduler/job_call.py.
"""

from __future__ import annotations

import contextlib
import os
import runpy
import sys
from collections.abc import Iterator

from hpc_runner.scheduler.job_arguments import JOB_CALL_MODULE

OUT_OF_MEMORY_EXIT = 137


@contextlib.contextmanager
def memory_error_as_kill() -> Iterator[None]:
    """Exit 137 on a ``MemoryError`` in the call (see the module's text)."""
    try:
        yield
    except MemoryError:
        print("hpc-runner: out of memory (MemoryError: the job's h_vmem is its address-space limit)",
              file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(OUT_OF_MEMORY_EXIT)


__all__ = ["OUT_OF_MEMORY_EXIT", "memory_error_as_kill"]

if __name__ == "__main__":  # the earlier name of scheduler/job_call.py (run by name: the job side imports this)
    runpy.run_module(JOB_CALL_MODULE, run_name="__main__", alter_sys=True)

"""``submit --wait``: print a job's log as it grows until the job ends."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TextIO

from hpc_runner.scheduler.job_status import JobState
from hpc_runner.scheduler.slurm.accounting import query_scheduler
from hpc_runner.scheduler.slurm.job_call import RESULT_SUFFIX


class _Tail:
    """The new part of a file since the last read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def read(self) -> str:
        """Return what was appended since the last call (empty while the file does not exist)."""
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return ""
        self.offset += len(data)
        return data.decode("utf-8", "replace")


def follow_job(
    job_id: str,
    stdout: Path,
    stderr: Path,
    *,
    out: TextIO | None = None,
    poll_s: float = 1.0,
    state_every_s: float = 10.0,
    since: str | None = None,
) -> str:
    """Print ``stdout``/``stderr`` as they grow until the job is final; return its final state."""
    out = out or sys.stdout
    tails = [_Tail(Path(stdout)), _Tail(Path(stderr))]
    last_state_check = 0.0
    state = "UNKNOWN"
    # the call returned (or raised): submitit's result pickle, or a command job's note (scheduler/slurm/job_call.py)
    results = [Path(str(stdout).replace("_log.out", suffix)) for suffix in ("_result.pkl", RESULT_SUFFIX)]
    finished_at: float | None = None
    while True:
        for t in tails:
            text = t.read()
            if text:
                out.write(text)
                out.flush()
        now = time.monotonic()
        finished = any(r.exists() for r in results)
        if finished and finished_at is None:
            finished_at = now
        if finished or now - last_state_check >= state_every_s:
            last_state_check = now
            answer = query_scheduler([job_id], since=since)
            status = answer.status(job_id)
            if status is not None and status.state is not JobState.UNKNOWN:
                state = status.state.value
            if status is not None and status.state.final:
                break
            if finished_at is not None and now - finished_at > 30:
                break  # the function returned; the scheduler's record lags or is gone
        time.sleep(poll_s)
    time.sleep(0.2)  # the last lines may land just after the state changes
    for t in tails:
        text = t.read()
        if text:
            out.write(text)
    out.flush()
    return state

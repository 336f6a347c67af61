"""The local executor: no scheduler; the tasks run here, one after another, in the foreground.

``submit`` gives each task the job id ``local`` and keeps it; the caller records the submission (in
sweep.yaml or run.yaml) and then calls ``run_pending``, so a task finds itself recorded exactly as a
SLURM task would. A task that raises is counted and logged; the next one runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from hpc_runner.scheduler.executor import LOCAL_JOB_ID, Executor, Job, JobRequest, Log, SchedulerAnswer, SubmitLimits
from hpc_runner.scheduler.job_state import FROM_NOWHERE


class LocalExecutor(Executor):
    """Runs the tasks on this machine, after the submission is recorded."""

    kind = "local"
    runs_here = True

    def __init__(self, profile: Any) -> None:
        super().__init__(profile)
        self.pending: list[tuple[Callable[..., Any], tuple[Any, ...], str]] = []
        self.results: list[Any] = []

    def limits(self, fresh: bool = False) -> SubmitLimits:
        """No scheduler: no submit limit."""
        import getpass

        return SubmitLimits(user=getpass.getuser(), notes=["no scheduler: runs here"])

    def is_limit_refusal(self, message: str) -> bool:
        """Nothing is refused here for a limit."""
        return False

    def check_time(self) -> None:
        """No time limit here."""

    def check_resources(self, request: JobRequest, count: int, what: str) -> None:
        """Nothing to ask: this machine runs it."""

    def script(self, request: JobRequest, count: int) -> str | None:
        """No job script: the work runs in this process."""
        return None

    def submit(self, fn: Callable[..., Any], argument_lists: Sequence[Sequence[Any]], request: JobRequest) -> list[Job]:
        """Keep the tasks for ``run_pending``; each gets the job id ``local``."""
        count = len(argument_lists[0]) if argument_lists else 0
        for n in range(count):
            self.pending.append((fn, tuple(a[n] for a in argument_lists), request.job_name))
        return [Job(LOCAL_JOB_ID) for _ in range(count)]

    def run_pending(self, log: Log = print) -> int:
        """Run the kept tasks in order; return how many raised (each is logged, the next runs)."""
        failed = 0
        while self.pending:
            fn, args, _ = self.pending.pop(0)
            try:
                self.results.append(fn(*args))
            except KeyboardInterrupt:
                self.pending.clear()
                raise
            except Exception as exc:  # the task's own records (run.yaml, error.txt) say what failed
                failed += 1
                first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                log(f"hpc-runner: a task failed: {first}")
        return failed

    def query(self, job_ids: Sequence[str | None], since: str | None = None) -> SchedulerAnswer:
        """No scheduler to ask: the run records say everything."""
        return SchedulerAnswer({}, FROM_NOWHERE)

    def still_queued(self, job_ids: Sequence[str]) -> set[str]:
        """Nothing is queued here once the command returned."""
        return set()

    def cancel(self, job_ids: Sequence[str]) -> list[str]:
        """Nothing runs here after the command returned."""
        return []

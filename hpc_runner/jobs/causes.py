"""Why a failed point failed: one cause from the scheduler's ``JobStatus`` and the run dir's records together.

The causes, and what decides each (first match wins; a completed run.yaml never reaches here):

- ``OUT_OF_MEMORY``: the scheduler says OUT_OF_MEMORY (a cgroup kill), or the run's error is
  torch.cuda.OutOfMemoryError / MemoryError or says "CUDA out of memory".
- ``TIMEOUT``: the scheduler says TIMEOUT, or its own line in the job log says so (``LogLine.state``).
- ``PREEMPTED``: the scheduler says PREEMPTED, or the run stopped at a checkpoint and was not requeued
  (run.yaml "preempted" in a job that ended FAILED: the requeue was refused).
- ``NODE_FAIL``: the scheduler says NODE_FAIL.
- ``CANCELLED``: the scheduler says CANCELLED (and by whom, where it says), or the run was interrupted.
- ``BAD_INPUT``: the run failed with a hpc-runner UserError (a bad config or a missing input), or
  the job exited with code 2 (what ``hpc-runner run`` returns for one).
- ``ERROR``: any other exception: its type, message, the config id whose resolution failed and
  the file:line where it was raised (run.yaml's ``error``, else the job log's last exception line).

The scheduler's verdict comes first because its kill leaves a run.yaml that says only "running" or
"preempted" (SIGTERM before the kill looks like a stop request to the runner).
"""

from __future__ import annotations

import pwd
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from hpc_runner.scheduler.job_logs import LogLine
from hpc_runner.scheduler.job_status import FAILED_STATES, JobState, JobStatus

OUT_OF_MEMORY = "OUT_OF_MEMORY"
TIMEOUT = "TIMEOUT"
PREEMPTED = "PREEMPTED"
NODE_FAIL = "NODE_FAIL"
CANCELLED = "CANCELLED"
ERROR = "ERROR"
BAD_INPUT = "BAD_INPUT"
RETURNED = "RETURNED"  # the ledger gave the point up: its tasks returned it unrun too often
CAUSES = (OUT_OF_MEMORY, TIMEOUT, PREEMPTED, NODE_FAIL, CANCELLED, ERROR, BAD_INPUT, RETURNED)

# the scheduler's states that say by themselves why the job ended
SCHEDULER_CAUSES = {
    JobState.OUT_OF_MEMORY.value: OUT_OF_MEMORY,
    JobState.TIMEOUT.value: TIMEOUT,
    JobState.PREEMPTED.value: PREEMPTED,
    JobState.NODE_FAIL.value: NODE_FAIL,
    JobState.CANCELLED.value: CANCELLED,
}
OOM_TYPES = frozenset({"OutOfMemoryError", "torch.cuda.OutOfMemoryError", "torch.OutOfMemoryError", "MemoryError"})
OOM_TEXT = re.compile(r"CUDA out of memory|CUDA error: out of memory", re.I)
USER_ERROR_TYPES = frozenset({"UserError", "ConfigError", "BundleError", "ClusterError"})
BAD_INPUT_EXIT = "2"  # hpc_runner.errors.EXIT_USAGE: what `hpc-runner run` exits with on a UserError
_LOG_EXCEPTION = re.compile(r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Failed))\b:?\s*(?P<msg>.*)")


@dataclass
class Cause:
    """Why one point failed: the kind (one of CAUSES) and what the records say about it."""

    kind: str
    error_type: str | None = None
    message: str | None = None
    config_id: str | None = None
    where: str | None = None  # file:line where the exception was raised
    config_file: str | None = None  # file:line where the failing id (or the bad input) was set
    by: str | None = None  # who cancelled it (where the scheduler says)
    exit_code: str | None = None

    def text(self) -> str:
        """Return one line for people: the error and where, or what the scheduler said."""
        if self.kind in (ERROR, BAD_INPUT, OUT_OF_MEMORY) and (self.error_type or self.message):
            head = f"{self.error_type or 'Error'}: {self.message or ''}".strip().rstrip(":")
            at = [f"id '{self.config_id}'" if self.config_id else "", self.where or "", self.config_file or ""]
            at = [a for a in dict.fromkeys(at) if a and a not in head]  # a UserError's message names its file
            return head + (f" (at {', '.join(at)})" if at else "")
        words = {
            TIMEOUT: "the job reached its time limit",
            PREEMPTED: "preempted and not requeued",
            NODE_FAIL: "the node failed under the job",
            CANCELLED: "cancelled" + (f" by {self.by}" if self.by else ""),
            OUT_OF_MEMORY: "killed for exceeding its memory",
            BAD_INPUT: f"bad input (the job exited with code {self.exit_code})",
            ERROR: "failed" + (f" with exit code {self.exit_code}" if self.exit_code else ""),
            RETURNED: "returned unrun too often",
        }
        return words[self.kind] + (f": {self.message}" if self.message else "")

    def to_json(self) -> dict[str, Any]:
        """Return the cause as a dict without empty fields (for ``status --json``)."""
        return {k: v for k, v in asdict(self).items() if v is not None}


def _user(uid: str) -> str:
    try:
        return pwd.getpwuid(int(uid)).pw_name
    except (ValueError, KeyError):
        return uid


def cancelled_by(status: JobStatus | None) -> str | None:
    """Return who cancelled the job, as the scheduler says (a user name when it gives a known uid)."""
    by = status.cancelled_by if status is not None else None
    return _user(by) if by and by.isdigit() else by


def _exit_status(status: JobStatus | None) -> str | None:
    """Return the exit code of a job that exited by itself with a non-zero code (no signal), else None."""
    if status is None or status.exit_code in (None, 0) or status.signal:
        return None
    return str(status.exit_code)


def _is_oom(error_type: str | None, message: str | None) -> bool:
    name = (error_type or "").rsplit(".", 1)[-1]
    return (error_type in OOM_TYPES or name in OOM_TYPES) or bool(OOM_TEXT.search(message or ""))


def _record_error(record: dict[str, Any]) -> Cause | None:
    """The cause run.yaml's ``error`` gives (the root cause's type and message when MONAI wrapped it)."""
    err = record.get("error")
    if not isinstance(err, dict) or not (err.get("type") or err.get("message")):
        return None
    etype = err.get("root_type") or err.get("type")
    message = err.get("root_message") if err.get("root_type") else err.get("message")
    fields = dict(error_type=etype, message=message, config_id=err.get("id"), where=err.get("where"),
                  config_file=err.get("config_file"))
    if _is_oom(etype, message) or _is_oom(err.get("type"), err.get("message")):
        return Cause(OUT_OF_MEMORY, **fields)
    short = (etype or "").rsplit(".", 1)[-1]
    if err.get("user_error") or short in USER_ERROR_TYPES or (etype or "").startswith("hpc_runner.errors."):
        return Cause(BAD_INPUT, **fields)
    return Cause(ERROR, **fields)


def _log_cause(log: LogLine | None, exit_code: str | None) -> Cause | None:
    """The cause the job log's telling line gives (a job that died before run.yaml said why): the scheduler's own
    verdict (``log.state``), else the exception the line names."""
    if log is None or not log.text:
        return None
    log_line = log.text
    kind = SCHEDULER_CAUSES.get(log.state.value) if log.state is not None else None
    if kind is not None:
        return Cause(kind, message=log_line[:300], exit_code=exit_code)
    m = _LOG_EXCEPTION.match(log_line)
    etype, message = (m.group("type"), m.group("msg")) if m else (None, log_line)
    if _is_oom(etype, message):
        return Cause(OUT_OF_MEMORY, error_type=etype, message=message[:300], exit_code=exit_code)
    short = (etype or "").rsplit(".", 1)[-1]
    if etype and (etype.startswith("hpc_runner.errors.") or short in USER_ERROR_TYPES):
        return Cause(BAD_INPUT, error_type=etype, message=message[:300], exit_code=exit_code)
    return Cause(ERROR, error_type=etype, message=message[:300], exit_code=exit_code)


LogSource = LogLine | str | None


def decide(
    state: str,
    status: JobStatus | None = None,
    record: dict[str, Any] | None = None,
    log_line: LogSource | Callable[[], LogSource] = None,
) -> Cause | None:
    """Return why a point in ``state`` failed (None for a point that did not fail).

    ``status`` is the scheduler's answer about its job (its exit code, who cancelled it), ``record`` the point's
    run.yaml and ``log_line`` the job log's telling line (a ``LogLine``, with the scheduler's verdict when its own
    daemon wrote it; a plain string is the job's own line), or a function that reads it: it is called only when
    the others do not tell.
    """
    if state not in FAILED_STATES:
        return None
    record = record or {}
    exit_code = status.exit_text if status is not None else None
    from_record = _record_error(record) if record.get("status") == "failed" else None
    if from_record is not None and from_record.kind == OUT_OF_MEMORY:
        return from_record
    kind = SCHEDULER_CAUSES.get(state)
    if kind is not None:
        if kind == CANCELLED:
            if record.get("status") == "interrupted" and status is None:
                return Cause(CANCELLED, message="interrupted (Ctrl-C or SIGINT)")
            return Cause(CANCELLED, by=cancelled_by(status), exit_code=exit_code)
        if kind == PREEMPTED and record.get("checkpoint"):
            return Cause(PREEMPTED, message=f"checkpoint {record['checkpoint']}")
        return Cause(kind, exit_code=exit_code)
    if from_record is not None:
        return from_record
    if record.get("status") == "preempted":  # stopped at a checkpoint, then the requeue was refused
        return Cause(PREEMPTED, message=f"checkpoint {record['checkpoint']}" if record.get("checkpoint") else None,
                     exit_code=exit_code)
    found = log_line() if callable(log_line) else log_line
    line = LogLine(found) if isinstance(found, str) else found
    text = line.text if line is not None else None
    if _exit_status(status) == BAD_INPUT_EXIT:
        return Cause(BAD_INPUT, message=text[:300] if text else None, exit_code=exit_code)
    log = _log_cause(line, exit_code)
    if log is not None:
        return log
    return Cause(ERROR, exit_code=exit_code)

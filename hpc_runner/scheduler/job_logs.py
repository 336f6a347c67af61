"""A job's log files and the lines that say why it ended, in our own words: ``JobLogs``.

Where a job writes its stdout and stderr, and which lines there are the scheduler's own verdict (SLURM's
slurmstepd: "CANCELLED ... DUE TO TIME LIMIT"), is each backend's business: ``Executor.job_logs(folder)`` returns a
``JobLogs`` with the backend's ``files`` and ``verdicts``. The sweep's causes ask it for a failed job's line and read
the verdict as a ``JobState``; they never name a backend's files or daemons.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hpc_runner.errors import UserError
from hpc_runner.records.read import open_regular
from hpc_runner.scheduler.job_status import JobState

# a Python exception line (the last one a job printed says most)
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit|Failed|Warning)\b.*")
_ANY_ERROR = re.compile(r".*(error|killed|cancelled)", re.I)
TAIL_BYTES = 65536


@dataclass(frozen=True)
class LogLine:
    """The line of a job's log that says why it ended, and the state the scheduler's verdict gives (None: the
    line is the job's own, an exception or an error)."""

    text: str
    state: JobState | None = None


@dataclass
class JobLogs:
    """Where one executor's jobs under ``folder`` write their logs (``files_of(folder, job_id)``), the lines its
    own daemons write there when they end a job (``verdicts``: searched first, in their order), and the words in
    a line that say which state it ended in (``markers``: ``("DUE TO TIME LIMIT", JobState.TIMEOUT)``)."""

    folder: Path | None
    files_of: Callable[[Path, str], list[Path]] | None = None
    verdicts: Sequence[re.Pattern[str]] = field(default_factory=tuple)
    markers: Sequence[tuple[str, JobState]] = field(default_factory=tuple)

    def state_of(self, line: str) -> JobState | None:
        """Return the state a log line says its job ended in (its first marker), None when it says none."""
        low = line.lower()
        return next((state for marker, state in self.markers if marker.lower() in low), None)

    def files(self, job_id: str) -> list[Path]:
        """Return the job's log files, most telling first (stderr, then stdout); none when not known."""
        if self.folder is None or self.files_of is None:
            return []
        return self.files_of(self.folder, job_id)

    def line(self, job_id: str | None) -> LogLine | None:
        """Return the line of the job's logs that says why it ended (a verdict first, then the last exception,
        then any error line), None when its logs say nothing or cannot be read."""
        if not job_id:
            return None
        for path in self.files(job_id):
            found = tail_line(path, self.verdicts)
            if found is not None:
                return LogLine(found, self.state_of(found))
        return None


def _tail(path: Path, limit: int = TAIL_BYTES) -> list[str] | None:
    """The non-empty lines of the last ``limit`` bytes of a regular file (a named pipe would block), None when it
    cannot be read."""
    try:
        fd = open_regular(path, "job log")
        if fd is None:
            return None
        with open(fd, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - limit))
            return [ln.strip() for ln in f.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    except (OSError, UserError):
        return None


def tail_line(path: Path, verdicts: Sequence[re.Pattern[str]] = (), limit: int = TAIL_BYTES) -> str | None:
    """Return the telling line of a job log's tail: the scheduler's verdicts (in their order), then the last
    exception, then the last error line, else the last line; None for a log that is empty or cannot be read."""
    lines = _tail(path, limit)
    if not lines:
        return None
    for pattern in (*verdicts, EXCEPTION_LINE, _ANY_ERROR):
        for ln in reversed(lines):
            if pattern.match(ln):
                return ln
    return lines[-1]

"""A sweep's results file, ``results.jsonl``: one JSON line per point that ended, appended by the point's own job.

``collect`` reads this one file instead of each point's run.yaml, summary.json and data_io.json (for the states
of the points the scheduler cannot tell about too: jobs/targets.py ``states_beside``): 30,000 small reads at
10,000 points, each a round trip on a cluster's shared filesystem, become one bounded read. ``status`` needs the
run dirs of only the few points the scheduler cannot tell about, and reads those, not the whole file. This module
is the file's one writer and one reader.

- The writer is the point's job (jobs/task.py calls ``record_point_result`` once the point's run has ended and
  its run.yaml says so): it builds a ``PointResult`` from the run dir and appends one compact line, in one
  ``write()`` of at most ``MAX_LINE_BYTES`` (PIPE_BUF), with ``O_APPEND``, under the file's lock
  (records/file_lock.py: it holds across nodes, where ``O_APPEND`` alone does not on NFS), never through a
  link. A line that could not be written never fails the task: the run dir still holds everything.
- The reader is ``ResultsFile``: the file read once, on first use, through records/read.py's bounded JSON-lines
  reader; each line is checked to be one this writer could have written, or skipped.

Which wins. A line names the *hand-off* of the point it records: the job id and how many jobs the ledger had
handed the point to (the length of its ``jobs`` in sweep.yaml). It is used only while the ledger's point still
names that same hand-off. A resume or retry hands the point to a new job (its run dir is moved to attempts/ or
run again), so the old line no longer matches and the point's run dir is read until the new job appends its
own line. For the hand-off it names, the line is the truth: it is written from run.yaml after that job's last
change to it, and nothing of hpc-runner changes a finished run's run dir without a new hand-off (a run dir edited
by hand afterwards is not seen: remove results.jsonl and ``collect`` reads every run dir, as it reads a sweep of
an earlier version that has no such file).

Nothing is lost to a damaged file: a line cut short by a killed job, garbage, a line over ``MAX_LINE_BYTES`` or
not of the shape below is skipped (and counted, ``ResultsFile.note``), and its point is read from its run dir,
as is every point with no line (a job killed before it appended, a tune's trials, sweeps of earlier versions).

A line::

    {"index": 7, "job": "4127_7", "handoff": 1, "status": "completed", "ended": "2026-11-29T10:00:24",
     "summary": {"metric_name": "dice", "epochs": 2, ...}, "shared_bytes": null}
"""

from __future__ import annotations

import dataclasses
import errno
import math
import os
import stat
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpc_runner.data.staging import shared_bytes_of
from hpc_runner.errors import UserError
from hpc_runner.records.file_lock import exclusive
from hpc_runner.records.json_out import dumps_json
from hpc_runner.records.read import LEDGER_MAX_BYTES, RecordError, read_json_lines, read_json_record
from hpc_runner.records.rundir import SUMMARY_FILE, RunDir, now_iso

RESULTS_FILE = "results.jsonl"
LOCK_FILE = f".{RESULTS_FILE}.lock"
MAX_LINE_BYTES = 4096  # PIPE_BUF: one write() of a line; a longer line is neither written nor read
FINAL_STATUSES = ("completed", "failed", "pruned")  # run.yaml statuses a line records: a run that has ended
APPEND_TIMEOUT_S = 60.0  # how long a job waits for the file's lock before it leaves its line out
_MAX_TEXT = 200  # the longest job id, metric name or date a line holds
_MAX_INT = 1 << 62


def _is_int(value: Any) -> bool:
    return type(value) is int and -_MAX_INT <= value <= _MAX_INT


def _is_number(value: Any) -> bool:
    return _is_int(value) or (type(value) is float and math.isfinite(value))


def _is_text(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= _MAX_TEXT


@dataclass
class RunFigures:
    """The figures of a run's summary.json that a results row shows (sweep/collect.py), in its column order;
    None where summary.json has no such key."""

    metric_name: str | None = None
    epochs: int | None = None
    steps: int | None = None
    final_loss: float | None = None
    final_metric: float | None = None
    best_metric: float | None = None
    best_epoch: int | None = None
    wall_s: float | None = None

    @classmethod
    def of_summary(cls, summary: Mapping[str, Any]) -> RunFigures | None:
        """Return the figures of a summary (summary.json's object); None when one of them is not of its type (a
        hand-edited summary: collect reads that summary.json itself, as it is)."""
        values = {}
        for name, fits in _FIGURE_TYPES:
            value = summary.get(name)
            if value is None:
                continue
            if not fits(value):
                return None
            values[name] = value
        return cls(**values)

    def to_summary(self) -> dict[str, Any]:
        """Return the figures as summary.json holds them (only the keys it has)."""
        return {k: v for k in SUMMARY_KEYS if (v := getattr(self, k)) is not None}


SUMMARY_KEYS = tuple(f.name for f in dataclasses.fields(RunFigures))
_COUNTS = frozenset({"epochs", "steps", "best_epoch"})  # the figures that are whole numbers
_FIGURE_TYPES = tuple((k, _is_text if k == "metric_name" else _is_int if k in _COUNTS else _is_number)
                      for k in SUMMARY_KEYS)


@dataclass
class PointResult:
    """How one hand-off of a point ended: its run.yaml's final status, its summary's figures (None: the run
    left no summary.json), the bytes it read from shared storage (data_io.json; None: no record)."""

    index: int
    job: str
    handoff: int
    status: str
    figures: RunFigures | None = None
    shared_bytes: int | None = None
    ended: str | None = None

    def summary(self) -> dict[str, Any]:
        """Return the summary figures as collect takes them from summary.json ({} without one)."""
        return self.figures.to_summary() if self.figures is not None else {}

    def to_json(self) -> dict[str, Any]:
        """Return the line's object."""
        return {"index": self.index, "job": self.job, "handoff": self.handoff, "status": self.status,
                "ended": self.ended, "summary": self.figures.to_summary() if self.figures is not None else None,
                "shared_bytes": self.shared_bytes}

    def line(self) -> bytes:
        """Return the line as appended: compact JSON and a newline."""
        return (dumps_json(self.to_json(), separators=(",", ":"), ensure_ascii=True) + "\n").encode("ascii")

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> PointResult | None:
        """Return the result a line holds; None when it is not a line this module could have written."""
        index, job, handoff, status = obj.get("index"), obj.get("job"), obj.get("handoff"), obj.get("status")
        summary, shared, ended = obj.get("summary"), obj.get("shared_bytes"), obj.get("ended")
        if not (_is_int(index) and index >= 0 and _is_text(job) and _is_int(handoff) and handoff >= 0
                and status in FINAL_STATUSES and (ended is None or _is_text(ended))
                and (shared is None or (_is_int(shared) and shared >= 0))):
            return None
        figures = None
        if summary is not None:
            if not isinstance(summary, dict) or not set(summary) <= set(SUMMARY_KEYS):
                return None
            figures = RunFigures.of_summary(summary)
            if figures is None:
                return None
        return cls(index, job, handoff, status, figures, shared, ended)


def handoff_of(point: Mapping[str, Any]) -> tuple[str, int] | None:
    """Return the hand-off a ledger point (a sweep.yaml entry) names now: its job id and how many jobs it was
    handed to; None while no job has it."""
    job = point.get("job_id")
    jobs = point.get("jobs")
    if not isinstance(job, str) or not job:
        return None
    return job, len(jobs) if isinstance(jobs, list) else 0


# ---------------------------------------------------------------- the writer (the point's job)


def result_of_run(index: int, handoff: tuple[str, int], run_dir: Path | str) -> PointResult | None:
    """Return how the point's run in ``run_dir`` ended, as its line says it; None while it has not ended (or its
    run.yaml names another job, or its summary does not fit a line: collect reads that run dir itself)."""
    record = RunDir(run_dir).record()
    status = record.get("status")
    if status not in FINAL_STATUSES:
        return None
    recorded_job = str((record.get("job") or {}).get("id") or "")
    if recorded_job and recorded_job != handoff[0]:
        return None  # run.yaml is another job's: the line would say what this hand-off did not do
    try:
        summary = read_json_record(os.path.join(run_dir, SUMMARY_FILE), "run summary")
    except RecordError:
        summary = None  # collect reads it as none too
    figures = None
    if isinstance(summary, dict):
        figures = RunFigures.of_summary(summary)
        if figures is None:
            return None
    return PointResult(index, handoff[0], handoff[1], status, figures, shared_bytes_of(Path(run_dir)),
                       str(record.get("ended") or now_iso()))


_APPEND_FLAGS = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def append_result(sweep_dir: Path | str, result: PointResult, timeout: float = APPEND_TIMEOUT_S) -> bool:
    """Append the result's line to the sweep's results file; False when the line is over ``MAX_LINE_BYTES``
    (not written). UserError when the file is not a regular file (a planted link or pipe is never followed)."""
    line = result.line()
    if len(line) > MAX_LINE_BYTES:
        return False
    path = Path(sweep_dir) / RESULTS_FILE
    with exclusive(Path(sweep_dir) / LOCK_FILE, timeout, what=f"the sweep {sweep_dir}'s results file"):
        try:
            fd = os.open(path, _APPEND_FLAGS, 0o644)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
                raise _not_regular(path) from None
            raise
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise _not_regular(path)
            if st.st_size and os.pread(fd, 1, st.st_size - 1) != b"\n":
                line = b"\n" + line  # the line before was cut short (a job killed mid-write): end it, keep ours whole
            written = os.write(fd, line)
            if written != len(line):
                raise OSError(errno.EIO, f"wrote {written} of {len(line)} bytes")
        finally:
            os.close(fd)
    return True


def _not_regular(path: Path) -> UserError:
    return UserError(f"the sweep's results file {path} is not a regular file; no line was appended to it",
                     where=str(path), expected=f"{path} removed (the next point's job makes it again; collect "
                     "reads the run dirs of the points it lacks)")


def record_point_result(sweep_dir: Path | str, index: int, handoff: tuple[str, int] | None,
                        run_dir: Path | str) -> PointResult | None:
    """Append the line of point ``index``'s ended run (the job side, jobs/task.py); return it, None when none
    was appended. Never raises: a line left out only means collect reads that point's run dir."""
    if handoff is None:
        return None
    try:
        result = result_of_run(index, handoff, run_dir)
        if result is None or not append_result(sweep_dir, result):
            return None
    except Exception as exc:  # the run dir holds the result: the line is a shortcut, never a reason to fail
        print(f"hpc-runner: point {index}'s result was not added to {RESULTS_FILE} ({exc}); collect reads its "
              "run dir", flush=True)
        return None
    return result


# ---------------------------------------------------------------- the reader (collect, status)


class ResultsFile:
    """The lines of a sweep's results file, read once on the first question (thread-safe: collect asks from the
    states' thread and from its own). ``sweep_dir`` None: a run dir, which has none."""

    def __init__(self, sweep_dir: Path | str | None) -> None:
        self.path = Path(sweep_dir) / RESULTS_FILE if sweep_dir is not None else None
        self._lock = threading.Lock()
        self._lines: dict[tuple[int, str, int], PointResult] | None = None
        self.skipped = 0  # lines that are no line of this module's (damaged, cut, oversized, of another shape)
        self.problem: str | None = None  # why the whole file could not be read

    def of(self, point: Mapping[str, Any]) -> PointResult | None:
        """Return the result of the hand-off the ledger's ``point`` names now; None when there is no such line."""
        handoff = handoff_of(point)
        if handoff is None:
            return None
        lines = self.lines()
        return lines.get((point.get("index"), *handoff)) if lines else None  # type: ignore[call-overload]

    def lines(self) -> dict[tuple[int, str, int], PointResult]:
        """Return every usable line by (index, job, hand-off); the last line of each wins."""
        with self._lock:
            if self._lines is None:
                self._lines = self._read()
            return self._lines

    def _read(self) -> dict[tuple[int, str, int], PointResult]:
        out: dict[tuple[int, str, int], PointResult] = {}
        if self.path is None:
            return out
        try:
            read = read_json_lines(self.path, "sweep results file", LEDGER_MAX_BYTES, max_line=MAX_LINE_BYTES)
        except UserError as err:  # too large, a pipe, unreadable: every point's run dir is read instead
            self.problem = err.message
            return out
        self.skipped = len(read.damaged) + int(read.cut)
        for obj in read.records:
            result = PointResult.from_json(obj)
            if result is None:
                self.skipped += 1
                continue
            out[(result.index, result.job, result.handoff)] = result
        return out

    def note(self) -> str | None:
        """Return what people should know about the file (lines skipped, the file refused); None when nothing."""
        if self._lines is None:
            return None
        if self.problem:
            return f"{self.path}: not read ({self.problem}); every point's run dir was read instead"
        if self.skipped:
            return (f"{self.path}: {self.skipped} damaged line(s) skipped; their points were read from their "
                    "run dirs")
        return None

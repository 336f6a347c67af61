"""The sweep directory and its record, ``sweep.yaml``.

Layout::

    sweep.yaml        spec, cluster profile, submissions (array job ids), and one line per point:
                      its params, fixes added on resume, its run dir and job ids
    base/             the sweep's shared config (config.yaml, overrides.yaml, run.yaml): files merged,
                      CLI/env overrides applied; every point is this plus its own overrides
    points/0007/      the run dir of point 7, written by its job when it starts
    slurm/<array id>/ submitit's files for each array (submission script, pickles, stdout/stderr logs)
    attempts/         run dirs of points that were resumed with different overrides

sweep.yaml is written as JSON (a subset of YAML 1.2), one point a line: at 5,000 points PyYAML takes
~0.5 s to read it back (libyaml) where JSON takes ~10 ms, and ``status`` reads it on every call.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpc_runner.errors import ClusterError
from hpc_runner.records.atomic import write_text_atomic

SWEEP_FILE = "sweep.yaml"
BASE_DIR = "base"
POINTS_DIR = "points"
SLURM_DIR = "slurm"
# submitit's folder for logs and pickles: one that exists before sbatch runs. With %j or %A in it,
# submitit makes the job's folder only after sbatch returns, and a job that starts first fails at once
# (ExitCode 0:53, no log: SLURM before 23.02 does not create the folders of --output/--error).
SWEEP_JOB_FOLDER = "slurm"
RUN_JOB_FOLDER = "slurm"
ATTEMPTS_DIR = "attempts"
RESULTS_CSV = "results.csv"
RESULTS_MD = "results.md"
KIND = "hpc-runner sweep"

# per-point submission states that no scheduler knows about
NOT_SUBMITTED = "not-submitted"
SUBMITTED = "submitted"
# waits in the sweep dir for a free submit slot (the governor sends it; see slurm/governor.py)
WAITING = "waiting"
LOCK_FILE = "sweep.lock"


def point_dir_name(index: int, count: int) -> str:
    """Return ``points/0007`` (at least 4 digits, more for larger sweeps)."""
    width = max(4, len(str(max(count - 1, 0))))
    return f"{POINTS_DIR}/{index:0{width}d}"


@dataclass
class SweepRecord:
    """sweep.yaml in memory: ``data`` holds everything except ``points``."""

    path: Path
    data: dict[str, Any]
    points: list[dict[str, Any]] = field(default_factory=list)

    @property
    def file(self) -> Path:
        """Return the path of sweep.yaml."""
        return self.path / SWEEP_FILE

    @property
    def base_dir(self) -> Path:
        """Return the folder of the shared base config."""
        return self.path / self.data.get("base", BASE_DIR)

    @property
    def param_ids(self) -> list[str]:
        """Return the swept ids, in axis order."""
        return list(self.data.get("params", []))

    @property
    def job_folder(self) -> Path:
        """Return submitit's folder pattern for this sweep's jobs."""
        return self.path / self.data.get("job_folder", SWEEP_JOB_FOLDER)

    def point_dir(self, point: dict[str, Any]) -> Path:
        """Return the run dir of a point."""
        return self.path / point["dir"]

    @classmethod
    def load(cls, path: str | Path) -> SweepRecord:
        """Read ``path/sweep.yaml`` (JSON fast path, YAML for a hand-edited file); ClusterError when unusable."""
        from hpc_runner.records.read import RecordError, parse_yaml_record, read_record_text

        path = Path(path)
        file = path / SWEEP_FILE
        try:
            text = read_record_text(file, "sweep record")
            if text is None:
                raise ClusterError("the sweep record does not exist", where=str(file))
            try:
                data = json.loads(text)
            except (ValueError, RecursionError):
                data = parse_yaml_record(text, file, "sweep record")
        except RecordError as err:
            raise ClusterError(err.message, where=err.where, expected=err.expected) from None
        if not isinstance(data, dict) or data.get("kind") != KIND or not isinstance(data.get("points"), list):
            raise ClusterError(
                "not a sweep record", where=str(file), expected=f"a {SWEEP_FILE} written by hpc-runner sweep"
            )
        points = data.pop("points")
        for n, p in enumerate(points):
            _check_point(p, n, file)
        return cls(path, data, points)

    def save(self) -> Path:
        """Write sweep.yaml atomically: one top-level key a line, then one point a line."""

        def dumps(value: Any) -> str:
            return json.dumps(value, default=str, separators=(", ", ": "))

        head = [f"  {json.dumps(k)}: {dumps(v)}" for k, v in self.data.items()]
        points = ",\n".join("    " + dumps(p) for p in self.points)
        text = "{\n" + ",\n".join(head) + ',\n  "points": [\n' + points + "\n  ]\n}\n"
        return write_text_atomic(self.file, text)

    def submissions(self) -> list[dict[str, Any]]:
        """Return the list of submissions (each with its arrays)."""
        return self.data.setdefault("submissions", [])

    def effective_overrides(self, point: dict[str, Any]) -> dict[str, Any]:
        """Return the point's swept values with the fixes given on resume on top."""
        return {**point.get("params", {}), **point.get("extra", {})}


def _check_point(point: Any, n: int, file: Path) -> None:
    """ClusterError unless entry ``n`` of sweep.yaml's points is one hpc-runner could have written."""
    problem = None
    if not isinstance(point, dict):
        problem = f"is a {type(point).__name__}, not a mapping"
    elif point.get("index") != n:
        problem = f"has index {point.get('index')!r}, not {n}"
    elif not isinstance(point.get("dir"), str) or not _is_point_dir(point["dir"]):
        problem = f"has dir {point.get('dir')!r}, not a folder under {POINTS_DIR}/"
    elif not isinstance(point.get("params", {}), dict) or not isinstance(point.get("extra", {}), dict):
        problem = "has params or extra that are not mappings"
    elif point.get("job_id") is not None and not isinstance(point.get("job_id"), str):
        problem = f"has job_id {point.get('job_id')!r}, not text"
    if problem:
        raise ClusterError(f"point {n} of the sweep record {problem}", where=str(file),
                           expected=f"the {SWEEP_FILE} hpc-runner wrote (hand edits may change params only)")


def _is_point_dir(text: str) -> bool:
    parts = text.split("/")
    return len(parts) == 2 and parts[0] == POINTS_DIR and parts[1].isdigit()


@contextlib.contextmanager
def locked(path: str | Path, timeout: float = 600.0) -> Iterator[SweepRecord]:
    """Load sweep.yaml under an exclusive lock on ``sweep.lock``; save it on a normal exit.

    Every writer of sweep.yaml after the first submission (the submitting CLI, ``resume``,
    ``status``/``cancel`` top-ups, and the jobs themselves when they return points or submit the next
    ones) goes through here, so no update is lost between a read and a write.
    """
    import time

    path = Path(path)
    deadline = time.monotonic() + timeout
    with open(path / LOCK_FILE, "a+b") as fh:
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ClusterError(
                        f"another hpc-runner process has held {path / LOCK_FILE} for {timeout:g} s",
                        expected="the other command (or a job of this sweep) to finish first",
                    ) from None
                time.sleep(0.05)
        try:
            record = SweepRecord.load(path)
            yield record
            record.save()
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def return_to_waiting(record: SweepRecord, indices: list[int]) -> None:
    """Put points back in the sweep's queue (their task could not start them): no job id, state waiting."""
    for i in indices:
        p = record.points[i]
        p["job_id"] = None
        p["submit"] = WAITING
        p["returned"] = int(p.get("returned", 0)) + 1

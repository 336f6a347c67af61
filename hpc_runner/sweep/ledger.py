"""The ledger of a sweep: the one owner of ``sweep.yaml`` and of each point's submission state.

Layout of a sweep dir::

    sweep.yaml        spec, cluster profile, submissions (array job ids), and one line per point:
                      its params, fixes added on resume, its run dir, its state, job ids and counters
    base/             the sweep's shared config (config.yaml, overrides.yaml, run.yaml): files merged,
                      CLI/env overrides applied; every point is this plus its own overrides
    points/0007/      the run dir of point 7 (its run.yaml says how the run itself went)
    slurm/            submitit's files for each array (submission script, pickles, stdout/stderr logs)
    attempts/         run dirs of points that were resumed with different overrides

A point's *submission state* (field ``submit``) moves only through the transitions of
``TRANSITIONS``, each a method of ``Ledger`` that checks the move is allowed and bounded. A
``Ledger`` exists only inside ``locked(sweep_dir)``: take the lock (records/file_lock.py: it holds
across nodes), read, apply transitions, write atomically on a normal exit. Nothing else writes
sweep.yaml. The states and the events that move them (docs/ledger.md has the diagram)::

    submitting --submit--> submitted --return--> waiting --submit--> submitted ...
        |  \\--wait--> waiting (no free slot)     (returns > max_returns: gave-up, cause RETURNED)
        \\--refuse--> not-submitted (the sbatch failed) --submit|wait--> ...
    submitted|not-submitted|cancelled|gave-up --retry--> waiting  (resume, or a --retry rule at a top-up;
                                                                  retries > max_retries: refused)
    submitting|waiting|not-submitted --cancel--> cancelled (a queued job is scancelled; it stays submitted)

Beside the states, a point may carry ``node_failures`` (job id -> the nodes its attempts failed on,
``note_node_failures``) and ``exclude`` (the nodes its next submissions avoid, ``exclude_node``; the
governor excludes a node once a point failed on it twice: sweep/governor.py ``exclude_failing_nodes``).

What the run itself did (running, completed, failed, pruned) is the point's own run.yaml
(records/rundir.py, one locked writer); what the scheduler did comes from sacct. ``sweep/states.py``
puts the three together, read-only. A tune's trials are points too, made at the start (one per trial
of the budget, params empty until a worker claims one), so ``status`` lists them from the start.

sweep.yaml is written as JSON (a subset of YAML 1.2), one point a line: at 5,000 points PyYAML takes
~0.5 s to read it back (libyaml) where JSON takes ~10 ms; and a job reads only its own point's line
(``read_point``), not the whole file.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpc_runner.errors import ClusterError
from hpc_runner.records.atomic import write_text_atomic
from hpc_runner.records.rundir import now_iso

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
LOCK_FILE = "sweep.lock"

# a point's submission states
SUBMITTING = "submitting"  # in the record written before the first sbatch
WAITING = "waiting"  # in the sweep's queue: no job; the governor sends it when a submit slot is free
SUBMITTED = "submitted"  # handed to a job (job_id); the scheduler and its run.yaml say the rest
NOT_SUBMITTED = "not-submitted"  # the sbatch that should have sent it failed
CANCELLED = "cancelled"  # cancelled before a job had it
GAVE_UP = "gave-up"  # returned or retried more often than the sweep's bounds: failed, with a cause
STATES = (SUBMITTING, WAITING, SUBMITTED, NOT_SUBMITTED, CANCELLED, GAVE_UP)
# event -> (states it may leave, state it enters)
TRANSITIONS: dict[str, tuple[frozenset[str], str]] = {
    "submit": (frozenset({SUBMITTING, WAITING, NOT_SUBMITTED}), SUBMITTED),
    "wait": (frozenset({SUBMITTING, WAITING, NOT_SUBMITTED}), WAITING),
    "refuse": (frozenset({SUBMITTING, WAITING}), NOT_SUBMITTED),
    "return": (frozenset({SUBMITTED}), WAITING),
    "retry": (frozenset({SUBMITTED, NOT_SUBMITTED, CANCELLED, GAVE_UP}), WAITING),
    "cancel": (frozenset({SUBMITTING, WAITING, NOT_SUBMITTED}), CANCELLED),
    "give_up": (frozenset({SUBMITTED, WAITING}), GAVE_UP),
}
MAX_RETURNS = 3  # a point whose tasks return it unrun this often fails with cause RETURNED
MAX_RETRIES = 3  # resubmissions of a failed point (resume, automatic retries)


class TransitionError(ClusterError):
    """A transition the ledger does not allow (a bug, or a record edited by hand)."""


def point_dir_name(index: int, count: int) -> str:
    """Return ``points/0007`` (at least 4 digits, more for larger sweeps)."""
    width = max(4, len(str(max(count - 1, 0))))
    return f"{POINTS_DIR}/{index:0{width}d}"


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
    elif not isinstance(point.get("request") or {}, dict) or not all(
            isinstance(v, str | int | float | type(None)) for v in (point.get("request") or {}).values()):
        problem = f"has request {point.get('request')!r}, not a mapping of profile settings to plain values"
    elif point.get("job_id") is not None and not isinstance(point.get("job_id"), str):
        problem = f"has job_id {point.get('job_id')!r}, not text"
    elif point.get("submit", WAITING) not in STATES:
        problem = f"has state {point.get('submit')!r}, not one of {', '.join(STATES)}"
    elif not _node_names(point.get("exclude", [])):
        problem = f"has exclude {point.get('exclude')!r}, not a list of node names"
    if problem:
        raise ClusterError(f"point {n} of the sweep record {problem}", where=str(file),
                           expected=f"the {SWEEP_FILE} hpc-runner wrote (hand edits may change params only)")


def _node_names(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(n, str) for n in value)


def _is_point_dir(text: str) -> bool:
    parts = text.split("/")
    return len(parts) == 2 and parts[0] == POINTS_DIR and parts[1].isdigit()


def _dumps(value: Any) -> str:
    return json.dumps(value, default=str, separators=(", ", ": "))


@dataclass
class SweepRecord:
    """sweep.yaml in memory: ``data`` holds everything except ``points``. Read it anywhere; write it through
    ``locked`` only."""

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

    @property
    def is_tune(self) -> bool:
        """Return True for a tune dir (its points are the trials of its budget)."""
        return bool(self.data.get("tune"))

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

    def text(self) -> str:
        """Return the file's text: one top-level key a line, then one point a line."""
        head = [f"  {json.dumps(k)}: {_dumps(v)}" for k, v in self.data.items()]
        points = ",\n".join("    " + _dumps(p) for p in self.points)
        return "{\n" + ",\n".join(head) + ',\n  "points": [\n' + points + "\n  ]\n}\n"

    def submissions(self) -> list[dict[str, Any]]:
        """Return the list of submissions (each with its arrays)."""
        return self.data.setdefault("submissions", [])

    def effective_overrides(self, point: dict[str, Any]) -> dict[str, Any]:
        """Return the point's swept values with the fixes given on resume on top."""
        return {**point.get("params", {}), **point.get("extra", {})}

    def limit(self, name: str, default: int) -> int:
        """Return one of the sweep's bounds (``max_returns``, ``max_retries``) as recorded, else the default."""
        value = (self.data.get("bounds") or {}).get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default


def write_new(record: SweepRecord) -> Path:
    """Write the first sweep.yaml of a sweep dir that has none yet (before any job can exist)."""
    if record.file.exists():
        raise ClusterError("the sweep dir already has a sweep record", where=str(record.file))
    return write_text_atomic(record.file, record.text())


class Ledger:
    """The transitions of a sweep's points, applied to a record held under the sweep's lock (``locked``)."""

    def __init__(self, record: SweepRecord) -> None:
        self.record = record
        self.events: list[tuple[str, int]] = []  # what this transaction did, for callers and tests

    @property
    def points(self) -> list[dict[str, Any]]:
        """Return the points (read them; change them through the transitions)."""
        return self.record.points

    @property
    def data(self) -> dict[str, Any]:
        """Return the sweep-level data (submissions, state, errors)."""
        return self.record.data

    def _move(self, event: str, index: int) -> dict[str, Any]:
        sources, target = TRANSITIONS[event]
        p = self.record.points[index]
        state = p.get("submit", WAITING)
        if state not in sources:
            raise TransitionError(f"point {index} cannot {event.replace('_', ' ')} from state {state}",
                                  where=str(self.record.file),
                                  expected=f"a point in state {' or '.join(sorted(sources))}")
        p["submit"] = target
        self.events.append((event, index))
        return p

    def submit(self, index: int, job_id: str) -> None:
        """The point was handed to job ``job_id`` (the sbatch that sent it returned)."""
        p = self._move("submit", index)
        p["job_id"] = job_id
        p.setdefault("jobs", []).append(job_id)

    def wait(self, index: int) -> None:
        """No submit slot is free for the point: it waits in the sweep's queue."""
        p = self._move("wait", index)
        p["job_id"] = None

    def refuse(self, index: int) -> None:
        """The sbatch that should have sent the point failed."""
        p = self._move("refuse", index)
        p["job_id"] = None

    def return_point(self, index: int, job_id: str | None, why: str) -> bool:
        """Job ``job_id`` could not start the point: back to waiting, or give up past the bound; return
        False when the point is no longer that job's (another job has it now: nothing changes)."""
        p = self.record.points[index]
        if p.get("submit") != SUBMITTED or p.get("job_id") not in (None, job_id):
            return False
        returns = int(p.get("returns", 0)) + 1
        bound = self.record.limit("max_returns", MAX_RETURNS)
        if returns > bound:
            self._move("give_up", index)
            p.update(job_id=None, returns=returns)
            p["cause"] = {"kind": "RETURNED", "message": f"returned unrun {returns} times by its tasks ({why}); "
                          f"ask for a longer time limit, or fewer points per task (--pack)"}
            return True
        self._move("return", index)
        p.update(job_id=None, returns=returns)
        return True

    def retry(self, index: int, fixes: dict[str, Any] | None = None, request: dict[str, Any] | None = None,
              history: dict[str, Any] | None = None) -> None:
        """Resubmit a failed or missing point (resume, or a ``--retry`` rule): back to waiting, with the fixes
        given, and with ``request`` (profile settings of its next job, sweep/retry.py) recorded with the attempt
        in ``history``; bounded."""
        p = self.record.points[index]
        retries = int(p.get("retries", 0)) + 1
        bound = self.record.limit("max_retries", MAX_RETRIES)
        if retries > bound:
            raise ClusterError(f"point {index} was resubmitted {retries - 1} times already, the sweep's bound",
                               where=str(self.record.file),
                               expected=f"at most {bound} retries per point (resume --max-retries N raises it)")
        self._move("retry", index)
        p.update(job_id=None, retries=retries)
        p.pop("cause", None)
        if fixes:
            p["extra"] = {**p.get("extra", {}), **fixes}
        if request is not None:
            p["request"] = dict(request)
        if history is not None:
            p.setdefault("history", []).append(history)

    def cancel(self, index: int) -> None:
        """Cancel a point that no job has (a queued job is cancelled with scancel and stays submitted)."""
        p = self._move("cancel", index)
        p["job_id"] = None

    def note_node_failures(self, index: int, job_id: str, nodes: list[str]) -> None:
        """Record the nodes on which job ``job_id`` of the point failed, one per failed attempt (the job's
        whole list again when asked twice: a resume that failed before its sbatch may note it again)."""
        p = self.record.points[index]
        failures = p.setdefault("node_failures", {})
        if failures.get(job_id) != list(nodes):
            failures[job_id] = list(nodes)
            self.events.append(("note_node_failures", index))

    def exclude_node(self, index: int, node: str) -> bool:
        """Exclude ``node`` from the point's next submissions (sbatch --exclude); return False if it already was."""
        p = self.record.points[index]
        excluded = p.setdefault("exclude", [])
        if node in excluded:
            return False
        excluded.append(node)
        excluded.sort()
        self.events.append(("exclude_node", index))
        return True

    def waiting(self) -> list[int]:
        """Return the indices of the points that wait for a free submit slot."""
        return [n for n, p in enumerate(self.record.points) if p.get("submit") == WAITING]

    # ---------------------------------------------------------------- tune trials (points claimed by workers)

    def claim_trial(self, worker: int, job_id: str | None, params: dict[str, Any], trial: Any) -> dict[str, Any] | None:
        """Give worker ``worker`` the next unclaimed trial point; None when the budget is spent."""
        for n, p in enumerate(self.record.points):
            if p.get("trial") is None and p.get("state") is None:
                p.update(params=params, trial=trial.number, trial_id=getattr(trial, "_trial_id", None),
                         worker=worker, state="running", job_id=job_id or "local", started=now_iso())
                p["submit"] = SUBMITTED
                p.setdefault("jobs", []).append(job_id or "local")
                self.events.append(("claim", n))
                return p
        return None

    def resume_trial(self, index: int, job_id: str | None) -> dict[str, Any]:
        """A worker takes up again the trial it left running (it was requeued or restarted)."""
        p = self.record.points[index]
        if p.get("state") != "running":
            raise TransitionError(f"trial point {index} is {p.get('state')}, not running", where=str(self.record.file))
        p["job_id"] = job_id or "local"
        p["resumed"] = int(p.get("resumed", 0)) + 1
        self.events.append(("resume_trial", index))
        return p

    def finish_trial(self, index: int, state: str, value: float | None, epochs: int | None,
                     error: str | None) -> None:
        """Record how a trial ended (completed, pruned or failed); a finished trial is never changed again."""
        p = self.record.points[index]
        if p.get("state") in ("completed", "pruned", "failed"):
            return  # told before (a worker killed between the tell and this write): nothing to change
        if state not in ("completed", "pruned", "failed"):
            raise TransitionError(f"a trial cannot end {state}", where=str(self.record.file))
        p.update(state=state, value=value, epochs=epochs, ended=now_iso())
        if error:
            p["error"] = error[:500]
        self.events.append(("finish_trial", index))

    def unclaimed_trials(self) -> int:
        """Return how many trials of the budget no worker has claimed yet."""
        return sum(1 for p in self.record.points if p.get("trial") is None and p.get("state") is None)


@contextlib.contextmanager
def locked(path: str | Path, timeout: float = 600.0) -> Iterator[Ledger]:
    """Take the sweep's lock, read sweep.yaml, yield its Ledger; write it atomically on a normal exit (and
    on an exception, when transitions were applied before it).

    Every change of sweep.yaml after it was first written (the submitting CLI, ``resume``, top-ups,
    ``cancel``, and the jobs when they return points or claim trials) goes through here, so no update
    is lost between a read and a write, whatever node each writer runs on.
    """
    from hpc_runner.records.file_lock import exclusive

    path = Path(path)
    with exclusive(path / LOCK_FILE, timeout, what=f"the sweep {path}"):
        ledger = Ledger(SweepRecord.load(path))
        try:
            yield ledger
        except BaseException:
            # the transitions already applied happened (an sbatch that returned queued its jobs): each one
            # is valid on its own, so they are written even when a later step fails
            if ledger.events:
                write_text_atomic(ledger.record.file, ledger.record.text())
            raise
        write_text_atomic(ledger.record.file, ledger.record.text())


def read_point(path: str | Path, index: int) -> dict[str, Any]:
    """Return point ``index`` of a sweep, reading only its line of sweep.yaml (a job's start-up at 10,000
    points must not parse the whole file); the whole file when it is not in the layout hpc-runner writes."""
    file = Path(path) / SWEEP_FILE
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise ClusterError(f"cannot read the sweep record ({exc.strerror or exc})", where=str(file)) from None
    start = raw.find(b'\n  "points": [\n')
    if start >= 0:
        lines = raw[start:].split(b"\n", index + 3)
        if len(lines) > index + 2:
            line = lines[index + 2].strip().rstrip(b",")
            try:
                point = json.loads(line)
            except ValueError:
                point = None
            if isinstance(point, dict) and point.get("index") == index:
                _check_point(point, index, file)
                return point
    record = SweepRecord.load(path)
    if not 0 <= index < len(record.points):
        raise ClusterError(f"the sweep has no point {index}", where=str(file))
    return record.points[index]


def new_points(params: Iterable[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    """Return the point entries of a new sweep (state submitting until the first sbatch says otherwise)."""
    return [{"index": i, "dir": point_dir_name(i, count), "params": p, "job_id": None, "submit": SUBMITTING}
            for i, p in enumerate(params)]


def new_trials(count: int) -> list[dict[str, Any]]:
    """Return the point entries of a new tune: one per trial of its budget, params given when claimed."""
    return [{"index": i, "dir": point_dir_name(i, count), "params": {}, "job_id": None, "submit": WAITING}
            for i in range(count)]

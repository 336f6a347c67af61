"""The ledger of a sweep: the one owner of ``sweep.yaml`` and of each point's submission state.

Layout of a sweep dir::

    sweep.yaml        spec, cluster profile, submissions (array job ids), and one line per point:
                      its params, fixes added on resume, its run dir, its state, job ids and counters
    results.jsonl     one JSON line per point that ended, appended by its job (jobs/results.py, its one
                      writer and reader): run.yaml's final status and summary.json's figures, for collect
    base/             the sweep's shared config (config.yaml, overrides.yaml, run.yaml): files merged,
                      CLI/env overrides applied; every point is this plus its own overrides
    points/0007/      the run dir of point 7 (its run.yaml says how the run itself went)
    jobs/             the scheduler's files for each array (job script, the job's arguments, stdout/stderr logs;
                      slurm/ in sweeps made before it had this name: sweep.yaml records which)
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
governor excludes a node once a point failed on it twice: jobs/governor.py ``exclude_failing_nodes``).

What the run itself did (running, completed, failed, pruned) is the point's own run.yaml
(records/rundir.py, one locked writer), copied when the run ended into the point's line of results.jsonl,
which names the hand-off it belongs to (the job id and the length of the point's ``jobs`` here); what the
scheduler did comes from sacct. ``jobs/states.py`` puts them together, read-only. A tune's trials are
points too, made at the start (one per trial of the budget, params empty until a worker claims one), so
``status`` lists them from the start.

sweep.yaml is written as JSON (a subset of YAML 1.2), one point a line: at 5,000 points PyYAML takes
~0.5 s to read it back (libyaml) where JSON takes ~10 ms; and a job reads only its own point's line
(``read_point``), not the whole file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from hpc_runner.engine.sandbox import received_grants
from hpc_runner.errors import ClusterError
from hpc_runner.records.confine import inside, links_inside
from hpc_runner.records.ledger_record import LedgerRecord, Transactions, TransitionError
from hpc_runner.records.numbers import INT64_MAX, is_ascii_digits
from hpc_runner.records.read import LEDGER_MAX_BYTES, RecordError, parse_json_text, read_record_bytes
from hpc_runner.records.rundir import now_iso

SWEEP_FILE = "sweep.yaml"
BASE_DIR = "base"
POINTS_DIR = "points"
# the folder of a run's or a sweep's scheduler files (job scripts, the job's arguments, stdout/stderr logs), the
# same name on every scheduler: one that exists before the submit call runs. With %j or %A in it, the job's
# folder would be made only after the submit call returns, and a job that starts first fails at once
# (ExitCode 0:53, no log: SLURM before 23.02 does not create the folders of --output/--error).
JOB_FOLDER = "jobs"
OLD_JOB_FOLDER = "slurm"  # its name before it was neutral: run dirs, sweeps and pipelines made then keep it
JOB_FOLDERS = (JOB_FOLDER, OLD_JOB_FOLDER)  # every name a job folder may have (the sandbox protects each)
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
# the sweep's own state (field ``state`` of sweep.yaml), beside its points': how its submissions went
TUNE = "tune"  # a tune's record before its workers are queued
PARTIALLY_SUBMITTED = "partially-submitted"  # an sbatch failed after others queued points
SWEEP_STATES = (SUBMITTING, TUNE, SUBMITTED, PARTIALLY_SUBMITTED, NOT_SUBMITTED)
# event -> (sweep states it may leave, state it enters): every submission, top-up or resume may end either way
SWEEP_TRANSITIONS: dict[str, tuple[frozenset[str], str]] = {
    "all_submitted": (frozenset(SWEEP_STATES), SUBMITTED),
    "submission_failed_part": (frozenset(SWEEP_STATES), PARTIALLY_SUBMITTED),
    "submission_failed": (frozenset(SWEEP_STATES), NOT_SUBMITTED),
}
MAX_RETURNS = 3  # a point whose tasks return it unrun this often fails with cause RETURNED
MAX_RETRIES = 3  # resubmissions of a failed point (resume, automatic retries)
# submit calls of any outcome (queued, refused by a limit, failed) a sweep may make in all: the ``max_submit_calls``
# bound, by default N x (1 + max_returns + max_retries) (SweepRecord.submit_call_budget; resume raises it)


def job_folder_of(run_dir: str | Path) -> Path:
    """Return the job folder of a single run dir (one submitted without a sweep): ``jobs/``, or ``slurm/`` where
    only that one is there (a run submitted before the folder had its neutral name), else ``jobs/``."""
    path = Path(run_dir)
    for name in JOB_FOLDERS:
        if os.path.lexists(path / name):
            return path / name
    return path / JOB_FOLDER


def point_dir_name(index: int, count: int) -> str:
    """Return ``points/0007`` (at least 4 digits, more for larger sweeps)."""
    width = max(4, len(str(max(count - 1, 0))))
    return f"{POINTS_DIR}/{index:0{width}d}"


def _check_point(point: Any, n: int, file: Path) -> None:
    """ClusterError unless entry ``n`` of sweep.yaml's points is one hpc-runner could have written."""
    problem, key = None, None
    if not isinstance(point, dict):
        problem = f"is a {type(point).__name__}, not a mapping"
    elif point.get("index") != n:
        problem, key = f"has index {_shown(point.get('index'))}, not {n}", "index"
    elif not isinstance(point.get("dir"), str) or not _is_point_dir(point["dir"]):
        problem, key = f"has dir {_shown(point.get('dir'))}, not a folder under {POINTS_DIR}/", "dir"
    elif not isinstance(point.get("params", {}), dict) or not isinstance(point.get("extra", {}), dict):
        problem = "has params or extra that are not mappings"
        key = "params" if not isinstance(point.get("params", {}), dict) else "extra"
    elif not isinstance(point.get("request") or {}, dict) or not all(
            isinstance(v, str | int | float | type(None)) for v in (point.get("request") or {}).values()):
        problem = f"has request {_shown(point.get('request'))}, not a mapping of profile settings to plain values"
        key = "request"
    elif point.get("job_id") is not None and not isinstance(point.get("job_id"), str):
        problem, key = f"has job_id {_shown(point.get('job_id'))}, not text", "job_id"
    elif point.get("submit", WAITING) not in STATES:
        problem, key = f"has state {_shown(point.get('submit'))}, not one of {', '.join(STATES)}", "submit"
    elif not _node_names(point.get("exclude", [])):
        problem, key = f"has exclude {_shown(point.get('exclude'))}, not a list of node names", "exclude"
    elif not _node_names(point.get("attempts", [])) or not all(_is_attempt_dir(a) for a in point.get("attempts", [])):
        problem = f"has attempts {_shown(point.get('attempts'))}, not a list of folders under {ATTEMPTS_DIR}/"
        key = "attempts"
    if problem:
        raise ClusterError(f"point {n} of the sweep record {problem}", where=str(file),
                           id_path=f"points[{n}]" + (f".{key}" if key else ""),
                           expected=f"the {SWEEP_FILE} hpc-runner wrote (hand edits may change params only)")
    for key, value in point.items():  # the other fields a reader uses, where the point has them
        shape = POINT_FIELDS.get(key)
        if shape is not None and not shape.fits(value):
            shape.check(value, f"points[{n}].{key}", file)


def _node_names(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(n, str) for n in value)


def _is_point_dir(text: str) -> bool:
    parts = text.split("/")
    return len(parts) == 2 and parts[0] == POINTS_DIR and is_ascii_digits(parts[1])


def _is_attempt_dir(text: str) -> bool:
    parts = text.split("/")
    return len(parts) == 2 and parts[0] == ATTEMPTS_DIR and parts[1] not in ("", ".", "..")


# ---------------------------------------------------------------- what each key of sweep.yaml holds
#
# sweep.yaml is checked once, as it is read (``SweepRecord.load``, and a job's ``read_point``): every key a reader
# uses has a shape here, so a value of the wrong type (NaN, a list, text, null, a number past 64 bits) is one
# ClusterError naming the file and the id (``submissions[0].profile``) for every command, and the readers may
# trust the types they find. A key that is absent is fine (older sweeps lack some); null is fine where the readers
# treat the key as optional. What a value means (a profile's settings, a tune's section, --safe grants) is checked
# by its own owner where it is used.

def _is_text(value: Any) -> bool:
    return isinstance(value, str)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= INT64_MAX


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _shown(value: Any) -> str:
    """``value`` in a few words for a message: a container by its kind, anything else by its repr, cut short."""
    if isinstance(value, dict | list):
        return f"a {'mapping' if isinstance(value, dict) else 'list'} of {len(value)} item(s)"
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text)} characters)"


@dataclass(frozen=True)
class Shape:
    """What one value of sweep.yaml is, as hpc-runner writes it (``what``, in words): a value ``ok`` accepts; a
    mapping whose named ``keys`` have shapes of their own (others are not read); a mapping whose every key
    ``key_ok`` accepts and every value has the shape ``each``; or a list whose every item has the shape ``item``.
    ``null``: None stands for the value not being there."""

    what: str
    ok: Callable[[Any], bool] | None = None
    keys: dict[str, Shape] | None = None
    each: Shape | None = None
    key_ok: Callable[[Any], bool] = _is_text
    item: Shape | None = None
    null: bool = False

    def _kind_fits(self, value: Any) -> bool:
        if self.keys is not None or self.each is not None:
            return isinstance(value, dict)
        if self.item is not None:
            return isinstance(value, list)
        return self.ok is None or self.ok(value)

    def fits(self, value: Any) -> bool:
        """Return True when ``value`` has this shape (no message: the fast path of a 10,000-point record)."""
        if value is None and self.null:
            return True
        if not self._kind_fits(value):
            return False
        if self.keys is not None:
            return all(shape.fits(value[k]) for k, shape in self.keys.items() if k in value)
        if self.each is not None:
            return all(self.key_ok(k) and self.each.fits(v) for k, v in value.items())
        if self.item is not None:
            return all(self.item.fits(v) for v in value)
        return True

    def check(self, value: Any, at: str, file: Path) -> None:
        """ClusterError naming ``file``, the id ``at`` and what was expected, at the first part of ``value`` that
        does not have this shape."""
        if value is None and self.null:
            return
        if not self._kind_fits(value):
            raise ClusterError(f"the sweep record holds {_shown(value)} there", where=str(file), id_path=at,
                               expected=f"{self.what}{', or null' if self.null else ''}, as hpc-runner writes it "
                               "(hand edits may change params only)")
        if self.keys is not None:
            for k, shape in self.keys.items():
                if k in value:
                    shape.check(value[k], f"{at}.{k}", file)
        elif self.each is not None:
            for k, v in value.items():
                if not self.key_ok(k):
                    raise ClusterError(f"the sweep record holds the key {_shown(k)} there", where=str(file),
                                       id_path=at, expected=f"{self.what}, as hpc-runner writes it")
                self.each.check(v, f"{at}.{k}", file)
        elif self.item is not None:
            for n, v in enumerate(value):
                self.item.check(v, f"{at}[{n}]", file)


def _or_null(shape: Shape) -> Shape:
    return dataclasses.replace(shape, null=True)


_TEXT = Shape("text", _is_text)
_COUNT = Shape(f"a whole number from 0 to {INT64_MAX}", _is_count)
_POSITIVE = Shape(f"a whole number from 1 to {INT64_MAX}", lambda v: _is_count(v) and v >= 1)
_TEXTS = Shape("a list of text", item=_TEXT)
_MAPPING = Shape("a mapping", lambda v: isinstance(v, dict))
_ENTRIES_LOG = Shape("a list of mappings", item=_MAPPING)  # resumed, cancelled, a point's history: appended to
_PROFILE = Shape("a cluster profile as recorded (a mapping of profile, file and settings)", null=True,
                 keys={"profile": _or_null(_TEXT), "file": _or_null(_TEXT), "settings": _or_null(_MAPPING)})
_SUBMISSION = Shape("a submission (a mapping of at, reason, arrays, profile...)", keys={
    "reason": _or_null(_TEXT),
    "arrays": _or_null(Shape("a list of arrays", item=Shape("an array (a mapping with its job_id)",
                                                            keys={"job_id": _or_null(_TEXT)}))),
    "profile": _PROFILE,
    "array_parallelism": _or_null(_POSITIVE),
    "workers": _or_null(Shape("a mapping of worker numbers (text of digits) to job ids", each=_or_null(_TEXT),
                              key_ok=is_ascii_digits)),
})
# the top-level keys: kind, created, version, spec and the texts only shown are not read as anything else
SWEEP_FIELDS: dict[str, Shape] = {
    "bundle": _or_null(_TEXT),
    "bundle_dir": _or_null(_TEXT),
    "entry": _or_null(_TEXT),
    "checked": _or_null(_TEXT),
    "base": _TEXT,  # where they lead is check_folders' to say
    "job_folder": _TEXT,
    "command": Shape("the command as recorded (a mapping of argv, shell and cwd)", null=True,
                     keys={"argv": _or_null(_TEXTS), "shell": _or_null(_TEXT), "cwd": _or_null(_TEXT)}),
    "params": Shape("a list of the swept ids (text)", item=_TEXT),
    "cluster": _PROFILE,
    "state": Shape(f"one of {', '.join(SWEEP_STATES)}", lambda v: isinstance(v, str) and v in SWEEP_STATES),
    "error": _or_null(_MAPPING),
    "submissions": Shape("a list of submissions", item=_SUBMISSION),
    "submit_calls": _COUNT,
    "bounds": Shape("a mapping of bounds (max_returns, max_retries, max_submit_calls) to whole numbers",
                    each=_COUNT, null=True),
    "pack": Shape("a mapping of points and parallel (whole numbers from 1)", null=True,
                  keys={"points": _POSITIVE, "parallel": _POSITIVE}),
    "retry": Shape("a mapping of --retry rules (CAUSE: CHANGE, both text)", each=_TEXT, null=True),
    "dependency": _or_null(_TEXT),
    "waiters": _or_null(_TEXTS),
    "leaving": _or_null(_TEXTS),
    "sandbox": _or_null(_MAPPING),
    "tune": _or_null(_MAPPING),
    "shards": _or_null(_MAPPING),
    "pipeline": _or_null(_MAPPING),
    "resumed": _ENTRIES_LOG,
    "cancelled": _ENTRIES_LOG,
}
# a point's keys besides those _check_point checks first (index, dir, params, extra, request, job_id, submit,
# exclude, attempts); a tune's trials have the last ones
POINT_FIELDS: dict[str, Shape] = {
    "jobs": _TEXTS,
    "returns": _COUNT,
    "retries": _COUNT,
    "cause": Shape("a cause (a mapping of kind and message)", null=True,
                   keys={"kind": _TEXT, "message": _or_null(_TEXT)}),
    "history": _ENTRIES_LOG,
    "node_failures": Shape("a mapping of job ids to the nodes their attempts failed on", each=_TEXTS),
    "trial": _or_null(_COUNT),
    "trial_id": _or_null(_COUNT),
    "worker": _or_null(_COUNT),
    "state": _or_null(_TEXT),
    "value": _or_null(Shape("a number (a trial's metric: NaN when it diverged)", _is_number)),
    "epochs": _or_null(_COUNT),
    "resumed": _COUNT,
    "error": _or_null(_TEXT),
}


@dataclass
class SweepRecord(LedgerRecord, noun="sweep", entries="points", check=_check_point):
    """sweep.yaml in memory (SWEEP_FILE, LOCK_FILE and KIND follow from its noun): ``data`` holds everything except
    ``points``. Read it anywhere; write it through ``locked`` only (a hand edit may change params only)."""

    points: list[dict[str, Any]] = field(default_factory=list)  # after the base's path and data

    @classmethod
    def load(cls, path: str | Path) -> SweepRecord:  # type: ignore[override]
        """Read sweep.yaml; a received one's --safe grants are dropped as it is read (engine/sandbox.py
        ``received_grants``): a record this account did not write alone grants nothing, even saved again."""
        record = super().load(path)
        if record.data.get("sandbox") is not None:
            record.data["sandbox"] = received_grants(record.data["sandbox"], record.file)
        return record

    def check_fields(self) -> None:
        """ClusterError naming the id of the first top-level value (besides the points, checked one by one) that
        does not have the shape hpc-runner writes (``SWEEP_FIELDS``)."""
        for key, shape in SWEEP_FIELDS.items():
            if key in self.data and not shape.fits(self.data[key]):
                shape.check(self.data[key], key, self.file)

    @property
    def base_dir(self) -> Path:
        """Return the folder of the shared base config."""
        return self.path / self.data.get("base", BASE_DIR)

    def check_folders(self) -> None:
        """ClusterError unless the job folder, the base config, points/ (and each point's run dir) and attempts/
        resolve inside the sweep dir (records/confine.py): a record that named another folder would have
        ``resume`` write job scripts and pickles there, ``collect`` its results."""
        inside(self.path, self.data.get("job_folder", JOB_FOLDER), "job_folder", self.file)
        inside(self.path, self.data.get("base", BASE_DIR), "base", self.file)
        for folder in (POINTS_DIR, ATTEMPTS_DIR):  # each point's dir is points/NNNN (_check_point): its link too
            links_inside(inside(self.path, folder, f"the folder {folder}/", self.file), self.path,
                         f"the folder {folder}/, entry", self.file)

    @property
    def param_ids(self) -> list[str]:
        """Return the swept ids, in axis order."""
        return list(self.data.get("params", []))

    @property
    def job_folder(self) -> Path:
        """Return the folder of this sweep's scheduler files as sweep.yaml records it (every sweep and tune records
        it: one made before the neutral name says ``slurm``)."""
        return self.path / self.data.get("job_folder", JOB_FOLDER)

    @property
    def is_tune(self) -> bool:
        """Return True for a tune dir (its points are the trials of its budget)."""
        return bool(self.data.get("tune"))

    def point_dir(self, point: dict[str, Any]) -> Path:
        """Return the run dir of a point."""
        return self.path / point["dir"]

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

    def submit_call_budget(self) -> int:
        """Return how many submit calls, of any outcome, the sweep may make in all: its ``max_submit_calls`` bound
        as recorded, else N x (1 + max_returns + max_retries) for N points (a tune's workers count in it too)."""
        per_point = 1 + self.limit("max_returns", MAX_RETURNS) + self.limit("max_retries", MAX_RETRIES)
        return self.limit("max_submit_calls", max(len(self.points), 1) * per_point)

    def submit_calls(self) -> int:
        """Return how many submit calls the sweep has made so far (``Ledger.count_submit_call``)."""
        value = self.data.get("submit_calls", 0)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0

    def submit_calls_left(self) -> int:
        """Return how many more submit calls the sweep may make (0: it submits nothing more until resume raises
        ``--max-submit-calls``)."""
        return max(0, self.submit_call_budget() - self.submit_calls())

    def budget_note(self) -> str:
        """Return what ``status`` and the top-ups say of a sweep whose submit budget is spent."""
        return (f"the sweep made {self.submit_calls()} of its {self.submit_call_budget()} submit calls "
                f"(max_submit_calls, refused and failed calls included) and submits nothing more; "
                f"`hpc-runner resume {self.path} --max-submit-calls N` raises the budget")


def write_new(record: SweepRecord) -> Path:
    """Write the first sweep.yaml of a sweep dir that has none yet (before any job can exist)."""
    return record.write_new()


class Ledger(Transactions[SweepRecord]):
    """The transitions of a sweep's points, applied to a record held under the sweep's lock (``locked``)."""

    RECORD: ClassVar[type[LedgerRecord]] = SweepRecord
    TRANSITIONS: ClassVar[dict[str, tuple[frozenset[str], str]]] = TRANSITIONS
    STATE: ClassVar[str] = "submit"
    DEFAULT_STATE: ClassVar[str | None] = WAITING

    @property
    def points(self) -> list[dict[str, Any]]:
        """Return the points (read them; change them through the transitions)."""
        return self.record.points

    def _move(self, event: str, index: int) -> dict[str, Any]:
        return self.move(event, self.record.points[index], index, f"point {index}")

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
        given, and with ``request`` (profile settings of its next job, jobs/retry.py) recorded with the attempt
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

    # ---------------------------------------------------------------- the sweep's own state and settings

    def _sweep_move(self, event: str) -> None:
        sources, target = SWEEP_TRANSITIONS[event]
        state = self.data.get("state", SUBMITTING)
        if state not in sources:
            raise TransitionError(f"the sweep cannot move by {event} from state {state}", where=str(self.record.file),
                                  expected=f"a sweep in state {' or '.join(sorted(sources))}")
        self.data["state"] = target
        self.events.append((event, None))

    def all_submitted(self) -> None:
        """Every point was handed to the scheduler or waits in the sweep's queue (a per-point state)."""
        self._sweep_move("all_submitted")

    def submission_failed(self, message: str, submitted_any: bool) -> None:
        """An sbatch failed: the sweep is partially submitted (or not at all), with the error recorded."""
        self.note_error(message)
        self._sweep_move("submission_failed_part" if submitted_any else "submission_failed")

    def note_error(self, message: str) -> None:
        """Record the last submission error (a failed top-up: the points keep waiting)."""
        self.data["error"] = {"at": now_iso(), "message": message[:800]}
        self.events.append(("note_error", None))

    def note_resume(self, points: int, fixes: dict[str, Any]) -> None:
        """Record a ``resume`` of ``points`` points with ``fixes``."""
        self.data.setdefault("resumed", []).append({"at": now_iso(), "points": points, "fixes": fixes})
        self.events.append(("note_resume", None))

    def note_cancel(self, waiting: list[int]) -> dict[str, Any]:
        """Record a ``cancel`` of the sweep (the waiting points it cancelled); return the entry to complete."""
        entry: dict[str, Any] = {"at": now_iso(), "jobs": [], "waiting": waiting}
        self.data.setdefault("cancelled", []).append(entry)
        self.events.append(("note_cancel", None))
        return entry

    def count_submit_call(self) -> None:
        """Count one submit call of the sweep before it is made, whatever its outcome (jobs/governor.py's
        ``send_points``, tune/submit.py's ``send_workers``); ClusterError when the budget is spent."""
        if self.record.submit_calls_left() <= 0:
            raise ClusterError(self.record.budget_note(), where=str(self.record.file),
                               expected=f"at most {self.record.submit_call_budget()} submit calls for this sweep")
        self.data["submit_calls"] = self.record.submit_calls() + 1
        self.events.append(("count_submit_call", None))

    def submit_calls_left(self) -> int:
        """Return how many more submit calls the sweep may make (its ``max_submit_calls`` budget)."""
        return self.record.submit_calls_left()

    def set_bound(self, name: str, value: int) -> None:
        """Set one of the sweep's bounds (``max_retries``, ``max_returns``, ``max_submit_calls``) from now on."""
        self.data.setdefault("bounds", {})[name] = value
        self.events.append(("set_bound", None))

    def add_retry_rules(self, rules: dict[str, str]) -> None:
        """Add ``--retry`` rules (cause -> fix): later failures are retried by them."""
        self.data["retry"] = {**(self.data.get("retry") or {}), **rules}
        self.events.append(("add_retry_rules", None))

    def wait_on(self, dependency: str) -> None:
        """Make the sweep's later submissions (top-ups, resumes) wait on ``dependency`` (a pipeline's input)."""
        self.data["dependency"] = dependency
        self.events.append(("wait_on", None))

    def set_waiter(self, job: str) -> None:
        """Make job ``job`` wait on every array a later top-up queues (a pipeline's select job)."""
        self.data["waiters"] = [job]
        self.events.append(("set_waiter", None))

    def set_leaving(self, jobs: list[str]) -> None:
        """Record the jobs a top-up counts as gone (each calls it as it ends; see jobs/governor.py)."""
        self.data["leaving"] = sorted(jobs)
        self.events.append(("set_leaving", None))

    def waiting(self) -> list[int]:
        """Return the indices of the points that wait for a free submit slot."""
        return [n for n, p in enumerate(self.record.points) if p.get("submit") == WAITING]


def locked(path: str | Path, timeout: float = 600.0) -> contextlib.AbstractContextManager[Ledger]:
    """Take the sweep's lock, read sweep.yaml, yield its Ledger; write it atomically on a normal exit (and
    on an exception, when transitions were applied before it).

    Every change of sweep.yaml after it was first written (the submitting CLI, ``resume``, top-ups,
    ``cancel``, and the jobs when they return points or claim trials) goes through here, so no update
    is lost between a read and a write, whatever node each writer runs on.
    """
    return Ledger.locked(path, timeout)


def read_point(path: str | Path, index: int) -> dict[str, Any]:
    """Return point ``index`` of a sweep, reading only its line of sweep.yaml (a job's start-up at 10,000
    points must not parse the whole file); the whole file when it is not in the layout hpc-runner writes."""
    file = Path(path) / SWEEP_FILE
    raw = read_record_bytes(file, "sweep record", LEDGER_MAX_BYTES, error=ClusterError)
    if raw is None:
        raise ClusterError("cannot read the sweep record (No such file or directory)", where=str(file))
    start = raw.find(b'\n  "points": [\n')
    if start >= 0:
        lines = raw[start:].split(b"\n", index + 3)
        if len(lines) > index + 2:
            line = lines[index + 2].strip().rstrip(b",")
            try:
                point = parse_json_text(line, file, "sweep record's point line")
            except RecordError:
                point = None
            if isinstance(point, dict) and point.get("index") == index:
                _check_point(point, index, file)
                return point
    record = SweepRecord.load(path)
    if not 0 <= index < len(record.points):
        raise ClusterError(f"the sweep has no point {index}", where=str(file))
    return record.points[index]


def created(record: SweepRecord, timeout: float = 600.0) -> contextlib.AbstractContextManager[Ledger]:
    """Take the new sweep's lock, write its first sweep.yaml and yield its Ledger (``locked`` without the read)."""
    return Ledger.created(record, timeout)


def new_points(params: Iterable[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    """Return the point entries of a new sweep (state submitting until the first sbatch says otherwise)."""
    return [{"index": i, "dir": point_dir_name(i, count), "params": p, "job_id": None, "submit": SUBMITTING}
            for i, p in enumerate(params)]


def new_trials(count: int) -> list[dict[str, Any]]:
    """Return the point entries of a new tune: one per trial of its budget, params given when claimed."""
    return [{"index": i, "dir": point_dir_name(i, count), "params": {}, "job_id": None, "submit": WAITING}
            for i in range(count)]

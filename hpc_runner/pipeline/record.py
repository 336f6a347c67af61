"""The pipeline record: the one owner of ``pipeline.yaml`` and of each stage's state in the pipeline.

Layout of a pipeline dir::

    pipeline.yaml     the pipeline file as given, the cluster profile, and one line per stage: its
                      kind, folder, state, job ids, the dependency it was queued with, its cause
                      (failed, cancelled) and, for a select stage, its choice
    pipeline.lock     the lock every writer takes (records/file_lock.py: it holds across nodes)
    <stage>/          one folder per stage: a sweep or tune dir (sweep.yaml), a run dir (run.yaml),
                      a sharded stage's sweep dir (predictions/), a select stage's choice.json, an
                      export stage's command.yaml and exported file

A stage's *pipeline state* (field ``state``) moves only through ``TRANSITIONS``, each a method of
``PipelineLedger`` that checks the move is allowed and bounded; a ``PipelineLedger`` exists only
inside ``locked(dir)`` (take the lock, read, transition, write atomically). Nothing else writes
pipeline.yaml. The states and the events that move them (docs/pipelines.md has the diagram)::

    planned --queue--> queued --finish--> done      (a select stage chose; the stage it chose from is done)
       |                 |  \\--fail--> failed       (a select stage found nothing to choose, with the cause)
       |                 \\--defer--> queued         (a select stage's input still runs: a new job waits on it)
       \\--refuse--> not-submitted (its sbatch failed when the pipeline started)
    planned|queued|not-submitted --cancel--> cancelled (an input failed: the cause names it; or `cancel DIR`)
    queued|failed|cancelled|not-submitted --queue--> queued   (`resume DIR`; at most MAX_SUBMISSIONS in all)

How the work of a queued stage went (running, completed, failed points) is its own folder's record
(sweep.yaml, run.yaml) and the scheduler's: ``pipeline/view.py`` puts them together, read-only.
pipeline.yaml is JSON (a subset of YAML 1.2), one stage a line, like sweep.yaml.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from hpc_runner.errors import ClusterError
from hpc_runner.records.confine import inside
from hpc_runner.records.ledger_record import LedgerRecord, Transactions, TransitionError  # noqa: F401 - callers catch it here
from hpc_runner.records.rundir import now_iso

PIPELINE_FILE = "pipeline.yaml"
LOCK_FILE = "pipeline.lock"
KIND = "hpc-runner pipeline"

PLANNED = "planned"  # in the record written before the first sbatch
QUEUED = "queued"  # its jobs were handed to the scheduler (job ids recorded); its folder says how they go
DONE = "done"  # a select stage chose (and the stage it chose from is done with)
FAILED = "failed"  # a select stage found nothing to choose; the cause says why
CANCELLED = "cancelled"  # an input failed (the cause names it), or the user cancelled the pipeline
NOT_SUBMITTED = "not-submitted"  # its sbatch failed when the pipeline started
STATES = (PLANNED, QUEUED, DONE, FAILED, CANCELLED, NOT_SUBMITTED)
FINAL = (DONE, FAILED, CANCELLED)
# event -> (states it may leave, state it enters)
TRANSITIONS: dict[str, tuple[frozenset[str], str]] = {
    "queue": (frozenset({PLANNED, QUEUED, FAILED, CANCELLED, NOT_SUBMITTED}), QUEUED),
    "refuse": (frozenset({PLANNED}), NOT_SUBMITTED),
    "defer": (frozenset({QUEUED}), QUEUED),
    "finish": (frozenset({QUEUED}), DONE),
    "fail": (frozenset({PLANNED, QUEUED}), FAILED),
    "cancel": (frozenset({PLANNED, QUEUED, NOT_SUBMITTED}), CANCELLED),
}
MAX_SUBMISSIONS = 4  # a stage is queued at most this often (the start and three resumes)
MAX_DEFERRALS = 20  # a select stage waits again on its still-running input at most this often


def _check_stage(entry: Any, n: int, file: Path) -> None:
    """ClusterError unless stage ``n`` of pipeline.yaml is one hpc-runner could have written."""
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or entry.get("state") not in STATES:
        raise ClusterError(f"stage {n} of the pipeline record is not one hpc-runner wrote", where=str(file),
                           expected=f"the {PIPELINE_FILE} hpc-runner wrote")


@dataclass
class PipelineRecord(LedgerRecord, noun="pipeline", entries="stages", check=_check_stage):
    """pipeline.yaml in memory (PIPELINE_FILE, LOCK_FILE and KIND follow from its noun): ``data`` holds everything
    but ``stages``. Read it anywhere; write it through ``locked`` only."""

    stages: list[dict[str, Any]] = field(default_factory=list)  # after the base's path and data

    def check_folders(self) -> None:
        """ClusterError unless each stage's folder resolves inside the pipeline dir (records/confine.py): a record
        that named another folder (another sweep) would have ``collect`` and ``resume`` write there."""
        for n, s in enumerate(self.stages):
            inside(self.path, s.get("dir", s["name"]), f"stage {n} ('{str(s['name'])[:80]}') dir", self.file)

    def stage(self, name: str) -> dict[str, Any]:
        """Return the entry of stage ``name``; ClusterError when the pipeline has none."""
        for s in self.stages:
            if s.get("name") == name:
                return s
        raise ClusterError(f"the pipeline has no stage '{name}'", where=str(self.file),
                           expected=f"one of: {', '.join(str(s.get('name')) for s in self.stages)}")

    def stage_dir(self, name: str) -> Path:
        """Return the folder of stage ``name``."""
        return self.path / str(self.stage(name).get("dir", name))

    def consumers(self, name: str) -> list[dict[str, Any]]:
        """Return the stages that wait on stage ``name`` directly."""
        return [s for s in self.stages if name in (s.get("inputs") or [])]

    def descendants(self, name: str) -> list[dict[str, Any]]:
        """Return every stage that waits on ``name``, directly or not (in the record's order)."""
        frontier, out = {name}, []
        for s in self.stages:  # the record lists the stages in submission order
            if frontier & set(s.get("inputs") or []):
                out.append(s)
                frontier.add(s["name"])
        return out

    def choice(self, name: str) -> dict[str, Any] | None:
        """Return the choice of select stage ``name`` (None until it has chosen); ClusterError when the run dir it
        chose (whose weights the later stages load) is not inside the pipeline dir."""
        s = self.stage(name)
        chosen = s.get("chosen") if s.get("state") == DONE else None
        if isinstance(chosen, dict) and "run_dir" in chosen:
            inside(self.path, chosen["run_dir"], f"the run_dir chosen by stage '{name}'", self.file)
        return chosen


def is_pipeline_dir(path: str | Path) -> bool:
    """Return True for a folder that holds a pipeline record."""
    return (Path(path) / PIPELINE_FILE).is_file()


def write_new(record: PipelineRecord) -> Path:
    """Write the first pipeline.yaml of a pipeline dir (before any job can exist)."""
    return record.write_new()


class PipelineLedger(Transactions[PipelineRecord]):
    """The transitions of a pipeline's stages, applied to a record held under its lock (``locked``)."""

    RECORD: ClassVar[type[LedgerRecord]] = PipelineRecord
    TRANSITIONS: ClassVar[dict[str, tuple[frozenset[str], str]]] = TRANSITIONS

    def _move(self, event: str, name: str, note: str | None = None) -> dict[str, Any]:
        s = self.move(event, self.record.stage(name), name, f"stage '{name}'")
        entry = {"at": now_iso(), "stage": name, "event": event}
        if note:
            entry["note"] = note[:300]
        self.record.data.setdefault("history", []).append(entry)
        return s

    def queue(self, name: str, jobs: list[str], dependency: str | None, **fields: Any) -> None:
        """The stage's jobs were handed to the scheduler (the pipeline's start, or a resume); bounded."""
        s = self.record.stage(name)
        submissions = int(s.get("submissions", 0)) + 1
        if submissions > MAX_SUBMISSIONS:
            raise ClusterError(f"stage '{name}' was queued {submissions - 1} times already",
                               where=str(self.record.file),
                               expected=f"at most {MAX_SUBMISSIONS} submissions of a stage (the start and "
                               f"{MAX_SUBMISSIONS - 1} resumes)")
        self._move("queue", name)
        s.update(jobs=list(jobs), dependency=dependency, submitted=now_iso(), submissions=submissions, **fields)
        s.pop("cause", None)

    def refuse(self, name: str, message: str) -> None:
        """The stage's sbatch failed when the pipeline started."""
        s = self._move("refuse", name, message)
        s["cause"] = {"kind": "NOT-SUBMITTED", "message": message[:800]}

    def defer(self, name: str, job: str, dependency: str) -> None:
        """A select stage's input still runs: its new job (``job``) waits on it; bounded by MAX_DEFERRALS."""
        s = self.record.stage(name)
        deferrals = int(s.get("deferrals", 0)) + 1
        if deferrals > MAX_DEFERRALS:
            raise ClusterError(f"stage '{name}' waited {deferrals - 1} times for its input already",
                               where=str(self.record.file), expected=f"at most {MAX_DEFERRALS} waits")
        self._move("defer", name, f"waits again, as job {job}, on {dependency}")
        s.update(jobs=[job], dependency=dependency, deferrals=deferrals)

    def can_defer(self, name: str) -> bool:
        """Return True while a select stage may wait again for its input."""
        return int(self.record.stage(name).get("deferrals", 0)) < MAX_DEFERRALS

    def finish(self, name: str, **fields: Any) -> None:
        """A select stage chose (``chosen``), or the stage it chose from is done with."""
        s = self._move("finish", name)
        s.update(ended=now_iso(), **fields)
        s.pop("cause", None)

    def fail(self, name: str, kind: str, message: str) -> None:
        """The stage failed (a select stage found nothing to choose); ``kind`` and ``message`` say why."""
        s = self._move("fail", name, message)
        s.update(ended=now_iso(), cause={"kind": kind, "message": message[:2000]})

    def cancel(self, name: str, kind: str, message: str) -> None:
        """The stage will not run: an input failed (the message names it) or the user cancelled."""
        s = self._move("cancel", name, message)
        s.update(ended=now_iso(), cause={"kind": kind, "message": message[:2000]})


def locked(path: str | Path, timeout: float = 600.0) -> contextlib.AbstractContextManager[PipelineLedger]:
    """Take the pipeline's lock, read pipeline.yaml, yield its ledger; write it atomically on a normal exit (and
    on an exception, when transitions were applied before it: each was valid on its own)."""
    return PipelineLedger.locked(path, timeout)


def read_settled(path: str | Path, timeout: float = 600.0) -> PipelineRecord:
    """Read pipeline.yaml once no one holds its lock (a job that starts while its stage is being queued waits
    until the submitter has recorded its job id)."""
    return PipelineLedger.read_settled(path, timeout)

"""Open what ``status``/``collect``/``cancel``/``resume`` are pointed at: a sweep dir, a tune dir or one run dir.

Each is a class (RunTarget, SweepTarget, TuneTarget): what differs between them is a method here, so the layers
above (report, pipeline, cli) ask the target instead of comparing its kind. ``load_target`` is the one place
that decides which one a dir is; ``hpc_runner.cli.targets.open_target`` adds pipeline dirs and the commands."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from hpc_runner.errors import ClusterError
from hpc_runner.jobs import ledger as sr
from hpc_runner.jobs import states as tracking
from hpc_runner.jobs.governor import profile_from_record
from hpc_runner.jobs.results import ResultsFile
from hpc_runner.jobs.retry import pending_retries
from hpc_runner.records.rundir import RUN_FILE, RunDir
from hpc_runner.scheduler.executor import LOCAL_JOB_ID, Executor, is_scheduler_job
from hpc_runner.scheduler.job_env import recorded_job
from hpc_runner.scheduler.job_logs import JobLogs
from hpc_runner.scheduler.profiles import ClusterProfile
from hpc_runner.scheduler.select import executor_for

T = TypeVar("T")


@dataclass
class Target:
    """The points of a sweep or tune dir (many) or of one submitted run dir (one point, index 0)."""

    path: Path
    points: list[dict[str, Any]]
    record: sr.SweepRecord | None = None
    run_record: dict[str, Any] | None = None
    # the sweep's results file (jobs/results.py), read once when first asked; a run dir has none
    results: ResultsFile = field(init=False, repr=False, compare=False)

    kind: ClassVar[str] = ""  # "run", "sweep" or "tune": for people (messages), never compared
    hints_resume: ClassVar[bool] = False  # status names `resume DIR` for its failed points (a sweep's, a tune's)
    right_sizes: ClassVar[bool] = True  # status, collect and report suggest resources once it has ended

    def __post_init__(self) -> None:
        self.results = ResultsFile(self.path if self.record is not None else None)

    @classmethod
    def load(cls, path: Path) -> Target:
        """Return the target at ``path``, read as this class (the dir's kind is already known)."""
        raise NotImplementedError

    def reload(self) -> Target:
        """Return this target read again from its dir (tasks, workers and top-ups change the record)."""
        return type(self).load(self.path)

    def title(self, count: int) -> str:
        """Return what this is, for the head of the status table (``count`` points)."""
        raise NotImplementedError

    def pending_retries(self, states: list[tracking.PointState]) -> set[int]:
        """Return the failed points the next top-up sends again (a sweep's --retry rules; none elsewhere)."""
        return set()

    @property
    def param_ids(self) -> list[str]:
        """Return the swept ids (none for a single run)."""
        return self.record.param_ids if self.record else []

    def run_dir(self, point: dict[str, Any]) -> Path:
        """Return the run dir of a point."""
        return self.record.point_dir(point) if self.record else self.path

    @property
    def job_folder(self) -> Path:
        """Return the folder of this target's scheduler files: the sweep's recorded one, else the run dir's
        (``jobs/``, or ``slurm/`` in a run dir made before: ``ledger.job_folder_of``)."""
        return self.record.job_folder if self.record else sr.job_folder_of(self.path)

    @property
    def job_logs(self) -> JobLogs:
        """Return where this target's jobs wrote their logs, as its executor says (``Executor.job_logs``)."""
        try:
            return self.executor().job_logs(self.job_folder)
        except ClusterError:  # a profile whose executor cannot be made here: no logs to read
            return JobLogs(self.job_folder)

    def submitted_dates(self) -> list[str]:
        """Return when the jobs were submitted (where the scheduler's accounting starts looking)."""
        if self.record:
            return [s.get("at") for s in self.record.submissions()] or [self.record.data.get("created")]
        job = (self.run_record or {}).get("job") or {}
        return [job.get("submitted") or (self.run_record or {}).get("created")]

    def shared_job_ids(self) -> set[str]:
        """Return the job ids that several points share (packed: one array task runs K points)."""
        seen: set[str] = set()
        shared: set[str] = set()
        for p in self.points:
            job = p.get("job_id")
            if is_scheduler_job(job):
                (shared if job in seen else seen).add(job)
        return shared

    def executor(self) -> Executor:
        """Return the executor of the profile the sweep (or run) was last submitted with."""
        if self.record is not None:
            return executor_for(profile_from_record(self.record))
        cluster = ((self.run_record or {}).get("job") or {}).get("cluster")
        return executor_for(ClusterProfile.from_record(cluster if isinstance(cluster, dict) else {}))

    def states(self, results: ResultsFile | None = None) -> tuple[list[tracking.PointState], tracking.SchedulerAnswer]:
        """Return every point's state from one scheduler call, with the cause of each failed one. ``results``: the
        sweep's results file, asked before a run dir where the scheduler cannot tell (collect, which reads it for
        every point's figures anyway; status reads the few run dirs it needs, not the whole file).

        Read-only: nothing is written. A tune's trials that no worker has claimed yet wait for one: PENDING
        while one of its workers is queued or running, NOT-STARTED once none is (``resume`` starts more)."""
        workers = self._worker_jobs()
        executor = self.executor()
        answer = executor.query(
            [p.get("job_id") for p in self.points] + workers, since=tracking._since(self.submitted_dates())
        )
        shared = self.shared_job_ids()
        packed_sweep = int(((self.record.data.get("pack") if self.record else None) or {}).get("points", 1)) > 1
        packed_sweep = packed_sweep or bool(workers)  # a tune's worker runs trial after trial, like a packed task
        alive = any(tracking.job_alive(answer, w) for w in workers)
        states = [self._point_state(p, answer, packed_sweep or p.get("job_id") in shared, alive, results)
                  for p in self.points]
        tracking.recheck_requeued(states, answer, executor)
        tracking.explain_failures(states, executor.job_logs(self.job_folder))
        return states, answer

    def states_beside(self, work: Callable[[], T]) -> tuple[list[tracking.PointState], tracking.SchedulerAnswer, T]:
        """Return ``states()`` as collect reads them (with the sweep's results file) and what ``work()`` returned.
        Where the scheduler's answers wait on its services (SLURM's sacct, ~0.2 s), the states are read in a thread
        while ``work`` runs; elsewhere (the in-memory cluster, local runs) ``work`` runs first, then the states, as
        both may use the same in-process state."""
        if not self.executor().answers_wait:
            done = work()
            return (*self.states(self.results), done)
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(1, thread_name_prefix="hpcr-states") as pool:
            ahead = pool.submit(self.states, self.results)
            done = work()
            states, answer = ahead.result()
        return states, answer, done

    def _point_state(self, point: dict[str, Any], answer: tracking.SchedulerAnswer, packed: bool,
                     workers_alive: bool, results: ResultsFile | None = None) -> tracking.PointState:
        """Return one point's state from the scheduler's answer and its run record (or its line in ``results``)."""
        return tracking.combine(point, self.run_dir(point), answer, packed=packed, results=results)

    def _worker_jobs(self) -> list[str]:
        """Return the job ids of a tune's workers (none for a sweep or a run)."""
        return []


@dataclass
class RunTarget(Target):
    """One run dir (run.yaml) submitted with ``hpc-runner submit`` or run here: one point, index 0."""

    kind: ClassVar[str] = "run"

    @classmethod
    def load(cls, path: Path) -> RunTarget:
        """Return the run at ``path`` (its run.yaml), as one point."""
        rec = RunDir(path).record()
        job_id = _job_id_of_run(rec)
        if not job_id and rec.get("status") != sr.NOT_SUBMITTED:
            job_id = LOCAL_JOB_ID
        point = {"index": 0, "dir": ".", "params": {}, "job_id": job_id}
        if rec.get("status") == sr.NOT_SUBMITTED:
            point["job_id"] = None
        return cls(path, [point], run_record=rec)

    def title(self, count: int) -> str:
        """Return ``run``."""
        return "run"


@dataclass
class SweepTarget(Target):
    """A sweep dir (sweep.yaml): many points, some of which may wait for a free submit slot."""

    kind: ClassVar[str] = "sweep"
    hints_resume: ClassVar[bool] = True

    @classmethod
    def load(cls, path: Path) -> SweepTarget:
        """Return the sweep at ``path`` (its sweep.yaml)."""
        return cls.of_record(path, sr.SweepRecord.load(path))

    @classmethod
    def of_record(cls, path: Path, record: sr.SweepRecord) -> SweepTarget:
        """Return the sweep at ``path`` from its record, already read."""
        return cls(path, record.points, record=record)

    def title(self, count: int) -> str:
        """Return ``sweep of N points``."""
        return f"sweep of {count} points"

    def pending_retries(self, states: list[tracking.PointState]) -> set[int]:
        """Return the failed points that the sweep's --retry rules send again at the next top-up."""
        return pending_retries(self.record, states)


@dataclass
class TuneTarget(SweepTarget):
    """A tune dir: a sweep whose trials its workers claim one after another (a worker is like a packed task)."""

    kind: ClassVar[str] = "tune"
    right_sizes: ClassVar[bool] = False  # each trial asks what the study chose: no one request to right-size

    def pending_retries(self, states: list[tracking.PointState]) -> set[int]:
        """Return no point: a tune's failed trials are not retried by rules (its workers go on)."""
        return set()

    def _point_state(self, point: dict[str, Any], answer: tracking.SchedulerAnswer, packed: bool,
                     workers_alive: bool, results: ResultsFile | None = None) -> tracking.PointState:
        """A trial no worker has claimed yet waits for one (PENDING while a worker is alive, else NOT-STARTED)."""
        if point.get("trial") is None:
            return tracking.unclaimed_trial(point, self.run_dir(point), workers_alive)
        return super()._point_state(point, answer, packed, workers_alive, results)

    def _worker_jobs(self) -> list[str]:
        """Return the job ids of the tune's workers, from every submission."""
        assert self.record is not None  # a tune dir always has its sweep.yaml
        return [job for s in self.record.submissions() for job in (s.get("workers") or {}).values() if job]


def _job_id_of_run(rec: dict[str, Any]) -> str | None:
    job = rec.get("job") or {}
    if job.get("id"):
        return str(job["id"])
    return recorded_job(rec).job_id  # the job that wrote the record (``123_4`` for an array task)


def states_of(path: str | Path) -> tuple[list[tracking.PointState], tracking.SchedulerAnswer]:
    """Return every point's state of the sweep or run at ``path`` (one scheduler call; the top-up's reader)."""
    return load_target(path).states()


class NotATarget(ClusterError):
    """A dir with neither sweep.yaml nor run.yaml (a command may name what it expected its own way)."""


def load_target(
    path: str | Path,
    *,
    run: Callable[[Path], Target] = RunTarget.load,
    sweep: Callable[[Path, sr.SweepRecord], Target] = SweepTarget.of_record,
    tune: Callable[[Path, sr.SweepRecord], Target] = TuneTarget.of_record,
) -> Target:
    """Return the sweep, tune or run at ``path``; raise NotATarget (a ClusterError) when it is none of these.

    The one place that decides which of the three a dir is; ``run``/``sweep``/``tune`` read each (the commands
    pass their subclasses' constructors: hpc_runner/cli/targets.py)."""
    path = Path(path)
    if (path / sr.SWEEP_FILE).is_file():
        record = sr.SweepRecord.load(path)
        return (tune if record.is_tune else sweep)(path, record)
    if (path / RUN_FILE).is_file():
        return run(path)
    raise NotATarget(
        "not a sweep dir or a run dir",
        where=str(path),
        expected=f"a folder with {sr.SWEEP_FILE} (hpc-runner sweep) or {RUN_FILE} (hpc-runner submit/run)",
    )

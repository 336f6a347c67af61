"""Open what ``status``/``collect``/``cancel``/``resume`` are pointed at: a sweep dir or one run dir."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpc_runner.errors import ClusterError
from hpc_runner.records.rundir import RUN_FILE, RunDir
from hpc_runner.scheduler.executor import LOCAL_JOB_ID, Executor, is_scheduler_job
from hpc_runner.scheduler.profiles import ClusterProfile
from hpc_runner.sweep import ledger as sr
from hpc_runner.sweep import states as tracking


@dataclass
class Target:
    """A sweep (many points) or a single submitted run (one point, index 0)."""

    path: Path
    kind: str  # "sweep" or "run"
    points: list[dict[str, Any]]
    record: sr.SweepRecord | None = None
    run_record: dict[str, Any] | None = None

    @property
    def param_ids(self) -> list[str]:
        """Return the swept ids (none for a single run)."""
        return self.record.param_ids if self.record else []

    def run_dir(self, point: dict[str, Any]) -> Path:
        """Return the run dir of a point."""
        return self.record.point_dir(point) if self.record else self.path

    @property
    def job_folder(self) -> Path:
        """Return submitit's folder pattern (``%A``/``%j`` still in it) for the jobs of this target."""
        return self.record.job_folder if self.record else self.path / sr.RUN_JOB_FOLDER

    def submitted_dates(self) -> list[str]:
        """Return when the jobs were submitted (for sacct's start time)."""
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
        from hpc_runner.scheduler.select import executor_for
        from hpc_runner.sweep.governor import profile_from_record

        if self.record is not None:
            return executor_for(profile_from_record(self.record))
        cluster = ((self.run_record or {}).get("job") or {}).get("cluster")
        recorded = cluster if isinstance(cluster, dict) else {}
        return executor_for(ClusterProfile(str(recorded.get("profile") or "recorded"), [],
                                           dict(recorded.get("settings") or {})))

    def states(self) -> tuple[list[tracking.PointState], tracking.SchedulerAnswer]:
        """Return every point's state from one scheduler call, with the cause of each failed one.

        Read-only: nothing is written. A tune's trials that no worker has claimed yet wait for one: PENDING
        while one of its workers is queued or running, NOT-STARTED once none is (``resume`` starts more)."""
        workers = self._worker_jobs()
        answer = self.executor().query(
            [p.get("job_id") for p in self.points] + workers, since=tracking._since(self.submitted_dates())
        )
        shared = self.shared_job_ids()
        packed_sweep = int(((self.record.data.get("pack") if self.record else None) or {}).get("points", 1)) > 1
        packed_sweep = packed_sweep or bool(workers)  # a tune's worker runs trial after trial, like a packed task
        alive = any(tracking.job_alive(answer, w) for w in workers)
        states = []
        for p in self.points:
            if self.record is not None and self.record.is_tune and p.get("trial") is None:
                states.append(tracking.unclaimed_trial(p, self.run_dir(p), alive))
            else:
                states.append(tracking.combine(p, self.run_dir(p), answer,
                                               packed=packed_sweep or p.get("job_id") in shared))
        tracking.recheck_requeued(states, answer)
        tracking.explain_failures(states, self.job_folder)
        return states, answer

    def _worker_jobs(self) -> list[str]:
        """Return the job ids of a tune's workers (none for a sweep or a run)."""
        if self.record is None or not self.record.is_tune:
            return []
        return [job for s in self.record.submissions() for job in (s.get("workers") or {}).values() if job]


def _job_id_of_run(rec: dict[str, Any]) -> str | None:
    job = rec.get("job") or {}
    if job.get("id"):
        return str(job["id"])
    slurm = rec.get("slurm") or {}
    if slurm.get("SLURM_ARRAY_JOB_ID") and slurm.get("SLURM_ARRAY_TASK_ID"):
        return f"{slurm['SLURM_ARRAY_JOB_ID']}_{slurm['SLURM_ARRAY_TASK_ID']}"
    return slurm.get("SLURM_JOB_ID")


def states_of(path: str | Path) -> tuple[list[tracking.PointState], tracking.SchedulerAnswer]:
    """Return every point's state of the sweep or run at ``path`` (one scheduler call; the top-up's reader)."""
    return load_target(path).states()


def load_target(path: str | Path) -> Target:
    """Return the sweep or run at ``path``; raise ClusterError when it is neither."""
    path = Path(path)
    if (path / sr.SWEEP_FILE).is_file():
        record = sr.SweepRecord.load(path)
        return Target(path, "sweep", record.points, record=record)
    if (path / RUN_FILE).is_file():
        rec = RunDir(path).record()
        job_id = _job_id_of_run(rec)
        if not job_id and rec.get("status") != sr.NOT_SUBMITTED:
            job_id = LOCAL_JOB_ID
        point = {"index": 0, "dir": ".", "params": {}, "job_id": job_id}
        if rec.get("status") == sr.NOT_SUBMITTED:
            point["job_id"] = None
        return Target(path, "run", [point], run_record=rec)
    raise ClusterError(
        "not a sweep dir or a run dir",
        where=str(path),
        expected=f"a folder with {sr.SWEEP_FILE} (hpc-runner sweep) or {RUN_FILE} (hpc-runner submit/run)",
    )

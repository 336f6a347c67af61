"""The job folder (job scripts, the job's arguments, its logs) is ``jobs/`` on every scheduler; a run dir or a sweep
made when it was ``slurm/`` still shows its status from there and resumes into it (jobs/ledger.py
``job_folder_of``, sweep.yaml's ``job_folder``). Against the in-memory cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hpc_runner.config.bundle_config import load_bundle_config
from hpc_runner.jobs import ledger as sr
from hpc_runner.jobs.states import failure_text
from hpc_runner.jobs.submit_run import submit_run
from hpc_runner.jobs.targets import load_target
from hpc_runner.scheduler.executor import JobRequest
from hpc_runner.scheduler.memory.executor import MemoryExecutor
from hpc_runner.scheduler.profiles import ClusterProfile
from hpc_runner.sweep.resume import plan_resume, resume_run, resume_sweep
from hpc_runner.sweep.spec import build_spec
from hpc_runner.sweep.submission import submit_sweep
from tests.sweep.test_logic_in_memory import SETTINGS, job_of, new_sweep

EXAMPLE = Path(__file__).resolve().parents[2] / "bundles" / "synthetic_seg"
PROFILE = ClusterProfile("mem", [], SETTINGS)


@pytest.fixture
def folders(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The job folder of every submission (the in-memory cluster keeps no files)."""
    seen: list[Path] = []
    submit = MemoryExecutor.submit

    def spy(self: MemoryExecutor, fn: Any, args: Any, request: JobRequest) -> Any:
        seen.append(request.folder)
        return submit(self, fn, args, request)

    monkeypatch.setattr(MemoryExecutor, "submit", spy)
    return seen


def _fail_with_log(cluster: Any, folder: Path, job_id: str, line: str) -> None:
    """End the job FAILED with ``line`` as the last error of its stderr log, where submitit writes it."""
    folder.mkdir(exist_ok=True)
    (folder / f"{job_id}_0_log.err").write_text(f"Traceback (most recent call last):\n{line}\n")
    cluster.finish(job_id, "FAILED", exit_code="1:0")


def test_a_new_run_and_a_new_sweep_use_jobs(make_cluster, tmp_path: Path, monkeypatch, folders) -> None:
    make_cluster()
    monkeypatch.chdir(tmp_path)
    cfg = load_bundle_config(EXAMPLE)
    run = submit_run(cfg, None, PROFILE, tmp_path / "run", preflight=False, log=lambda s: None)
    sweep = submit_sweep(cfg, None, build_spec(["seed=1,2"]), PROFILE, tmp_path / "sw", preflight=False,
                         log=lambda s: None)
    assert folders == [run.directory / "jobs", sweep.directory / "jobs"]
    assert sr.SweepRecord.load(sweep.directory).data["job_folder"] == "jobs" == sr.JOB_FOLDER
    assert load_target(run.directory).job_folder == run.directory / "jobs"  # none there yet (in memory): jobs/


def test_an_old_run_dir_with_slurm_shows_its_status_and_resumes_into_slurm(make_cluster, tmp_path: Path, monkeypatch,
                                                                         folders) -> None:
    cluster = make_cluster()
    monkeypatch.chdir(tmp_path)
    run = submit_run(load_bundle_config(EXAMPLE), None, PROFILE, tmp_path / "run", preflight=False, log=lambda s: None)
    old = run.directory / "slurm"  # what an earlier version made
    _fail_with_log(cluster, old, run.job_ids[0], "RuntimeError: the old job's own error")
    target = load_target(run.directory)
    assert target.job_folder == old and sr.job_folder_of(run.directory) == old
    states, _ = target.states()
    assert [s.state for s in states] == ["FAILED"]
    assert "RuntimeError: the old job's own error" in failure_text(states[0], target.job_logs)
    resume_run(target, PROFILE, preflight=False, log=lambda s: None)
    assert folders[-1] == old and not (run.directory / "jobs").exists()


def test_an_old_sweep_whose_record_says_slurm_shows_its_status_and_resumes_into_slurm(
        make_cluster, tmp_path: Path, folders) -> None:
    cluster = make_cluster()
    path = new_sweep(tmp_path, 2)
    with sr.locked(path) as ledger:  # a sweep.yaml of an earlier version
        ledger.data["job_folder"] = "slurm"
    _fail_with_log(cluster, path / "slurm", job_of(path, 1), "ValueError: point 1 failed")
    cluster.finish(job_of(path, 0))
    target = load_target(path)
    assert target.job_folder == path / "slurm"
    states, _ = target.states()
    assert [s.state for s in states] == ["COMPLETED", "FAILED"]
    assert "ValueError: point 1 failed" in failure_text(states[1], target.job_logs)
    resume_sweep(target, plan_resume(target), PROFILE, preflight=False, log=lambda s: None)
    assert folders[-1] == path / "slurm" and not (path / "jobs").exists()

"""``hpc-runner job FILE``: what a job script runs, and a command a user can run by hand (cli/job.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpc_runner.cli import main
from hpc_runner.scheduler import site_check
from hpc_runner.scheduler.executor import JOB_ENTRY

ENTRY = "hpc_runner.scheduler.site_check:run_site_check"


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[list]:
    """A listed job entry that records its arguments instead of probing a node."""
    seen: list[list] = []

    def fake(*args):
        seen.append(list(args))
        return None

    setattr(fake, JOB_ENTRY, True)
    monkeypatch.setattr(site_check, "run_site_check", fake)
    for name in ("SLURM_JOB_ID", "SLURM_ARRAY_TASK_ID", "JOB_ID", "SGE_TASK_ID", "PBS_JOBID", "LSB_JOBID"):
        monkeypatch.delenv(name, raising=False)
    return seen


def _args_file(folder: Path, name: str = "array-0123456789ab.json", function: str = ENTRY) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps({"function": function, "tasks": [["a", 0], ["b", 1], ["c", 2]]}))
    return path


def test_job_runs_the_task_named_by_hand(tmp_path: Path, calls: list) -> None:
    path = _args_file(tmp_path / "jobs")
    assert main(["job", str(path), "--task", "1"]) == 0
    assert calls == [["b", 1]]
    assert main(["job", str(tmp_path)]) == 0  # a run dir: its newest arguments file (task 0 by hand)
    assert calls[-1] == ["a", 0]


def test_job_takes_the_task_from_the_scheduler_in_a_job(tmp_path: Path, calls: list,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    path = _args_file(tmp_path / "jobs")
    monkeypatch.setenv("SLURM_JOB_ID", "41")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "2")
    monkeypatch.setenv("SUBMITIT_FOLDER", str(tmp_path))  # the job side sets it; restored after the test
    assert main(["job", str(path)]) == 0
    assert calls == [["c", 2]]


def test_job_refuses_an_unlisted_function_or_a_missing_task_with_exit_2(tmp_path: Path, calls: list,
                                                                         capsys: pytest.CaptureFixture) -> None:
    bad = _args_file(tmp_path, "job-1.json", function="os:system")
    assert main(["job", str(bad)]) == 2
    assert "not a function of hpc-runner a job may run" in capsys.readouterr().err
    good = _args_file(tmp_path / "other")
    assert main(["job", str(good), "--task", "7"]) == 2
    assert "no arguments for task 7" in capsys.readouterr().err
    assert main(["job", str(tmp_path / "empty")]) == 2 and calls == []

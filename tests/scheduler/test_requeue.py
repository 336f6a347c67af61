"""The job's own requeue after a stop signal, with stand-ins for squeue and scontrol that act as SLURM did."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hpc_runner.scheduler.slurm.requeue import requeue_current_job

JOB = {"SLURM_JOB_ID": "358", "SLURM_RESTART_COUNT": "0"}


@pytest.fixture
def slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``slurm(requeue_rc, restarts)``: squeue says RUNNING; ``scontrol requeue`` ends with ``requeue_rc`` (a
    negative one: killed by that signal, as SLURM's own SIGTERM to the job's processes does); ``scontrol show
    job`` says ``Restarts=restarts``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    def make(requeue_rc: int, restarts: int) -> None:
        (bin_dir / "squeue").write_text("#!/bin/sh\necho RUNNING\n")
        end = f"kill -{-requeue_rc} $$" if requeue_rc < 0 else f"exit {requeue_rc}"
        (bin_dir / "scontrol").write_text(
            '#!/bin/sh\nif [ "$1" = requeue ]; then ' + end + "; fi\n"
            f'echo "JobId=358 JobName=x JobState=RUNNING Restarts={restarts} BatchFlag=1"\n')
        for f in bin_dir.iterdir():
            f.chmod(0o755)

    return make


def test_a_requeue_whose_scontrol_is_killed_by_slurms_own_sigterm_still_counts(slurm) -> None:
    slurm(-15, restarts=1)
    assert requeue_current_job(JOB) == "358"


def test_a_refused_requeue_is_none(slurm) -> None:
    slurm(1, restarts=0)
    assert requeue_current_job(JOB) is None
    slurm(-15, restarts=0)  # killed, and SLURM did not requeue it either
    assert requeue_current_job(JOB) is None


def test_an_accepted_requeue_gives_the_job(slurm) -> None:
    slurm(0, restarts=0)
    assert requeue_current_job(JOB) == "358"

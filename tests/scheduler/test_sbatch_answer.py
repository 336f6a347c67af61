"""sbatch's answer to a command job (scheduler/slurm/command_job.py): a job id in other digits than 0-9, or none,
from an sbatch that exited 0 is an answer that could not be read, not a refusal; nothing is left behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hpc_runner.errors import ClusterError
from hpc_runner.scheduler.slurm.command_job import args_file_for, submit_command_job


def _sbatch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, out: str, status: int = 0) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "said").write_text(out, encoding="utf-8")
    script = bin_dir / "sbatch"
    script.write_text(f"#!/bin/sh\ncat '{bin_dir / 'said'}'\nexit {status}\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")


@pytest.mark.parametrize("out", ["Submitted batch job ١\n", "Submitted batch job ١٢\n", "", "ok\n"])
def test_an_answer_without_a_job_id_in_ascii_digits_could_not_be_read(tmp_path: Path, monkeypatch, out: str) -> None:
    _sbatch(tmp_path, monkeypatch, out)
    args_file = args_file_for(tmp_path / "jobs")
    with pytest.raises(ClusterError) as err:
        submit_command_job(args_file, "#!/bin/sh\n", "{}", 2, True)
    text = err.value.paragraph()
    assert "sbatch's answer could not be read" in text and "refused" not in text, text
    assert list((tmp_path / "jobs").iterdir()) == []  # the arguments file and the script are gone


def test_a_refusal_is_still_named_a_refusal_and_a_plain_answer_is_read(tmp_path: Path, monkeypatch) -> None:
    _sbatch(tmp_path, monkeypatch, "sbatch: error: Batch job submission failed: Invalid account\n", 1)
    with pytest.raises(ClusterError, match=r"sbatch refused the submission: .*Invalid account"):
        submit_command_job(args_file_for(tmp_path / "jobs"), "#!/bin/sh\n", "{}", 1, False)
    (tmp_path / "bin" / "said").write_text("Submitted batch job 4242\n")
    (tmp_path / "bin" / "sbatch").write_text(f"#!/bin/sh\ncat '{tmp_path / 'bin' / 'said'}'\n")
    jobs = submit_command_job(args_file_for(tmp_path / "jobs"), "#!/bin/sh\n", "{}", 2, True)
    assert [j.job_id for j in jobs] == ["4242_0", "4242_1"]

"""Every backend's job script says how to run its job by hand (scheduler/batch_script.py ``by_hand_line``):
``# by hand: hpc-runner job FILE [--task 0]``. Read by bash as written, that command names the very arguments file
the script's command runs (cli/job.py ``arguments_file``), not the newest one of its folder (a sweep's top-ups and
retries add more), whatever the run dir's path holds (spaces, quotes, ``$()``); a path with a newline cannot end
the comment.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from hpc_runner.cli.job import arguments_file
from hpc_runner.errors import ClusterError
from hpc_runner.scheduler.batch_script import BY_HAND, by_hand_line
from hpc_runner.scheduler.executor import JobRequest
from hpc_runner.scheduler.gridengine.job_script import job_script as sge_script
from hpc_runner.scheduler.gridengine.settings import GridEngineSettings
from hpc_runner.scheduler.job_arguments import JOB_COMMAND
from hpc_runner.scheduler.lsf.job_script import job_script as lsf_script
from hpc_runner.scheduler.lsf.settings import LsfSettings
from hpc_runner.scheduler.pbs.job_script import job_script as pbs_script
from hpc_runner.scheduler.pbs.settings import PbsSettings
from hpc_runner.scheduler.profile import ClusterProfile
from hpc_runner.scheduler.slurm.executor import SlurmExecutor

HOSTILE = "run 'a' \"b\" $(touch PWNED) `touch PWNED` ; x#y"
PYTHON = "/opt/venv/bin/python"


def _slurm(jobs: Path, tasks: int) -> str:
    executor = SlurmExecutor(ClusterProfile("t", [], {"executor": "slurm", "python": PYTHON}))
    return executor.script(JobRequest(job_name="t", folder=jobs, describe="hpc-runner: a test"), tasks)


def _batch(kind: str):
    def write(jobs: Path, tasks: int) -> str:
        args = jobs / f"{'array' if tasks > 1 else 'job'}-0123456789ab.json"
        command = [PYTHON, *JOB_COMMAND, str(args)]
        size = tasks if tasks > 1 else None
        if kind == "sge":
            return sge_script(GridEngineSettings(), job_name="t", log_folder=str(jobs), command=command,
                              array_size=size, describe="hpc-runner: a test")
        if kind == "pbs":
            return pbs_script(PbsSettings(), job_name="t", log_folder="/scratch/logs", command=command,
                              array_size=size)
        return lsf_script(LsfSettings(), job_name="t", log_folder="/scratch/logs", command=command, array_size=size)
    return write


BACKENDS = {"slurm": _slurm, "sge": _batch("sge"), "pbs": _batch("pbs"), "lsf": _batch("lsf")}


def _as_bash_reads_it(command: str, cwd: Path) -> list[str]:
    """The words bash gives ``command`` (the by-hand line after ``# by hand: ``), run as written."""
    out = subprocess.run(["bash", "-c", f"set -- {command}\nprintf '%s\\0' \"$@\""], cwd=cwd, capture_output=True,
                         check=True)
    return out.stdout.decode().split("\0")[:-1]


@pytest.mark.parametrize("tasks", [1, 4])
@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_the_by_hand_line_runs_the_arguments_file_the_script_runs(tmp_path, backend, tasks) -> None:
    if backend == "sge":  # Grid Engine's log folder (where the arguments file lies) is refused with such a path
        with pytest.raises(ClusterError, match="cannot be written in a #\\$ line"):
            BACKENDS[backend](tmp_path / HOSTILE / "jobs", tasks)
    jobs = tmp_path / ("run-1" if backend == "sge" else HOSTILE) / "jobs"
    jobs.mkdir(parents=True)
    script = BACKENDS[backend](jobs, tasks)
    lines = script.splitlines()
    by_hand = [line for line in lines if line.startswith(BY_HAND)]
    assert len(by_hand) == 1 and lines.index(by_hand[0]) in (1, 2), script  # in the header, beside what runs
    ran = Path(shlex.split(lines[-1])[-1])  # the file the job's command names
    assert ran.parent == jobs
    ran.write_text("{}")
    newer = jobs / "array-fedcba987654.json"  # a later top-up's file: the by-hand line still names its own
    newer.write_text("{}")
    os.utime(newer, (ran.stat().st_mtime + 10, ran.stat().st_mtime + 10))
    words = _as_bash_reads_it(by_hand[0][len(BY_HAND):], tmp_path)
    assert words[:2] == ["hpc-runner", "job"]
    assert words[3:] == (["--task", "0"] if tasks > 1 else [])
    assert arguments_file(words[2]) == str(ran)
    assert not (tmp_path / "PWNED").exists()


def test_a_run_dir_with_a_newline_cannot_end_the_comment() -> None:
    with pytest.raises(ClusterError, match="control character"):
        by_hand_line("/scratch/a\necho pwned/jobs/array-1.json", 4)
    line = by_hand_line("/scratch/a b/jobs/job-1.json")
    assert line == "# by hand: hpc-runner job '/scratch/a b/jobs/job-1.json'"


def test_a_script_that_runs_no_arguments_file_has_no_by_hand_line() -> None:
    script = sge_script(GridEngineSettings(), job_name="t", log_folder="/logs", command=["python", "a b"])
    assert BY_HAND not in script

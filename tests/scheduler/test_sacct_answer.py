"""What sacct and squeue answer about jobs (scheduler/slurm/accounting.py), and what sbatch's refusal is, when the
answer is hostile: an answer is checked before it is read, never read into a traceback.

- sacct's answer without a header line naming JobID and State is no answer: status asks squeue, as when sacct
  fails, and says why (the fuzz harness's ``status --json``, ``resume --dry-run`` and ``cancel`` of a sweep
  crashed with KeyError 'JobID' in submitit's reader);
- a row of another width than the header, or whose job id is no SLURM job id in digits 0-9, is left out: its job is
  not known (UNKNOWN);
- a pending array's range is expanded to the tasks asked about, not to whatever size the answer names;
- a "no SLURM controller answers" error is no limit refusal, whatever the controller's commands printed (the
  governor backed off 1 + 2 + 4 + 8 s on one: `scontrol ping` had printed "MaxJobCount"), and neither is an sbatch
  answer that could not be read.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from hpc_runner.errors import ClusterError
from hpc_runner.scheduler.executor import JobRequest
from hpc_runner.scheduler.job_state import FROM_ACCOUNTING, FROM_QUEUE
from hpc_runner.scheduler.job_status import JobState
from hpc_runner.scheduler.profiles import ClusterProfile
from hpc_runner.scheduler.slurm import accounting, cluster_info
from hpc_runner.scheduler.slurm.accounting import parse_queue, parse_sacct, query_scheduler
from hpc_runner.scheduler.slurm.command_job import args_file_for, submit_command_job
from hpc_runner.scheduler.slurm.executor import SlurmExecutor
from hpc_runner.scheduler.slurm.limits import is_limit_refusal
from hpc_runner.scheduler.slurm.resource_check import unanswered

HEADER = "JobID|State|Elapsed|ExitCode"


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``fake(command, stdout_bytes, status=0)``: ``command`` on PATH prints those bytes and exits ``status``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(cluster_info, "_CACHE", {})

    def make(command: str, out: bytes, status: int = 0) -> None:
        (bin_dir / f"{command}.out").write_bytes(out)
        script = bin_dir / command
        script.write_text(f"#!/bin/sh\ncat '{bin_dir / command}.out'\nexit {status}\n")
        script.chmod(0o755)

    return make


# --- sacct's answer is checked before it is read


@pytest.mark.parametrize("text", [
    "\ufffd\ufffd_0|RUNNING|0:0\n\ufffd\ufffd_1|\ufffd\ufffd|\ufffd\ufffd\n",  # the fuzz case, decoded
    "_0|RUNNING|0:0\n_1||\n",
    "4242_0|RUNNING|0:0\n4242_1|COMPLETED|0:0\n",  # rows of jobs, but no header line naming the fields
    "JobID|Elapsed\n4242_0|00:00:01\n",  # a header without State
    "\x1b[31m\n",
], ids=["non-utf8", "empty-ids", "rows-only", "no-state", "ansi"])
def test_an_answer_without_its_header_line_is_a_cluster_error_naming_sacct(text: str) -> None:
    with pytest.raises(ClusterError) as err:
        parse_sacct(text)
    paragraph = err.value.paragraph()
    assert "sacct" in paragraph and "JobID" in paragraph and "\x1b" not in paragraph, paragraph


def test_status_asks_squeue_when_sacct_answers_without_a_header(fake) -> None:
    fake("sacct", b"\xff\xfe_0|RUNNING|0:0\n\xff\xfe_1|\xff\xfe|\xff\xfe\n")
    fake("squeue", b"4242_0|RUNNING\n")
    answer = query_scheduler(["4242_0", "4242_1"])
    assert answer.source == FROM_QUEUE and answer.calls == 2
    assert answer.statuses["4242_0"].state is JobState.RUNNING and "4242_1" not in answer.statuses
    assert "sacct" in answer.error and "header" in answer.error, answer.error


def test_an_empty_answer_or_a_header_alone_says_nothing_of_any_job() -> None:
    assert parse_sacct("").statuses == {} and parse_sacct(HEADER + "\n").statuses == {}


def test_rows_of_another_width_or_with_a_job_id_in_other_digits_are_left_out() -> None:
    answer = parse_sacct(f"{HEADER}\n12|COMPLETED|00:00:01|0:0\n13|FAILED|00:00:01\n14|FAILED|00:00:01|1:0|x\n"
                         "4242_\u0661|COMPLETED|00:00:01|0:0\n\ufffd|COMPLETED|00:00:01|0:0\n"
                         "15.batch|COMPLETED|00:00:01|0:0\n")
    assert list(answer.statuses) == ["12"] and answer.statuses["12"].state is JobState.COMPLETED
    assert parse_queue("4242_\u0661|RUNNING\n4242_2|RUNNING|x\n4242_3|PENDING\n").statuses.keys() == {"4242_3"}


def test_a_pending_range_is_expanded_to_the_tasks_asked_about_and_never_without_bound(monkeypatch) -> None:
    text = f"{HEADER}\n7_[0-3,9%2]|PENDING|00:00:00|0:0\n"
    assert sorted(parse_sacct(text).statuses) == ["7_0", "7_1", "7_2", "7_3", "7_9"]
    assert sorted(parse_sacct(text, wanted=["7_2", "7_5", "7_9", "8_0"]).statuses) == ["7_2", "7_9"]
    assert len(parse_sacct(text, wanted=["7"]).statuses) == 5  # the array itself asked about: every task
    start = time.monotonic()
    huge = parse_sacct(f"{HEADER}\n7_[0-99999999]|PENDING|00:00:00|0:0\n", wanted=["7_0", "7_99999999"])
    assert sorted(huge.statuses) == ["7_0", "7_99999999"] and time.monotonic() - start < 1
    monkeypatch.setattr(accounting, "MAX_TASKS", 1000)  # no task named: at most MAX_TASKS of the answer's ranges
    assert len(parse_sacct(f"{HEADER}\n7_[0-99999999]|PENDING|00:00:00|0:0\n8_[0-5]|PENDING|0|0\n").statuses) == 1000
    assert sorted(parse_queue("7_[1-2]|PENDING\n", wanted=["7_2"]).statuses) == ["7_2"]


def test_a_sane_answer_is_read_as_before(fake) -> None:
    fake("sacct", f"{HEADER}\n4242_0|COMPLETED|00:00:05|0:0\n4242_0.batch|COMPLETED|00:00:05|0:0\n"
                  "4242_1|FAILED|00:00:03|1:0\n4242_[2-3]|PENDING|00:00:00|0:0\n".encode())
    answer = query_scheduler(["4242_0", "4242_1", "4242_2", "4242_3"])
    assert answer.source == FROM_ACCOUNTING and answer.error is None
    assert {j: s.state for j, s in answer.statuses.items()} == {
        "4242_0": JobState.COMPLETED, "4242_1": JobState.FAILED, "4242_2": JobState.PENDING,
        "4242_3": JobState.PENDING}
    assert answer.statuses["4242_1"].exit_code == 1 and answer.usage["4242_0"].elapsed_s == 5


# --- a controller that does not answer is no submit limit, whatever its commands printed

HOSTILE_CONFIG = (b"MaxArraySize = \x1b[31m\nClusterName = fuzz\nAccountingStorageEnforce = limits\n"
                  b"MaxJobCount = \x1b[31m\n")


def _profile(tmp_path: Path) -> ClusterProfile:
    return ClusterProfile("fuzzslurm", [str(tmp_path / "fuzzslurm.yaml")],
                          {"executor": "slurm", "time": 10, "cpus_per_task": 1, "mem_gb": 1})


def _task(x: int) -> int:
    return x


@pytest.mark.parametrize("config", [HOSTILE_CONFIG, b"Socket timed out on send/recv operation\n", b""])
def test_no_controller_is_no_limit_refusal_whatever_scontrol_printed(fake, tmp_path: Path, config: bytes) -> None:
    fake("scontrol", config, 1)
    fake("sbatch", b"Submitted batch job \x1b[31m\n", 1)
    executor = SlurmExecutor(_profile(tmp_path))
    silent = unanswered(executor.profile)
    assert silent is not None and "no SLURM controller answers" in silent.message
    assert not is_limit_refusal(silent.message) and not executor.is_limit_refusal(silent.message), silent.message
    args: Any = [[1, 2]]
    with pytest.raises(ClusterError, match="no SLURM controller answers") as err:
        executor.submit(_task, args, JobRequest(job_name="j", folder=tmp_path / "jobs"))
    assert not executor.is_limit_refusal(err.value.message)  # the governor's back-off is not for this


def test_an_sbatch_answer_that_could_not_be_read_is_no_limit_refusal_whatever_it_printed(fake, tmp_path) -> None:
    fake("sbatch", b"Submitted batch job MaxJobCount\n")  # exit 0: a job may be queued, so no second try
    with pytest.raises(ClusterError, match="could not be read") as err:
        submit_command_job(args_file_for(tmp_path / "jobs"), "#!/bin/sh\n", "{}", 2, True)
    assert not is_limit_refusal(err.value.message), err.value.message


def test_a_limit_refusal_is_still_one() -> None:
    assert is_limit_refusal("sbatch refused the submission: sbatch: error: QOSMaxSubmitJobPerUserLimit")
    assert is_limit_refusal("sbatch: error: Batch job submission failed: Socket timed out on send/recv operation")

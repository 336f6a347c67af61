"""Point states and causes from real run dirs and a real sacct answer (no SLURM needed).

The run dirs are written with RunDir as the runner writes them; the scheduler's answer is the text
``sacct -X -D --parsable2 -o JobID,State,Elapsed,ExitCode`` prints, parsed by the same code status uses.
"""

from __future__ import annotations

import getpass
import importlib
import os
import sys
from pathlib import Path

import pytest

from hpc_runner.jobs import causes
from hpc_runner.jobs import ledger as sr
from hpc_runner.jobs.states import (
    DONE,
    NOT_STARTED,
    PRUNED,
    WAITING,
    cause_counts,
    combine,
    explain_failures,
)
from hpc_runner.jobs.targets import SweepTarget
from hpc_runner.records.rundir import RunDir
from hpc_runner.scheduler.executor import SchedulerAnswer
from hpc_runner.scheduler.job_logs import LogLine
from hpc_runner.scheduler.job_state import FROM_ACCOUNTING
from hpc_runner.scheduler.job_status import JobState, JobStatus
from hpc_runner.scheduler.slurm.accounting import parse_sacct, to_status
from hpc_runner.scheduler.slurm.job_logs import slurm_job_logs

HEADER = "JobID|State|Elapsed|ExitCode"


def sacct(*rows: str) -> SchedulerAnswer:
    """The parsed answer of one ``sacct -X -D --parsable2`` call printing ``rows``."""
    return parse_sacct("\n".join([HEADER, *rows]) + "\n")


def run_dir(tmp_path: Path, name: str, **record) -> Path:
    """A point's run dir with a run.yaml holding ``record`` (none when ``record`` is empty)."""
    path = tmp_path / name
    path.mkdir(parents=True)
    if record:
        RunDir(path).write_yaml("run.yaml", {"entry": "run", **record})
    return path


def point(index: int, job_id: str | None, **extra) -> dict:
    return {"index": index, "dir": f"points/{index:04d}", "params": {"lr": index}, "job_id": job_id, **extra}


def states_of(tmp_path: Path, records: list[dict], job_ids: list[str | None], answer: SchedulerAnswer, packed: bool):
    out = []
    for i, (rec, job) in enumerate(zip(records, job_ids, strict=True)):
        out.append(combine(point(i, job), run_dir(tmp_path, f"p{i}", **rec), answer, packed=packed))
    explain_failures(out, tmp_path / "jobs")
    return out


ERROR = {"type": "ValueError", "message": "batch_size should be a positive integer value", "id": "train_loader",
         "where": "/b/scripts/data.py:12", "config_file": "/s/points/0001/config.yaml:30"}


def test_unpacked_points_take_the_scheduler_state_as_before(tmp_path):
    answer = sacct("40_0|COMPLETED|00:00:09|0:0", "40_1|FAILED|00:00:04|1:0", "40_2|RUNNING|00:00:03|0:0",
                   "40_[3-4]|PENDING|00:00:00|0:0")
    records = [{"status": "completed"}, {"status": "failed", "error": ERROR}, {"status": "running"}, {}, {}]
    states = states_of(tmp_path, records, ["40_0", "40_1", "40_2", "40_3", "40_4"], answer, packed=False)
    assert [s.state for s in states] == [DONE, "FAILED", "RUNNING", "PENDING", "PENDING"]
    assert [s.source for s in states] == [FROM_ACCOUNTING] * 5
    assert [s.cause_kind for s in states] == [None, "ERROR", None, None, None]
    cause = states[1].cause
    assert (cause.error_type, cause.config_id, cause.where) == ("ValueError", "train_loader", "/b/scripts/data.py:12")
    assert "batch_size should be a positive integer value" in cause.text() and "/b/scripts/data.py:12" in cause.text()


def test_packed_points_of_a_running_task_are_completed_running_or_pending_by_their_own_run_yaml(tmp_path):
    answer = sacct("41_0|RUNNING|00:01:00|0:0")
    records = [{"status": "completed"}, {"status": "running"}, {"status": "prepared"}, {}]
    states = states_of(tmp_path, records, ["41_0"] * 4, answer, packed=True)
    assert [s.state for s in states] == [DONE, "RUNNING", "PENDING", "PENDING"]
    assert not any(s.failed for s in states) and [s.active for s in states] == [False, True, True, True]


@pytest.mark.parametrize("task", ["RUNNING", "COMPLETED"])
def test_a_tune_trial_its_pruner_stopped_is_pruned_and_finished_whatever_its_workers_state(tmp_path, task):
    """Tune trials share their worker's job id; a pruned one is done, neither pending nor never started."""
    answer = sacct(f"43_0|{task}|00:01:00|0:0")
    records = [{"status": "pruned"}, {"status": "completed"}]
    states = states_of(tmp_path, records, ["43_0"] * 2, answer, packed=True)
    assert [s.state for s in states] == [PRUNED, DONE]
    assert [(s.active, s.failed) for s in states] == [(False, False), (False, False)]


def test_packed_points_of_a_timed_out_task_keep_their_results_and_the_rest_timed_out(tmp_path):
    answer = sacct("42_0|TIMEOUT|00:01:31|0:0")
    records = [{"status": "completed"}, {"status": "failed", "error": ERROR}, {"status": "running"}, {}]
    states = states_of(tmp_path, records, ["42_0"] * 4, answer, packed=True)
    assert [s.state for s in states] == [DONE, "FAILED", "TIMEOUT", "TIMEOUT"]
    # the point that failed on its own keeps its own cause, not the task's
    assert [s.cause_kind for s in states] == [None, "ERROR", "TIMEOUT", "TIMEOUT"]
    assert cause_counts(states) == {"TIMEOUT": 2, "ERROR": 1}


def test_packed_point_that_a_completed_task_never_ran_is_not_started_and_resubmittable(tmp_path):
    answer = sacct("43_0|COMPLETED|00:00:20|0:0")
    records = [{"status": "completed"}, {"status": "completed"}, {"status": "prepared"}, {}]
    states = states_of(tmp_path, records, ["43_0"] * 4, answer, packed=True)
    assert [s.state for s in states] == [DONE, DONE, NOT_STARTED, NOT_STARTED]
    assert [s.cause_kind for s in states] == [None] * 4
    # the same points unpacked: the task's COMPLETED is the point's
    same = states_of(tmp_path / "unpacked", records, ["43_0", "43_1", "43_2", "43_3"],
                     sacct(*(f"43_{i}|COMPLETED|00:00:20|0:0" for i in range(4))), packed=False)
    assert [s.state for s in same] == [DONE] * 4


def test_packed_point_stopped_at_a_checkpoint_and_not_requeued_is_preempted(tmp_path):
    answer = sacct("44_0|FAILED|00:00:20|1:0")
    records = [{"status": "preempted", "checkpoint": "/c/ckpt_8.pt"}, {"status": "completed"}]
    states = states_of(tmp_path, records, ["44_0"] * 2, answer, packed=True)
    assert [s.state for s in states] == ["PREEMPTED", DONE]
    assert states[0].cause_kind == "PREEMPTED" and "ckpt_8.pt" in states[0].cause.text()


def test_a_requeued_job_has_one_sacct_record_per_attempt_and_status_counts_them(tmp_path):
    answer = sacct("45_0|REQUEUED|00:00:04|0:0", "45_0|PREEMPTED|00:00:03|0:0", "45_0|COMPLETED|00:00:09|0:0",
                   "45_1|COMPLETED|00:00:08|0:0")
    states = states_of(tmp_path, [{}, {}], ["45_0", "45_1"], answer, packed=False)
    assert [s.state for s in states] == [DONE, DONE]  # the last record is the current attempt
    assert [s.requeues for s in states] == [2, 0]


def test_run_yaml_requeue_counter_counts_for_a_failed_point(tmp_path):
    answer = sacct("46_0|FAILED|00:00:04|1:0")
    record = {"status": "failed", "error": ERROR, "slurm": {"SLURM_RESTART_COUNT": "3"}}
    (state,) = states_of(tmp_path, [record], ["46_0"], answer, packed=False)
    assert state.requeues == 3


def test_a_waiting_point_is_waiting_not_failed_and_status_wait_keeps_waiting(tmp_path):
    p = combine(point(0, None, submit=sr.WAITING), tmp_path, SchedulerAnswer({}, "none"))
    assert p.state == WAITING and not p.failed and p.active
    q = combine(point(1, None, submit=sr.NOT_SUBMITTED), tmp_path, SchedulerAnswer({}, "none"))
    assert q.state == "NOT-SUBMITTED" and q.failed


def test_points_sharing_a_job_id_are_packed(tmp_path):
    points = [point(0, "47_0"), point(1, "47_0"), point(2, "47_1"), point(3, None), point(4, "local"),
              point(5, "local")]
    record = sr.SweepRecord(tmp_path, {"kind": sr.KIND}, points)
    assert SweepTarget(tmp_path, points, record=record).shared_job_ids() == {"47_0"}


@pytest.mark.parametrize(
    ("state", "sacct_state", "exit_code", "record", "log", "kind"),
    [
        ("OUT_OF_MEMORY", "OUT_OF_MEMORY", "0:125", {}, None, "OUT_OF_MEMORY"),
        ("TIMEOUT", "TIMEOUT", "0:0", {"status": "preempted", "checkpoint": "c.pt"}, None, "TIMEOUT"),
        ("DEADLINE", "DEADLINE", "0:0", {}, None, "TIMEOUT"),
        ("NODE_FAIL", "NODE_FAIL", "0:0", {"status": "running"}, None, "NODE_FAIL"),
        ("PREEMPTED", "PREEMPTED", "0:0", {}, None, "PREEMPTED"),
        ("FAILED", "FAILED", "2:0", {}, "usage: hpc-runner run ...", "BAD_INPUT"),
        ("FAILED", "FAILED", "1:0", {}, "slurmstepd: error: *** JOB 9 ON n CANCELLED AT x DUE TO TIME LIMIT ***",
         "TIMEOUT"),
        ("FAILED", "FAILED", "1:0", {}, "hpc_runner.errors.ConfigError: at id 'x': bad.", "BAD_INPUT"),
        ("FAILED", "FAILED", "1:0", {}, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB",
         "OUT_OF_MEMORY"),
        ("FAILED", "FAILED", "1:0", {}, "KeyError: 'image'", "ERROR"),
        ("FAILED", "FAILED", "1:0",
         {"status": "failed", "error": {"type": "RuntimeError", "message": "Failed to evaluate",
                                        "root_type": "torch.OutOfMemoryError",
                                        "root_message": "CUDA out of memory. Tried to allocate 20.00 GiB"}},
         None, "OUT_OF_MEMORY"),
        ("FAILED", "FAILED", "1:0",
         {"status": "failed", "error": {"type": "MemoryError", "message": ""}}, None, "OUT_OF_MEMORY"),
        ("FAILED", "FAILED", "1:0",
         {"status": "failed", "error": {"type": "RuntimeError", "message": "Failed to evaluate",
                                        "root_type": "scripts.data.MissingInput", "root_message": "no x.nii",
                                        "user_error": True}}, None, "BAD_INPUT"),
        ("CANCELLED", None, None, {"status": "interrupted"}, None, "CANCELLED"),
        # stopped at a checkpoint, then `scontrol requeue` was refused (--no-requeue): RunFailed, exit 1
        ("FAILED", "FAILED", "1:0", {"status": "preempted", "checkpoint": "c.pt"}, "RunFailed: stopped", "PREEMPTED"),
        ("COMPLETED", "COMPLETED", "0:0", {}, None, None),
        ("RUNNING", "RUNNING", "0:0", {}, None, None),
    ],
)
def test_each_cause_comes_from_sacct_and_the_run_record_together(state, sacct_state, exit_code, record, log, kind):
    status = to_status("9", {"State": sacct_state, "ExitCode": exit_code}) if sacct_state else None
    line = LogLine(log, slurm_job_logs(None).state_of(log)) if log else None  # as the SLURM backend reads its logs
    cause = causes.decide(status.state.value if status else state, status, record, line)
    assert (cause.kind if cause else None) == kind


def test_cancelled_by_names_the_user_who_cancelled(tmp_path):
    answer = sacct(f"48_0|CANCELLED by {os.getuid()}|00:00:04|0:15")
    (state,) = states_of(tmp_path, [{"status": "preempted"}], ["48_0"], answer, packed=False)
    assert state.cause_kind == "CANCELLED" and state.cause.by == getpass.getuser()
    assert state.cause.text() == f"cancelled by {getpass.getuser()}"


def test_the_log_is_read_only_when_sacct_and_run_yaml_do_not_tell(tmp_path):
    calls = []

    def log() -> str:
        calls.append(1)
        return "KeyError: 'image'"

    timeout, failed = JobStatus("9", JobState.TIMEOUT, exit_code=0), JobStatus("9", JobState.FAILED, exit_code=1)
    assert causes.decide("TIMEOUT", timeout, {}, log).kind == "TIMEOUT" and not calls
    assert causes.decide("FAILED", failed, {"status": "failed", "error": ERROR}, log).kind == "ERROR"
    assert not calls
    assert causes.decide("FAILED", failed, {}, log).error_type == "KeyError" and calls == [1]


def test_failure_record_places_the_error_in_the_bundle_code_and_names_the_root_cause(tmp_path):
    from hpc_runner.engine.runner import failure_record
    from hpc_runner.errors import ConfigError

    # a package name no other test imports: a cached ``scripts`` module from another bundle would shadow it
    package = f"bundle_scripts_{tmp_path.name.replace('-', '_')}"
    script = tmp_path / package / "data.py"
    script.parent.mkdir()
    script.write_text("import json\n\ndef load(text):\n    return json.loads(text)\n")
    sys.path.insert(0, str(tmp_path))
    try:
        load = importlib.import_module(f"{package}.data").load  # the bundle's code, written above

        try:
            try:
                load("{not json")
            except ValueError as inner:
                raise RuntimeError("Failed to evaluate $@loader") from inner
        except RuntimeError as exc:
            rec = failure_record(exc, "train_loader")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(f"{package}.data", None)
        sys.modules.pop(package, None)
    # json's own frames are standard library: the innermost frame outside it is the bundle's line 4
    assert rec["where"] == f"{script}:4"
    assert rec["type"] == "RuntimeError" and rec["root_type"] == "json.decoder.JSONDecodeError"
    assert rec["id"] == "train_loader" and "user_error" not in rec

    try:
        raise RuntimeError("Failed to evaluate") from ConfigError("no such file", where="/d/config.yaml:7")
    except RuntimeError as exc:
        bad = failure_record(exc, "dataset")
    assert bad["user_error"] is True and bad["config_file"] == "/d/config.yaml:7"
    assert causes.decide("FAILED", JobStatus("9", JobState.FAILED, exit_code=1),
                         {"status": "failed", "error": bad}).kind == "BAD_INPUT"


def test_resume_offers_exactly_the_causes():
    from hpc_runner.cli.resume import CAUSES

    assert CAUSES == causes.CAUSES

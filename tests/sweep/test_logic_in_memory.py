"""The sweep's logic against the in-memory cluster, through the functions the CLI calls: the governor keeps within
the QOS submit limit and tops up as jobs end, retries are bounded, causes come from the scheduler's answer,
right-size reads its usage figures, and cancel stops what is queued and what waits. No job runs: the test ends
each one, in milliseconds, where tests/slurm/ waits for a real SLURM."""

from __future__ import annotations

import os
import pwd
from pathlib import Path
from typing import Any

from hpc_runner.jobs import ledger as sr
from hpc_runner.jobs.cancel import cancel_target
from hpc_runner.jobs.governor import Backoff, send_points
from hpc_runner.jobs.states import cause_counts
from hpc_runner.jobs.submitted import Submitted
from hpc_runner.jobs.targets import load_target
from hpc_runner.jobs.task import run_sweep_task
from hpc_runner.scheduler.executor import JobRequest
from hpc_runner.scheduler.job_state import FROM_ACCOUNTING
from hpc_runner.scheduler.memory.executor import MemoryCluster
from hpc_runner.scheduler.profiles import ClusterProfile
from hpc_runner.scheduler.select import executor_for
from hpc_runner.sweep.resume import record_retry_rules
from hpc_runner.sweep.right_size import for_target, suggested_for, suggested_settings
from hpc_runner.sweep.submission import submit_points, top_up
from tests.jobs.test_governor import _sweep

SETTINGS = {"executor": "memory", "time": 10, "mem_gb": 1}


def new_sweep(tmp_path: Path, n: int, retry: dict[str, str] | None = None, **settings: Any) -> Path:
    """A sweep of ``n`` points submitted as ``hpc-runner sweep`` submits them (submit_points, under the lock)."""
    path = _sweep(tmp_path / "sw", n)
    if retry:
        record_retry_rules(path, retry)
    executor = executor_for(ClusterProfile("mem", [], {**SETTINGS, **settings}))
    with sr.locked(path) as ledger:
        submit_points(ledger, range(n), executor, entry=None, reason="sweep", log=lambda line: None)
        ledger.data["state"] = "submitted"
    return path


def job_of(path: Path, index: int) -> str:
    """Return the job id the ledger gives point ``index`` now."""
    return sr.SweepRecord.load(path).points[index]["job_id"]


def point_of(cluster: MemoryCluster, job_id: str) -> int:
    """Return the sweep point an array task runs (its task arguments: sweep dir, points, entry, ...)."""
    (point,) = cluster.job(job_id).args[1]
    return point["index"]


def test_the_governor_never_queues_past_the_qos_limit_and_fills_each_freed_slot_at_the_top_up(
        make_cluster, tmp_path) -> None:
    cluster = make_cluster(max_submit=4)
    path = new_sweep(tmp_path, 10)
    record = sr.SweepRecord.load(path)
    assert len(cluster.queued()) == 4 and [p["submit"] for p in record.points].count(sr.WAITING) == 6
    assert record.submissions()[0]["limit"].startswith("0 free submit slot(s): MaxSubmitJobsPerUser=4")
    cluster.advance(0)
    for _ in range(6):  # one job ends, the top-up (status's) submits one waiting point into its slot
        cluster.finish(next(j for j in cluster.queued() if cluster.state(j) == "RUNNING"))
        assert top_up(path, log=lambda line: None) == 1
        assert len(cluster.queued()) == 4
        cluster.advance(1)
    assert top_up(path) == 0  # nothing waits: no lock, no sbatch
    for job_id in cluster.queued():
        cluster.finish(job_id)
    states, _ = load_target(path).states()
    assert [s.state for s in states] == ["COMPLETED"] * 10
    assert cluster.most_queued == 4 and cluster.refused == [] and cluster.calls["sbatch"] == 7


def test_the_users_other_jobs_take_slots_too_and_the_rest_waits(make_cluster, tmp_path) -> None:
    cluster = make_cluster(max_submit=3)
    executor = executor_for(ClusterProfile("mem", [], SETTINGS))
    executor.submit(print, [[0, 1]], _request(tmp_path))  # someone else's array of the user
    path = new_sweep(tmp_path, 3)
    assert [p["submit"] for p in sr.SweepRecord.load(path).points] == [sr.SUBMITTED, sr.WAITING, sr.WAITING]
    assert cluster.refused == [] and cluster.most_queued == 3


def _request(tmp_path: Path) -> JobRequest:
    """What a job of the user outside the sweep asks for."""
    return JobRequest(job_name="other", folder=tmp_path / "other")


def test_a_refusal_on_a_stale_count_backs_off_and_submits_once_a_slot_frees(make_cluster, tmp_path) -> None:
    cluster = make_cluster(max_submit=2)
    executor = executor_for(ClusterProfile("mem", [], SETTINGS))
    stale = [executor.limits()]  # read before another job of the user took a slot
    (other,) = executor.submit(print, [[0]], _request(tmp_path))
    path = _sweep(tmp_path / "sw", 2)
    lines: list[str] = []

    def pause(seconds: float) -> None:  # the back-off's sleep: time passes, the other job ends
        cluster.advance(seconds)
        if cluster.state(other.job_id) in ("PENDING", "RUNNING"):
            cluster.finish(other.job_id)

    with sr.locked(path) as ledger:
        send_points(ledger, [0, 1], executor, run_sweep_task, entry=None, reason="sweep", out=Submitted(path),
                    log=lines.append, preflight=False, backoff=Backoff(sleep=pause),
                    limits_reader=lambda ex: stale.pop() if stale else ex.limits())
    record = sr.SweepRecord.load(path)
    assert [p["submit"] for p in record.points] == [sr.SUBMITTED, sr.SUBMITTED]
    assert len(record.submissions()[0]["refused"]) == 1 and len(cluster.refused) == 1
    assert "retry 1/4 in 1 s" in lines[0] and cluster.most_queued == 2


def test_a_point_that_always_fails_is_retried_with_more_memory_within_its_budget_then_left_failed(
        make_cluster, tmp_path) -> None:
    cluster = make_cluster()
    path = new_sweep(tmp_path, 2, retry={"OUT_OF_MEMORY": "mem*2"})
    lines: list[str] = []
    for _ in range(6):  # more rounds than the budget: the point must stop by itself
        for job_id in cluster.queued():
            cluster.finish(job_id, "OUT_OF_MEMORY" if point_of(cluster, job_id) == 0 else "COMPLETED")
        top_up(path, log=lines.append)
    p0 = sr.SweepRecord.load(path).points[0]
    assert p0["retries"] == sr.MAX_RETRIES and len(p0["jobs"]) == 1 + sr.MAX_RETRIES
    assert [cluster.job(j).settings["mem_gb"] for j in p0["jobs"]] == [1, 2, 4, 8]
    assert [h["cause"] for h in p0["history"]] == ["OUT_OF_MEMORY"] * 3
    assert cluster.calls["sbatch"] == 1 + sr.MAX_RETRIES  # each retry one array of its own request
    assert ("hpc-runner: point 0 failed with OUT_OF_MEMORY after 3 retries (max_retries): not retried again"
            in lines)
    states, _ = load_target(path).states()
    assert [(s.state, s.cause_kind) for s in states] == [("OUT_OF_MEMORY", "OUT_OF_MEMORY"), ("COMPLETED", None)]


def test_each_failure_the_scheduler_reports_is_read_as_its_cause(make_cluster, tmp_path) -> None:
    cluster = make_cluster()
    path = new_sweep(tmp_path, 7)
    ids = [job_of(path, i) for i in range(7)]
    cluster.advance(0)
    cluster.finish(ids[0], "OUT_OF_MEMORY")
    cluster.finish(ids[2], "NODE_FAIL")
    cluster.finish(ids[3], "PREEMPTED")
    cluster.finish(ids[4], "FAILED", exit_code="2:0")  # what `hpc-runner run` exits with on bad input
    cluster.finish(ids[5], "FAILED")
    cluster.finish(ids[6])
    cluster.advance(10 * 60)  # point 1 runs into its time limit
    asked = cluster.calls["squeue"]
    states, answer = load_target(path).states()
    assert [s.cause_kind for s in states] == ["OUT_OF_MEMORY", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BAD_INPUT",
                                             "ERROR", None]
    assert cause_counts(states)["TIMEOUT"] == 1 and answer.source == FROM_ACCOUNTING
    assert cluster.calls["squeue"] == asked + 1  # NODE_FAIL and PREEMPTED: was either requeued since? (no)


def test_a_node_failure_slurm_requeued_shows_the_new_attempt_with_where_the_old_one_failed(
        make_cluster, tmp_path) -> None:
    cluster = make_cluster()
    path = new_sweep(tmp_path, 1)
    cluster.advance(0)
    cluster.finish(job_of(path, 0), "NODE_FAIL", requeue=True)
    (state,), _ = load_target(path).states()
    assert (state.state, state.requeues, state.where()) == ("PENDING", 1, "- (NODE_FAIL mem1)")


def test_retry_rules_send_each_cause_again_with_its_own_request_and_a_failed_node_is_avoided(
        make_cluster, tmp_path) -> None:
    cluster = make_cluster(nodes=("n1", "n2"))
    path = new_sweep(tmp_path, 3, retry={"OUT_OF_MEMORY": "mem*2", "TIMEOUT": "time*2", "NODE_FAIL": "exclude"})
    ids = [job_of(path, i) for i in range(3)]
    cluster.advance(0)
    cluster.finish(ids[0], "OUT_OF_MEMORY")
    cluster.finish(ids[2], "NODE_FAIL")
    failed_on = cluster.job(ids[2]).current.nodes[0]
    cluster.advance(10 * 60)
    assert top_up(path, log=lambda line: None) == 3
    again = [job_of(path, i) for i in range(3)]
    assert len({j.split("_")[0] for j in again}) == 3  # one array per distinct request
    assert cluster.job(again[0]).settings["mem_gb"] == 2 and cluster.job(again[1]).settings["time"] == 20
    assert cluster.job(again[2]).settings["exclude"] == failed_on
    cluster.advance(0)
    assert cluster.job(again[2]).current.nodes != [failed_on]


def test_right_size_suggests_from_the_usage_figures_of_the_completed_points(make_cluster, tmp_path) -> None:
    cluster = make_cluster()
    path = new_sweep(tmp_path, 2, cpus_per_task=8, mem_gb=32, time=240)
    ids = [job_of(path, i) for i in range(2)]
    cluster.advance(0)
    cluster.advance(10 * 60)
    cluster.finish(ids[1], cpus_used=0.9, max_rss_mb=2.0 * 1024)
    cluster.advance(2 * 60)
    cluster.finish(ids[0], cpus_used=1.3, max_rss_mb=3.1 * 1024)
    target = load_target(path)
    states, answer = target.states()
    assert suggested_for(target, states)  # ended, and a scheduler ran it: status shows the suggestion
    line = ("asked 8 CPUs, used at most 1.3: --cpus 2; peak memory 3.1 GB of 32 GB: mem_gb 4; "
            "longest point 12 min of 4 h: time 00:30:00")  # the example (tests/sweep/test_right_size.py)
    assert for_target(target, states, answer).line() == line
    settings, _ = suggested_settings(str(path))  # what --right-size DIR applies
    assert settings == {"cpus_per_task": 2, "mem_gb": 4, "mem": None, "time": "00:30:00"}


def test_cancel_stops_the_queued_jobs_and_the_waiting_points_and_leaves_completed_ones(make_cluster, tmp_path) -> None:
    cluster = make_cluster(max_submit=2)
    path = new_sweep(tmp_path, 4)
    ids = [job_of(path, i) for i in range(2)]
    cluster.advance(0)
    cluster.finish(ids[0])
    out = cancel_target(load_target(path))
    assert out.waiting == 2 and out.job_ids == [ids[1].split("_")[0]] and cluster.calls["scancel"] == 1
    assert cluster.state(ids[0]) == "COMPLETED" and cluster.state(ids[1]) == f"CANCELLED by {os.getuid()}"
    assert top_up(path) == 0 and cluster.calls["sbatch"] == 1  # nothing is sent after a cancel
    states, _ = load_target(path).states()
    assert [s.state for s in states] == ["COMPLETED", "CANCELLED", "CANCELLED", "CANCELLED"]
    assert states[1].cause.by == pwd.getpwuid(os.getuid()).pw_name


def test_300_points_in_60_tasks_under_max_submit_50_all_complete_never_more_than_50_queued(
        make_cluster, tmp_path) -> None:
    """tests/slurm's 300-point sweep (231 s on the local SLURM), in milliseconds: --pack 5 makes 60 tasks, 50 go
    at once, and each top-up sends waiting tasks into the slots that ended jobs free, in arrays, never past
    the limit and never refused."""
    cluster = make_cluster(max_submit=50)
    path = _sweep(tmp_path / "sw", 300)
    with sr.locked(path) as ledger:
        ledger.data["pack"] = {"points": 5, "parallel": 1}
    executor = executor_for(ClusterProfile("mem", [], SETTINGS))
    with sr.locked(path) as ledger:
        first = submit_points(ledger, range(300), executor, entry=None, reason="sweep", log=lambda line: None)
        ledger.data["state"] = "submitted"
    assert len(first.job_ids) == 250 and len(cluster.queued()) == 50  # 50 tasks of 5 points
    rounds = 0
    while cluster.queued() or any(p["submit"] == sr.WAITING for p in sr.SweepRecord.load(path).points):
        rounds += 1
        assert rounds < 100, "the sweep never ended"
        cluster.advance(60)
        for job_id in [j for j in cluster.queued() if cluster.state(j) == "RUNNING"][:7]:
            cluster.finish(job_id)  # a few tasks end between two polls
        top_up(path, log=lambda line: None)
        assert len(cluster.queued()) <= 50
    record = sr.SweepRecord.load(path)
    jobs = [p["job_id"] for p in record.points]
    assert all(jobs) and len(set(jobs)) == 60 and [jobs.count(j) for j in dict.fromkeys(jobs)] == [5] * 60
    # (a packed point's own state comes from its run.yaml, which no task wrote here: the tasks' are asked)
    assert {cluster.state(j) for j in jobs} == {"COMPLETED"}
    assert cluster.most_queued == 50 and cluster.refused == []
    subs = record.submissions()
    assert sum(s["sbatch_calls"] for s in subs) == cluster.calls["sbatch"] < 60  # arrays, not a call per task
    assert not [s for s in subs if s.get("refused")]


def test_a_sweep_record_whose_job_folder_leads_outside_is_refused_before_a_top_up_submits_there(
        make_cluster, tmp_path, monkeypatch) -> None:
    """Issue 32: a sweep.yaml whose job_folder names another folder (or whose jobs/ is a link out of the sweep) made
    resume and every top-up write the job script and the pickles there, which the job later unpickles."""
    import pytest

    from hpc_runner.errors import ClusterError
    from hpc_runner.records.atomic import write_text_atomic
    from hpc_runner.scheduler.memory.executor import MemoryExecutor

    cluster = make_cluster(max_submit=1)
    path = new_sweep(tmp_path, 3)  # one point queued, two wait for its slot
    victim = tmp_path / "victim"
    victim.mkdir()
    record = sr.SweepRecord.load(path)
    record.data["job_folder"] = "../victim"
    write_text_atomic(record.file, record.text())
    folders: list[Path] = []
    submit = MemoryExecutor.submit

    def spy(self: MemoryExecutor, fn: Any, args: Any, request: JobRequest) -> Any:
        folders.append(request.folder)
        return submit(self, fn, args, request)

    monkeypatch.setattr(MemoryExecutor, "submit", spy)
    cluster.advance(0)
    cluster.finish(record.points[0]["job_id"])
    before = record.file.read_text()
    for step in (lambda: top_up(path, log=lambda line: None), lambda: load_target(path)):
        with pytest.raises(ClusterError) as err:
            step()
        text = err.value.paragraph()
        assert text.startswith(f"{record.file}: job_folder '../victim' resolves to {victim}, outside the record's")
        assert "Expected job_folder naming a folder inside" in text
    assert folders == [] and list(victim.iterdir()) == [] and record.file.read_text() == before
    record.data.pop("job_folder")  # hpc-runner's own record, whose jobs/ is a link out of the sweep: refused too
    write_text_atomic(record.file, record.text())
    (path / sr.JOB_FOLDER).symlink_to(victim)
    with pytest.raises(ClusterError, match=f"job_folder 'jobs' resolves to {victim}, outside"):
        top_up(path, log=lambda line: None)
    assert folders == [] and list(victim.iterdir()) == []

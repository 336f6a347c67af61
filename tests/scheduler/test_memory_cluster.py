"""The in-memory cluster behaves as the SLURM executor's cluster does, on a clock the test moves: arrays, the QOS
submit limit, states, every failure cause, dependencies, requeue, cancel, and sacct's usage figures."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from hpc_runner.errors import ClusterError
from hpc_runner.jobs.states import PointState
from hpc_runner.jobs.usage import point_usage
from hpc_runner.scheduler.executor import Attempt, JobRequest
from hpc_runner.scheduler.job_state import FROM_ACCOUNTING, FROM_NOWHERE
from hpc_runner.scheduler.job_status import JobState
from hpc_runner.scheduler.memory.executor import MemoryCluster, MemoryExecutor
from hpc_runner.scheduler.profiles import ClusterProfile, check_settings
from hpc_runner.scheduler.select import executor_for
from hpc_runner.scheduler.slurm.limits import is_limit_refusal


def profile(**settings: Any) -> ClusterProfile:
    return ClusterProfile("mem", [], {"executor": "memory", "time": 10, **settings})


def request(tmp_path: Path, **fields: Any) -> JobRequest:
    return JobRequest(job_name="j", folder=tmp_path / "jobs", **fields)


def submit(executor: MemoryExecutor, tmp_path: Path, n: int, **fields: Any) -> list[str]:
    return [j.job_id for j in executor.submit(lambda x: x * 2, [list(range(n))], request(tmp_path, **fields))]


@pytest.fixture
def cluster() -> Any:
    with MemoryCluster().installed() as c:
        yield c


def test_a_profile_with_executor_memory_reaches_the_installed_cluster_and_none_without_one(cluster) -> None:
    check_settings({"executor": "memory"}, "here")
    executor = executor_for(profile())
    assert isinstance(executor, MemoryExecutor) and executor.cluster is cluster and not executor.runs_here
    with MemoryCluster().installed() as inner:
        assert executor_for(profile()).cluster is inner
    assert executor_for(profile()).cluster is cluster


def test_no_installed_cluster_is_a_cluster_error_that_says_how_to_install_one() -> None:
    with pytest.raises(ClusterError, match="none is installed") as err:
        executor_for(profile())
    assert "installed()" in err.value.paragraph()


def test_several_tasks_are_one_array_and_one_task_is_a_plain_job(cluster, tmp_path) -> None:
    executor = executor_for(profile())
    assert submit(executor, tmp_path, 3) == ["1_0", "1_1", "1_2"]
    assert submit(executor, tmp_path, 1) == ["2"]
    assert cluster.calls["sbatch"] == 2 and cluster.queued() == ["1_0", "1_1", "1_2", "2"]
    assert cluster.job("1_2").args == (2,) and cluster.state("1_2") == "PENDING"


def test_the_qos_submit_limit_counts_every_queued_task_and_refuses_a_whole_array_past_it(tmp_path) -> None:
    with MemoryCluster(max_submit=5).installed() as cluster:
        _limit_is_kept(cluster, executor_for(profile()), tmp_path)


def _limit_is_kept(cluster: MemoryCluster, executor: MemoryExecutor, tmp_path: Path) -> None:
    limits = executor.limits()
    assert limits.free_slots == 5 and limits.binding.name == "MaxSubmitJobsPerUser"
    submit(executor, tmp_path, 3)
    assert executor.limits().free_slots == 2
    with pytest.raises(ClusterError) as err:
        submit(executor, tmp_path, 3)
    assert is_limit_refusal(err.value.message) and "QOSMaxSubmitJobPerUserLimit" in err.value.message
    assert executor.is_limit_refusal(err.value.message)  # the Executor seam reads it as SLURM's executor does
    assert [j for j, _, _ in executor.queued_jobs(cluster.user)] == ["1_0", "1_1", "1_2"]
    assert cluster.queued() == ["1_0", "1_1", "1_2"] and len(cluster.refused) == 1  # nothing of it was queued
    cluster.finish("1_0")
    assert executor.limits().free_slots == 3 and submit(executor, tmp_path, 3) == ["2_0", "2_1", "2_2"]
    assert cluster.most_queued == 5


def test_the_profiles_own_bound_is_reported_beside_the_qos_and_an_array_past_max_array_size_is_refused(
        tmp_path) -> None:
    with MemoryCluster(max_array_size=4).installed():
        executor = executor_for(profile(max_submit_jobs=2))
        limits = executor.limits()
        assert limits.free_slots == 2 and limits.max_array_size == 4
        with pytest.raises(ClusterError, match="Invalid job array specification") as err:
            submit(executor, tmp_path, 5)
        assert not is_limit_refusal(err.value.message) and not executor.is_limit_refusal(err.value.message)


def test_jobs_start_at_a_scheduling_pass_and_end_as_planned_or_at_their_time_limit(cluster, tmp_path) -> None:
    executor = executor_for(profile(time=10))
    ids = submit(executor, tmp_path, 3)
    cluster.plan(ids[0], "COMPLETED", after_s=30, cpus_used=0.5)
    cluster.plan(ids[1], "OUT_OF_MEMORY", after_s=90, max_rss_mb=2048)
    cluster.advance(0)
    assert [cluster.state(j) for j in ids] == ["RUNNING"] * 3
    cluster.advance(60)
    assert [cluster.state(j) for j in ids] == ["COMPLETED", "RUNNING", "RUNNING"]
    cluster.advance(600)
    assert [cluster.state(j) for j in ids] == ["COMPLETED", "OUT_OF_MEMORY", "TIMEOUT"]
    usage = executor.query(ids).usage
    assert [usage[j].elapsed_s for j in ids] == [30, 90, 600]
    assert usage[ids[2]].time_limit_s == 600


def test_every_failure_cause_is_what_sacct_says_in_the_slurm_executors_answer_shape(cluster, tmp_path) -> None:
    executor = executor_for(profile())
    states = ["COMPLETED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED"]
    ids = submit(executor, tmp_path, len(states) + 1)
    for job_id, state in zip(ids, states):
        cluster.finish(job_id, state)
    executor.cancel([ids[-1]])  # the whole array: only the last task was still queued
    answer = executor.query([*ids, None, "local"])
    assert answer.source == FROM_ACCOUNTING and cluster.calls["sacct"] == 1
    assert [answer.statuses[j].state.value for j in ids] == [*states, "CANCELLED"]
    assert answer.statuses[ids[-1]].raw == f"CANCELLED by {os.getuid()}"
    assert answer.statuses[ids[-1]].cancelled_by == str(os.getuid())
    assert answer.statuses[ids[1]].exit_code == 1 and answer.statuses[ids[0]].exit_code == 0
    assert answer.attempts[ids[4]] == [Attempt("NODE_FAIL", "mem1")]
    assert executor_for(profile()).query([None, "local"]).source == FROM_NOWHERE  # nothing to ask: no call


def test_usage_figures_read_back_through_the_sweeps_usage_reader(cluster, tmp_path) -> None:
    executor = executor_for(profile(cpus_per_task=4, mem_gb=8))
    (job,) = submit(executor, tmp_path, 1)
    cluster.advance(0)
    cluster.advance(100)
    cluster.finish(job, cpus_used=2.0, max_rss_mb=3000, gpu_util=40, gpu_util_max=90, gpu_mem_mb=5000)
    used = point_usage(PointState(0, tmp_path, {}, job, "COMPLETED", FROM_ACCOUNTING), executor.query([job]))
    assert (used.elapsed_s, used.time_limit_s, used.cpus, used.mem_request_mb) == (100, 600, 4, 8192)
    assert used.cpus_used == pytest.approx(2.0) and used.cpu_efficiency == pytest.approx(0.5)
    assert used.max_rss_mb == pytest.approx(3000, abs=1)
    assert (used.gpu_util, used.gpu_util_max, used.gpu_source) == (40, 90, FROM_ACCOUNTING)
    assert used.gpu_mem_mb == pytest.approx(5000) and used.node == "mem1"


def test_afterok_waits_then_starts_and_a_failed_dependency_is_never_satisfied(tmp_path) -> None:
    with MemoryCluster(kill_invalid_dep=False).installed() as cluster:
        executor = executor_for(profile())
        first = submit(executor, tmp_path, 2)
        (ok,) = submit(executor, tmp_path, 1, dependency="afterok:1")
        (anyway,) = submit(executor, tmp_path, 1, dependency="afterany:1")
        cluster.advance(0)
        assert executor.pending_reasons([ok, anyway]) == {ok: "Dependency", anyway: "Dependency"}
        cluster.finish(first[0])
        cluster.finish(first[1], "FAILED")
        assert executor.pending_reasons([ok]) == {ok: "DependencyNeverSatisfied"}  # pending, for ever
        cluster.advance(1)
        assert cluster.state(anyway) == "RUNNING" and cluster.state(ok) == "PENDING"
        assert executor.still_queued([ok, first[0]]) == {ok}


def test_a_cluster_that_honours_kill_on_invalid_dep_ends_the_whole_chain_cancelled(cluster, tmp_path) -> None:
    executor = executor_for(profile())
    (first,) = submit(executor, tmp_path, 1)
    (second,) = submit(executor, tmp_path, 1, dependency=f"afterok:{first}")
    (third,) = submit(executor, tmp_path, 1, dependency=f"afterok:{second}")
    cluster.finish(first, "NODE_FAIL")
    assert (cluster.state(second), cluster.state(third)) == ("CANCELLED", "CANCELLED")
    assert cluster.job(third).reason == "DependencyNeverSatisfied"


def test_a_dependency_on_no_job_is_refused_and_set_dependency_changes_only_pending_jobs(cluster, tmp_path) -> None:
    executor = executor_for(profile())
    with pytest.raises(ClusterError, match="Job dependency problem"):
        submit(executor, tmp_path, 1, dependency="afterok:99")
    (first,) = submit(executor, tmp_path, 1)
    waiter = submit(executor, tmp_path, 2, hold=True)
    assert executor.set_dependency(waiter, f"afterany:{first}") == ["2"]
    assert executor.pending_reasons(waiter) == dict.fromkeys(waiter, "Dependency")
    cluster.advance(0)
    with pytest.raises(ClusterError, match="no longer pending"):
        executor.set_dependency([first], "afterany:2")


def test_a_requeued_job_keeps_its_earlier_attempts_and_counts_its_requeues(cluster, tmp_path) -> None:
    executor = executor_for(profile())
    (job,) = submit(executor, tmp_path, 1)
    cluster.finish(job, "NODE_FAIL", requeue=True)  # SLURM requeues a job whose node failed
    cluster.advance(5)
    cluster.requeue(job)  # scontrol requeue of the running attempt
    cluster.advance(5)
    cluster.finish(job)
    answer = executor.query([job])
    assert answer.requeues(job) == 2 and answer.statuses[job].state is JobState.COMPLETED
    assert [a.state for a in answer.attempts[job]] == ["NODE_FAIL", "REQUEUED", "COMPLETED"]
    assert [a.node for a in answer.attempts[job]] == ["mem1"] * 3


def test_cancel_of_an_array_task_cancels_the_array_and_leaves_ended_tasks_alone(cluster, tmp_path) -> None:
    executor = executor_for(profile())
    ids = submit(executor, tmp_path, 3)
    cluster.advance(0)
    cluster.finish(ids[0])
    assert executor.cancel([ids[1]]) == ["1"] and cluster.calls["scancel"] == 1
    assert [cluster.state(j) for j in ids] == ["COMPLETED", f"CANCELLED by {os.getuid()}",
                                               f"CANCELLED by {os.getuid()}"]
    assert cluster.job(ids[1]).current.exit_code == "0:15"  # it was running


def test_held_array_parallelism_max_running_and_exclusions_keep_jobs_pending_with_their_reason(tmp_path) -> None:
    with MemoryCluster(max_running=3, nodes=("a", "b")).installed() as cluster:
        executor = executor_for(profile(exclude="a"))
        held = submit(executor, tmp_path, 1, hold=True)
        array = submit(executor, tmp_path, 3, array_parallelism=2)
        two_nodes = executor_for(profile(nodes=2)).submit(print, [[0]], request(tmp_path, exclude="b"))
        rest = submit(executor, tmp_path, 2)
        cluster.advance(0)
        reasons = executor.pending_reasons([*held, *array, two_nodes[0].job_id, *rest])
        assert reasons == {held[0]: "JobHeldUser", array[2]: "JobArrayTaskLimit", two_nodes[0].job_id:
                           "ReqNodeNotAvail", rest[1]: "QOSMaxJobsPerUserLimit"}
        assert {cluster.job(j).current.nodes[0] for j in [*array[:2], rest[0]]} == {"b"}
        cluster.release(held[0])
        cluster.finish(array[0])
        cluster.advance(0)
        assert cluster.state(held[0]) == "RUNNING"  # released, and first in submission order
        assert executor.pending_reasons([array[2]]) == {array[2]: "QOSMaxJobsPerUserLimit"}


def test_resources_no_node_has_are_refused_before_anything_is_queued(cluster, tmp_path) -> None:
    executor = executor_for(profile(cpus_per_task=128))
    with pytest.raises(ClusterError, match="Requested node configuration is not available"):
        executor.check_resources(request(tmp_path), 4, "the array")
    assert cluster.queued() == []
    with pytest.raises(ClusterError, match="no room before the stop signal"):
        executor_for(profile(time=1, signal_delay_s=60)).check_time()


def test_a_task_runs_here_only_when_the_test_asks(cluster, tmp_path) -> None:
    executor = executor_for(profile())
    ids = submit(executor, tmp_path, 2)
    assert cluster.run(ids[1]) == 2 and cluster.state(ids[1]) == "COMPLETED"
    bad = executor.submit(lambda x: 1 / x, [[0]], request(tmp_path))[0].job_id
    assert cluster.run(bad) is None and cluster.state(bad) == "FAILED"
    assert isinstance(cluster.job(bad).error, ZeroDivisionError) and cluster.state(ids[0]) == "PENDING"


def _what_the_job_sees() -> dict[str, Any]:
    """A job's function: what the job side (scheduler/job_env.py) tells it, and a requeue asked from inside."""
    from hpc_runner.scheduler.job_env import current

    env = current()  # the job side whose variables are present (SLURM's: the in-memory cluster models SLURM)
    seen = {"job": env.job_id, "array": (env.array_job_id, env.array_task_id), "restarts": env.restarts,
            "left": env.time_left(), "cpus": env.cpus, "nodes": env.nodes}
    seen["requeued"] = env.requeue() if env.restarts < 2 else None
    return seen


def test_a_job_run_here_sees_its_job_side_and_requeues_itself_within_the_bound(cluster, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HPCR_MAX_REQUEUES", "1")
    executor = executor_for(profile(cpus_per_task=3))
    ids = [j.job_id for j in executor.submit(lambda _: _what_the_job_sees(), [[0, 1]], request(tmp_path))]
    cluster.advance(120)  # two minutes of its ten: eight left
    first = cluster.run(ids[1])
    assert first["job"] == ids[1] and first["array"] == tuple(ids[1].split("_")) and first["restarts"] == 0
    assert 470 <= first["left"] <= 480 and first["cpus"] == 3
    assert first["nodes"] == cluster.job(ids[1]).attempts[0].nodes != []
    assert first["requeued"] == ids[1]  # the job asked, and this cluster (not scontrol) requeued it
    assert [a.state for a in cluster.job(ids[1]).attempts] == ["REQUEUED", "PENDING"]
    again = cluster.run(ids[1])
    assert again["restarts"] == 1 and again["requeued"] is None  # HPCR_MAX_REQUEUES=1: bounded, it ends instead
    assert cluster.state(ids[1]) == "COMPLETED" and "SLURM_JOB_ID" not in os.environ  # the test's own environment

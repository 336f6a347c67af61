"""The job side of the scheduler (scheduler/job_env.py): what a job is told about itself, asked in neutral words.

Every case is a real environment mapping as SLURM (or torchrun) sets it; nothing is mocked.
"""

from __future__ import annotations

import os

import pytest

from hpc_runner.errors import ClusterError
from hpc_runner.scheduler import job_env
from hpc_runner.scheduler.dependency import AFTER_ANY, AFTER_OK, after, after_any, after_ok
from hpc_runner.scheduler.executor import array_ids
from hpc_runner.scheduler.job_env import current as JobEnvironment  # the job side whose variables are set
from hpc_runner.scheduler.job_environment import NoScheduler
from hpc_runner.scheduler.slurm.job_environment import SlurmJobEnvironment

# task 3 of a 4-task step on 2 nodes of array task 7 of job 500, requeued twice (as sbatch and srun set it)
ARRAY_TASK = {
    "SLURM_JOB_ID": "507", "SLURM_ARRAY_JOB_ID": "500", "SLURM_ARRAY_TASK_ID": "7", "SLURM_RESTART_COUNT": "2",
    "SLURM_JOB_END_TIME": "1800000000", "SLURM_NTASKS": "4", "SLURM_PROCID": "3", "SLURM_LOCALID": "1",
    "SLURM_NODEID": "1", "SLURM_STEP_ID": "0", "SLURM_JOB_NODELIST": "gpu[03-04]", "SLURM_JOB_NUM_NODES": "2",
    "SLURM_CPUS_PER_TASK": "6", "SLURM_JOB_GPUS": "4,5", "SLURM_MEM_PER_NODE": "32000",
    "SLURM_LAUNCH_NODE_IPADDR": "10.1.0.3", "SLURMD_NODENAME": "gpu04", "SLURM_CONF": "/etc/slurm/slurm.conf",
}


def test_a_job_says_its_ids_restarts_and_end():
    job = JobEnvironment(ARRAY_TASK)
    assert job.in_job() and job.job_id == "500_7" and (job.array_job_id, job.array_task_id) == ("500", "7")
    assert job_env.job_id(ARRAY_TASK) == "507"  # the job's own number, not the array task's name
    assert job.restarts == 2 and job.end_time == 1800000000.0
    assert job.time_left(now=1800000000 - 90) == 90 and job.time_left(now=1900000000) == 0


def test_a_job_says_what_it_was_granted():
    job = JobEnvironment(ARRAY_TASK)
    assert (job.cpus, job.gpus, job.memory_mb) == (6, ["4", "5"], 32000)
    one = {"SLURM_JOB_ID": "1"}
    assert job_env.cpu_grant({**one, "SLURM_TRES_PER_TASK": "cpu:4,gres/gpu:1"})[:2] == (4, "SLURM_TRES_PER_TASK")
    on_node = {"SLURM_JOB_ID": "1", "SLURM_CPUS_ON_NODE": "8", "SLURM_NTASKS_PER_NODE": "2(x2)"}
    assert job_env.cpu_grant(on_node) == (4, "SLURM_CPUS_ON_NODE", "SLURM_CPUS_ON_NODE=8 / 2 tasks per node")
    assert job_env.gpu_grant({**one, "SLURM_STEP_GPUS": "5", "SLURM_JOB_GPUS": "4,5"}) == (["5"], "SLURM_STEP_GPUS")
    assert job_env.memory_grant_mb({**one, "SLURM_MEM_PER_CPU": "2000", "SLURM_CPUS_ON_NODE": "4"}) == 8000


def test_a_granted_cpu_count_is_what_the_grant_then_says():
    env = {"SLURM_JOB_ID": "1", "SLURM_TRES_PER_TASK": "cpu=8", "SLURM_CPUS_PER_TASK": "8"}
    job_env.grant_cpus(3, env)
    assert env == {"SLURM_JOB_ID": "1", "SLURM_CPUS_PER_TASK": "3"} and JobEnvironment(env).cpus == 3
    local: dict[str, str] = {}  # no scheduler: the share is our own variable, read back the same way
    job_env.grant_cpus(2, local)
    assert JobEnvironment(local).cpus == 2 and isinstance(JobEnvironment(local), NoScheduler)


def test_a_job_says_its_nodes_and_this_process_rank():
    job = JobEnvironment(ARRAY_TASK)
    assert job.nodes == ["gpu03", "gpu04"] and job.num_nodes == 2 and job.step_id == "0"
    assert (job.global_rank, job.world_size, job.local_rank, job.node_rank) == (3, 4, 1, 1)
    assert job.launch_address == "10.1.0.3" and job_env.node_name(ARRAY_TASK) == "gpu04"
    assert job_env.first_node({**ARRAY_TASK, "SLURM_STEP_NODELIST": "gpu04"}) == ("gpu04", "SLURM_STEP_NODELIST")
    assert job_env.job_number(ARRAY_TASK) == (507, "SLURM_JOB_ID")
    assert job_env.job_number({"SLURM_JOBID": "9"}) == (9, "SLURM_JOBID")  # the older name


def test_torchrun_wins_over_srun_for_the_ranks():
    env = {**ARRAY_TASK, "RANK": "0", "WORLD_SIZE": "8", "LOCAL_RANK": "0", "GROUP_RANK": "0"}
    job = JobEnvironment(env)
    assert (job.global_rank, job.world_size, job.local_rank, job.node_rank) == (0, 8, 0, 0)


def test_outside_a_job_nothing_is_claimed():
    job = JobEnvironment({})
    assert not job.in_job() and job.job_id is None and job.restarts == 0 and job.end_time is None
    assert (job.cpus, job.gpus, job.memory_mb, job.nodes, job.num_nodes) == (None, [], None, [], 1)
    assert (job.global_rank, job.world_size, job.local_rank, job.node_rank, job.step_id) == (0, 1, 0, 0, None)
    assert job.launch_address is None and job.time_left() is None and job.requeue() is None


def test_a_garbled_value_is_named_not_a_traceback():
    with pytest.raises(ClusterError, match="SLURM_PROCID='x' is not an integer"):
        _ = JobEnvironment({**ARRAY_TASK, "SLURM_PROCID": "x"}).global_rank
    with pytest.raises(ClusterError, match="SLURM_JOB_NODELIST='gpu\\[03-' is not a SLURM host list"):
        _ = JobEnvironment({**ARRAY_TASK, "SLURM_JOB_NODELIST": "gpu[03-"}).nodes
    with pytest.warns(UserWarning, match="SLURM_CPUS_PER_TASK='two'"):
        assert job_env.cpu_grant({"SLURM_JOB_ID": "1", "SLURM_CPUS_PER_TASK": "two"}) is None


def test_the_record_keeps_the_jobs_words_and_is_read_back_neutrally():
    recorded = job_env.scheduler_variables(ARRAY_TASK)
    assert "SLURMD_NODENAME" not in recorded and recorded["SLURM_JOB_ID"] == "507"
    record = {"scheduler": job_env.job_record(ARRAY_TASK)}
    assert record["scheduler"]["name"] == "slurm" and record["scheduler"]["job_id"] == "500_7"
    job = job_env.recorded_job(record)
    assert (job.name, job.job_id, job.restarts) == ("slurm", "500_7", 2)
    assert [k for k, _ in job.summary] == [
        "SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_JOB_NODELIST", "SLURM_CPUS_ON_NODE"][:4]
    old = job_env.recorded_job({"slurm": recorded})  # an earlier version's run.yaml: every SLURM_* variable
    assert (old.name, old.job_id, old.restarts) == ("slurm", "500_7", 2) and old.summary == job.summary
    assert job_env.recorded_job({"slurm": {"SLURM_JOB_ID": "3", "SLURM_RESTART_COUNT": "lots"}}).restarts == 0
    assert job_env.recorded_job({}).job_id is None and job_env.recorded_job({"slurm": {}}).summary == []
    assert job_env.job_record({})["name"] == "none"  # a local run: no scheduler


def test_a_job_submitted_from_inside_a_job_does_not_inherit_it(monkeypatch):
    for name, value in ARRAY_TASK.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HPCR_TEST_SET_HERE", "1")
    assert set(job_env.job_variables()) == set(ARRAY_TASK) - {"SLURM_CONF"}
    with job_env.scrubbed_environment(also={"HPCR_TEST_SET_HERE": "1"}):
        assert not job_env.in_job() and "HPCR_TEST_SET_HERE" not in os.environ
        assert os.environ["SLURM_CONF"] == "/etc/slurm/slurm.conf"  # the cluster's config stays
    assert JobEnvironment().job_id == "500_7" and os.environ["HPCR_TEST_SET_HERE"] == "1"


def test_waits_on_other_jobs_are_named_neutrally():
    assert after_any(["12", "13", "12"]) == "afterany:12:13" and after_ok(["7_1"]) == "afterok:7_1"
    assert after(AFTER_ANY, array_ids(["12_0", "12_1", "local", None, "13"])) == "afterany:12:13"
    assert after(AFTER_OK, ["7"]) == "afterok:7"


def test_the_job_clock_is_asked_neutrally():
    assert job_env.job_end_time(environ=ARRAY_TASK) == 1800000000.0  # the environment says it: no call
    assert job_env.job_end_time(environ={}) is None  # outside a job: nobody is asked
    assert job_env.stop_margin_s(20) > 20 and job_env.stop_margin_s(None) >= 0


def test_slurm_variables_without_slurmstepd_among_the_parents_are_a_stale_claim():
    """Every task of a step is a child (however deep) of slurmstepd; variables left in a shell have none behind them."""
    stale = job_env.stale_world_claim(ARRAY_TASK, parents=lambda: ["bash", "sshd", "systemd"])
    assert stale is not None and "bash < sshd < systemd" in stale and SlurmJobEnvironment.step_daemon in stale
    assert job_env.stale_world_claim(ARRAY_TASK, parents=lambda: ["bash", "slurmstepd", "systemd"]) is None
    assert job_env.stale_world_claim(ARRAY_TASK, parents=lambda: None) is None  # cannot tell: benefit of the doubt
    one_task = {k: v for k, v in ARRAY_TASK.items() if k != "SLURM_STEP_ID"}  # a batch script: claims no world
    torchrun = {**ARRAY_TASK, "RANK": "3", "WORLD_SIZE": "4"}  # torchrun's claim is not SLURM's to judge
    for env in (one_task, torchrun):
        assert job_env.stale_world_claim(env, parents=lambda: ["bash"]) is None
    assert job_env.world_claim_names(torchrun) == ["RANK", "WORLD_SIZE", "SLURM_NTASKS", "SLURM_PROCID",
                                                   "SLURM_STEP_ID"]


def test_the_parent_chain_is_read_from_proc_to_the_first_process():
    chain = job_env.parent_commands()
    if chain is None:
        pytest.skip("no readable /proc here")
    assert chain and all(isinstance(name, str) for name in chain)
    assert job_env.parent_commands(pid=2**22 + 12345) is None  # no such process: cannot tell

"""The ``#$`` job script (diffed against a golden file), the settings that feed it, and the job side's reading of
Grid Engine's variables. No Grid Engine needed. HPCR_UPDATE_GOLDEN=1 rewrites the golden scripts (then read the
diff)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hpc_runner.errors import ClusterError
from hpc_runner.scheduler.gridengine.executor import hold_ids
from hpc_runner.scheduler.gridengine.job_script import job_script, log_paths, safe_job_name
from hpc_runner.scheduler.gridengine.job_side import GridEngineJobEnvironment
from hpc_runner.scheduler.gridengine.settings import GridEngineSettings

GOLDEN = Path(__file__).resolve().parents[1] / "scheduler" / "golden" / "gridengine"
COMMAND = ["/opt/venv/bin/python", "-u", "-m", "hpc_runner", "job", "/scratch/sweeps/s1/logs/array-0123456789ab.json"]
SETTINGS = GridEngineSettings.from_mapping({"queue": "all.q", "pe": "smp", "slots": 4, "h_rt": "2:00:00",
                                            "h_vmem": "8G", "project": "rad-ai", "options": ["-l", "gpu=1"]})


def same_as_golden(text: str, name: str) -> None:
    path = GOLDEN / name
    if os.environ.get("HPCR_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert text == path.read_text(), f"{name} changed: rerun with HPCR_UPDATE_GOLDEN=1 and read the diff"


def test_an_array_script_asks_its_tasks_at_most_k_at_once_after_its_dependencies() -> None:
    script = job_script(SETTINGS, job_name="hpcr sweep/1", log_folder="/scratch/sweeps/s1/logs", command=COMMAND,
                        workdir="/scratch/sweeps/s1", array_size=4, max_running=2, hold_jids=["12", "13"],
                        setup=["module load cuda/12.2"], describe="hpc-runner: sweep points 0-3 of /scratch/sweeps/s1")
    same_as_golden(script, "sge_array.sh")
    assert script.splitlines()[1] == "# hpc-runner: sweep points 0-3 of /scratch/sweeps/s1"  # the first comment
    assert "#$ -t 1-4\n#$ -tc 2\n#$ -hold_jid 12,13\n" in script
    assert "#$ -pe smp 4\n#$ -l h_rt=2:00:00,h_vmem=8G\n#$ -P rad-ai\n#$ -l gpu=1\n" in script


def test_one_task_is_a_plain_job_in_the_submitting_folder_with_no_requests() -> None:
    script = job_script(GridEngineSettings(), job_name="123", log_folder="/logs", command=["python", "a b"])
    same_as_golden(script, "sge_one.sh")
    assert "-t " not in script and "#$ -cwd" in script and "#$ -N j123" in script
    assert script.endswith("exec python 'a b'\n")


@pytest.mark.parametrize("values", [
    {"queue": "all.q -l h_vmem=1T"}, {"queue": "all.q\n#$ -l x"}, {"pe": "smp;rm"}, {"h_rt": "two hours"},
    {"h_vmem": "8 G"}, {"h_vmem": "0"}, {"slots": 0}, {"slots": "４"}, {"project": "$(id)"},
    {"options": ["-l", "a b"]}, {"options": ["-t", "1-9"]}, {"options": "-l gpu=1"}, {"qeue": "all.q"},
    {"notify": "yes"}, {"h_rt": "0"},
])
def test_a_value_qsub_would_read_as_more_options_is_refused_by_its_key(values: dict) -> None:
    with pytest.raises(ClusterError):
        GridEngineSettings.from_mapping(values)


def test_the_profile_time_and_cpus_become_h_rt_and_slots_unless_it_names_them() -> None:
    s = GridEngineSettings.from_mapping({}, time_minutes=90, cpus=2)
    assert (s.h_rt, s.slots, s.h_rt_s) == ("5400", 2, 5400.0)
    assert GridEngineSettings.from_mapping({"h_rt": 60, "slots": 1}, time_minutes=90, cpus=2).h_rt == "60"


@pytest.mark.parametrize("folder", ["/logs with space", "relative/logs", "/logs/$JOB_ID", "/a/../etc", "/l\n#$ -h"])
def test_a_log_folder_that_would_need_quoting_in_a_directive_is_refused(folder: str) -> None:
    with pytest.raises(ClusterError):
        job_script(GridEngineSettings(), job_name="x", log_folder=folder, command=["true"])


def test_a_setup_line_with_a_control_character_is_refused() -> None:
    with pytest.raises(ClusterError, match="control character"):
        job_script(GridEngineSettings(), job_name="x", log_folder="/l", command=["true"], setup=["echo \x1b[2J"])


def test_names_logs_and_dependencies_in_grid_engines_words() -> None:
    assert safe_job_name("my run/1:x") == "my-run-1-x"
    assert log_paths("/l", "job", "12", 3) == ("/l/job.o12.3", "/l/job.e12.3")
    assert hold_ids("afterok:12:13_2,afterany:14") == ["12", "13", "14"]
    with pytest.raises(ClusterError):
        hold_ids("singleton")


def job_env(**variables: str) -> GridEngineJobEnvironment:
    return GridEngineJobEnvironment({"SGE_TASK_ID": "undefined", **variables})


def test_the_job_side_reads_ids_slots_hosts_and_scratch_as_grid_engine_sets_them(tmp_path: Path) -> None:
    hostfile = tmp_path / "pe_hostfile"
    hostfile.write_text("vm 2 all.q@vm UNDEFINED\nvm2 2 all.q@vm2 UNDEFINED\n")
    env = job_env(JOB_ID="30", SGE_TASK_ID="3", NSLOTS="4", PE_HOSTFILE=str(hostfile), TMP="/tmp/30.3.all.q",
                  RESTARTED="1")
    assert env.in_job() and env.job_id == "30_2" and env.array_job_id == "30" and env.array_task_id == "2"
    assert env.own_number == "30.3" and env.cpus == 4 and env.nodes == ["vm", "vm2"] and env.num_nodes == 2
    assert env.scratch_dir == "/tmp/30.3.all.q" and env.restarts == 1
    assert env.requeue_exit_code == 99


def test_a_job_that_is_no_array_has_no_task_and_outside_a_job_nothing_is_read() -> None:
    env = job_env(JOB_ID="12", TMPDIR="/tmp/12.1.all.q")
    assert env.job_id == "12" and env.array_task_id is None and env.scratch_dir == "/tmp/12.1.all.q"
    outside = GridEngineJobEnvironment({"JOB_ID": "12"})  # JOB_ID alone is not Grid Engine's
    assert not outside.in_job() and outside.job_id is None


def test_a_job_may_ask_to_be_run_again_until_it_was_restarted_as_often_as_allowed() -> None:
    assert job_env(JOB_ID="12", RESTARTED="0").requeue() == "12"
    assert job_env(JOB_ID="12", RESTARTED="1", HPCR_MAX_REQUEUES="1").requeue() is None


def test_a_job_that_exits_99_is_requeued_at_most_max_requeues_times_counted_beside_its_log(tmp_path: Path) -> None:
    stdout = tmp_path / "hpcr-run.o12"
    said = []
    for run in range(5):  # Grid Engine sets RESTARTED=1 on every rerun: only our count tells them apart
        env = job_env(JOB_ID="12", RESTARTED="1" if run else "0", SGE_STDOUT_PATH=str(stdout), HPCR_MAX_REQUEUES="3")
        assert env.restarts == min(run, 3)
        said.append(env.requeue())
    assert said == ["12", "12", "12", None, None]
    assert (tmp_path / "hpcr-requeues.12").read_text() == "3\n"  # in the log folder, named by the job's id


def test_where_no_requeue_count_can_be_kept_a_job_that_was_rerun_asks_no_more(tmp_path: Path) -> None:
    assert job_env(JOB_ID="12", RESTARTED="0").requeue() == "12"  # no stdout path: the first requeue only
    assert job_env(JOB_ID="12", RESTARTED="1").requeue() is None
    (tmp_path / "hpcr-requeues.12").write_text("many")  # a count file that holds no count
    assert job_env(JOB_ID="12", RESTARTED="1", SGE_STDOUT_PATH=str(tmp_path / "o12")).requeue() is None
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    assert job_env(JOB_ID="12", RESTARTED="0", SGE_STDOUT_PATH=f"{blocked}/o12").requeue() is None  # unwritable


@pytest.mark.parametrize("raw", ["１", "-3", "3.0", "99999999999999999999"])
def test_a_garbled_slot_count_or_task_is_a_cluster_error_not_a_traceback(raw: str) -> None:
    with pytest.raises(ClusterError):
        _ = job_env(JOB_ID="12", NSLOTS=raw).cpus
    with pytest.raises(ClusterError):
        _ = job_env(JOB_ID="12", SGE_TASK_ID=raw).array_task_id


def test_the_job_call_takes_task_sge_task_id_minus_one() -> None:
    from hpc_runner.scheduler.job_call import task_index

    assert task_index(job_env(JOB_ID="12", SGE_TASK_ID="undefined").array_task_id) == 0
    assert task_index(job_env(JOB_ID="12", SGE_TASK_ID="4").array_task_id) == 3


def test_the_executor_writes_its_dry_run_script_from_the_profile_without_a_grid_engine(tmp_path: Path) -> None:
    from hpc_runner.scheduler.executor import JobRequest
    from hpc_runner.scheduler.gridengine.executor import GridEngineExecutor
    from hpc_runner.scheduler.profile import ClusterProfile

    profile = ClusterProfile("sge", [], {"executor": "gridengine", "time": 30, "cpus_per_task": 2,
                                         "gridengine": {"h_vmem": "2G"}})
    ex = GridEngineExecutor(profile)
    request = JobRequest(job_name="s1", folder=tmp_path / "logs", dependency="afterok:41", array_parallelism=3)
    script = ex.script(request, 4)
    assert "#$ -t 1-4\n#$ -tc 3\n#$ -hold_jid 41\n" in script and "#$ -pe smp 2\n" in script
    assert "#$ -l h_rt=1800,h_vmem=2G\n" in script and f" -u -m hpc_runner job {tmp_path}/logs/array-" in script
    with pytest.raises(ClusterError, match="job entries"):
        ex.submit(print, [["x"]], request)
    with pytest.raises(ClusterError, match="unknown Grid Engine setting"):
        GridEngineExecutor.check_profile({"gridengine": {"h_vmen": "2G"}}, "sge.yaml")


def test_a_requeued_call_exits_with_the_job_sides_requeue_exit_code_only_where_the_scheduler_wants_one() -> None:
    from hpc_runner.scheduler.job_call import exit_status

    side = job_env(JOB_ID="12", SGE_TASK_ID="undefined")
    assert exit_status({"status": "preempted", "requeued": "12"}, side.requeue_exit_code) == 99
    assert exit_status({"status": "completed"}, side.requeue_exit_code) == 0
    assert exit_status({"status": "preempted", "requeued": "12"}, None) == 0  # SLURM: scontrol requeue did it


def test_max_u_jobs_counts_an_array_as_one_job_so_one_free_job_is_a_whole_array() -> None:
    from hpc_runner.scheduler.executor import Limit, SubmitLimits

    limits = SubmitLimits(user="u", limits=[Limit("max_u_jobs", "qconf -sconf", 2, queued=1, counts_arrays=True)])
    assert limits.free_slots is None  # one job free: an array of any size (up to max_array_size)
    limits.consume(500)
    assert limits.limits[0].queued == 2 and limits.free_slots == 0
    tasks = SubmitLimits(user="u", limits=[Limit("MaxSubmitJobs", "QOS q (sacctmgr)", 10, queued=4)])
    tasks.consume(3)
    assert tasks.free_slots == 3  # SLURM's limits count each task


def _fake_qsub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answer: str) -> Path:
    """qsub answers ``answer``; qdel lists what it was asked to cancel in the returned file."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "qdel-calls.txt"
    bin_dir.mkdir()
    (bin_dir / "qsub").write_text(f"#!/bin/sh\nprintf '%s\\n' '{answer}'\n")
    (bin_dir / "qdel").write_text(f'#!/bin/sh\necho "$*" >> "{calls}"\n')
    for name in ("qsub", "qdel"):
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return calls


def _submit(tmp_path: Path, count: int):
    from hpc_runner.monai_cli.job import run_monai_command
    from hpc_runner.scheduler.executor import JobRequest
    from hpc_runner.scheduler.gridengine.executor import GridEngineExecutor
    from hpc_runner.scheduler.profile import ClusterProfile

    ex = GridEngineExecutor(ClusterProfile("sge", [], {"executor": "gridengine", "time": 10}))
    request = JobRequest(job_name="s1", folder=tmp_path / "logs", chdir=str(tmp_path))
    return ex.submit(run_monai_command, [["init_bundle"] * count, [[f"b{k}"] for k in range(count)]], request)


@pytest.mark.parametrize(("count", "answer", "ids"), [
    (3, "4242.1-3:1", ["4242_0", "4242_1", "4242_2"]),
    (3, "4242", ["4242_0", "4242_1", "4242_2"]),  # a site's wrapper printing the number alone: the tasks asked
    (1, "4242", ["4242"]),
])
def test_qsubs_answer_gives_the_job_and_the_tasks_the_script_asked_for(count, answer, ids, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_qsub(tmp_path, monkeypatch, answer)
    assert [job.job_id for job in _submit(tmp_path, count)] == ids and not calls.exists()


@pytest.mark.parametrize(("count", "answer"), [(2, "4242.1-5:1"), (3, "4242.2-3:1"), (1, "4242.1-2:1")])
def test_an_answer_naming_other_tasks_than_asked_cancels_the_job_and_records_nothing(
        count, answer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Trusting it would record a point unsubmitted while its task runs (and resume would send it again), or
    give ids to tasks that were never asked for."""
    calls = _fake_qsub(tmp_path, monkeypatch, answer)
    with pytest.raises(ClusterError, match="was cancelled"):
        _submit(tmp_path, count)
    assert calls.read_text() == "4242\n" and list((tmp_path / "logs").iterdir()) == []

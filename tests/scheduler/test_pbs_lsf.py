"""PBS Professional and LSF by their scripts: the job scripts our builders write, diffed against golden files,
and the answers their documentation shows (tests/scheduler/golden/pbs|lsf, each README says which doc), parsed
into our JobStatus and Usage. No PBS or LSF runs here; the commands are stand-ins on PATH that print the golden
answers. HPCR_UPDATE_GOLDEN=1 rewrites the golden scripts (then read the diff).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hpc_runner.errors import ClusterError, UserError
from hpc_runner.scheduler.job_arguments import JOB_COMMAND
from hpc_runner.scheduler.job_status import JobState
from hpc_runner.scheduler.lsf import answers as lsf_answers
from hpc_runner.scheduler.lsf import commands as lsf_commands
from hpc_runner.scheduler.lsf import job_script as lsf_script
from hpc_runner.scheduler.lsf import job_side as lsf_side
from hpc_runner.scheduler.lsf.settings import LsfSettings
from hpc_runner.scheduler.pbs import answers as pbs_answers
from hpc_runner.scheduler.pbs import commands as pbs_commands
from hpc_runner.scheduler.pbs import job_script as pbs_script
from hpc_runner.scheduler.pbs import job_side as pbs_side
from hpc_runner.scheduler.pbs.settings import PbsSettings

GOLDEN = Path(__file__).with_name("golden")
COMMAND = ["/opt/venv/bin/python", *JOB_COMMAND, "/scratch/sweeps/s1/jobs/array-0123456789ab.json"]
LOGS = "/scratch/sweeps/s1/logs"
WORKDIR = "/scratch/sweeps/s1"


def _same_as_golden(text: str, name: str) -> None:
    path = GOLDEN / name
    if os.environ.get("HPCR_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert text == path.read_text(), f"{name} changed: rerun with HPCR_UPDATE_GOLDEN=1 and read the diff"


@pytest.fixture
def recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``recorded(command, golden_file)``: ``command`` on PATH prints that golden answer."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")

    def record(command: str, name: str) -> None:
        script = bin_dir / command
        script.write_text(f"#!/bin/sh\ncat > /dev/null 2>&1 < /dev/null\ncat '{GOLDEN / name}'\n")
        script.chmod(0o755)

    return record


# ------------------------------------------------------------------------------------------------ PBS scripts

PBS = PbsSettings.from_mapping({"queue": "gpu", "ncpus": 8, "ngpus": 1, "mem": "32G", "walltime": "02:00:00",
                                "account": "rad-ai", "project": "p123", "place": "scatter:excl"})


def test_pbs_script_of_one_job_asks_one_chunk_its_walltime_and_account() -> None:
    script = pbs_script.job_script(PBS, job_name="hpcr-one", log_folder=LOGS, command=COMMAND, workdir=WORKDIR,
                                   setup=["module load cuda/12.2"])
    _same_as_golden(script, "pbs/pbs_one.sh")
    assert "#PBS -l select=1:ncpus=8:ngpus=1:mem=32gb" in script and "#PBS -J" not in script


def test_pbs_script_of_an_array_runs_at_most_k_subjobs_after_its_dependency() -> None:
    script = pbs_script.job_script(PBS, job_name="hpcr-sweep", log_folder=LOGS, command=COMMAND, workdir=WORKDIR,
                                   array_size=4, max_running=2, after_ok=["1234.pbs01", "1235[].pbs01"])
    _same_as_golden(script, "pbs/pbs_array.sh")
    assert "#PBS -J 0-3\n#PBS -W max_run_subjobs=2\n#PBS -W depend=afterok:1234.pbs01:1235[].pbs01\n" in script


def test_pbs_array_of_one_task_is_a_plain_job() -> None:
    script = pbs_script.job_script(PBS, job_name="one", log_folder=LOGS, command=COMMAND, array_size=1, max_running=1)
    assert "#PBS -J" not in script and "max_run_subjobs" not in script


@pytest.mark.parametrize("values", [{"queue": "gpu q"}, {"queue": "gpu\n#PBS -l"}, {"mem": "lots"},
                                    {"walltime": "2 hours"}, {"ncpus": "²"}, {"ncpus": 0}, {"place": "scatter;rm"},
                                    {"qeue": "gpu"}, {"account": ["a"]}])
def test_pbs_settings_refuse_values_pbs_would_misread(values: dict) -> None:
    with pytest.raises(ClusterError):
        PbsSettings.from_mapping(values)


@pytest.mark.parametrize("kwargs", [{"select": True}, {"ncpus": 0}, {"ngpus": -1}, {"ncpus": 2.5}])
def test_settings_made_directly_refuse_counts_their_scheduler_would_misread(kwargs: dict) -> None:
    """The dataclass checks itself too (a True is no count of 1): PBS's as LSF's."""
    with pytest.raises(ClusterError):
        PbsSettings(**kwargs)
    lsf = {"select": "slots", "ncpus": "slots", "ngpus": "gpus"}
    with pytest.raises(ClusterError):
        LsfSettings(**{lsf[k]: v for k, v in kwargs.items()})


def test_pbs_misspelled_setting_names_the_valid_ones() -> None:
    with pytest.raises(ClusterError) as err:
        PbsSettings.from_mapping({"wallclock": "1:00:00"})
    assert "walltime" in err.value.paragraph()


@pytest.mark.parametrize("kwargs", [{"job_name": "a b"}, {"log_folder": "/x/y:z"}, {"log_folder": "/x/a b"},
                                    {"after_ok": ["1234; rm -rf /"]}, {"array_size": 0}, {"command": []},
                                    {"command": ["python", "a\nb"]}, {"setup": ["#PBS -q other"]}])
def test_pbs_script_refuses_what_would_change_its_options_or_command(kwargs: dict) -> None:
    base = {"job_name": "ok", "log_folder": LOGS, "command": COMMAND}
    with pytest.raises(ClusterError):
        pbs_script.job_script(PBS, **{**base, **kwargs})


def test_pbs_script_quotes_command_words_for_the_shell() -> None:
    script = pbs_script.job_script(PBS, job_name="ok", log_folder=LOGS, command=["python", "-c", "print('$HOME; x')"])
    assert script.endswith("exec python -c 'print('\"'\"'$HOME; x'\"'\"')'\n")


# ------------------------------------------------------------------------------------------------ PBS answers


def test_qsub_answers_of_a_job_and_an_array() -> None:
    one = pbs_answers.parse_submission((GOLDEN / "pbs/qsub_one.txt").read_text())
    array = pbs_answers.parse_submission((GOLDEN / "pbs/qsub_array.txt").read_bytes())
    assert (one.job_id, one.native_id, one.array) == ("1234", "1234.pbs01", False)
    assert (array.job_id, array.native_id, array.array) == ("1235", "1235[].pbs01", True)


def test_qstat_json_maps_each_pbs_state_and_exit_status_to_ours(recorded) -> None:
    recorded("qstat", "pbs/qstat_jobs.json")
    reports = pbs_commands.job_reports(["1234", "1235[]", "1236"])
    states = {job: r.status.state for job, r in reports.items()}
    assert states == {
        "1234": JobState.COMPLETED, "1236": JobState.TIMEOUT, "1237": JobState.OUT_OF_MEMORY,
        "1238": JobState.CANCELLED, "1239": JobState.PENDING, "1240": JobState.CANCELLED,
        "1241": JobState.NODE_FAIL, "1242": JobState.PENDING, "1235": JobState.RUNNING,
        "1235_0": JobState.COMPLETED, "1235_1": JobState.RUNNING, "1235_2": JobState.FAILED,
    }
    held = reports["1239"].status
    assert held.raw == "H" and held.requeues == 20 and "too many failed attempts" in (held.reason or "")
    assert reports["1235_1"].status.node == "node06" and reports["1235_2"].status.exit_code == 3
    assert reports["1241"].status.requeues == 1


def test_qstat_json_gives_usage_in_our_units() -> None:
    usage = pbs_answers.reports_from_qstat((GOLDEN / "pbs/qstat_jobs.json").read_text())["1234"].usage
    assert usage.elapsed_s == 900 and usage.cpu_time_s == 6600 and usage.time_limit_s == 7200
    assert usage.peak_memory_bytes == 3836 * 1024 and usage.memory_request_bytes == 32 << 30
    assert (usage.cpus, usage.gpus, usage.gpu_hours) == (8, 1, 0.25)


# ------------------------------------------------------------------------------------------------ LSF scripts

LSF = LsfSettings.from_mapping({"queue": "gpu", "slots": 8, "mem": "32G", "run_limit": "2:00", "gpus": 1,
                                "project": "rad-ai"})


def test_lsf_script_of_one_job_reserves_and_limits_memory_with_units() -> None:
    script = lsf_script.job_script(LSF, job_name="hpcr-one", log_folder=LOGS, command=COMMAND, workdir=WORKDIR,
                                   setup=["module load cuda/12.2"])
    _same_as_golden(script, "lsf/lsf_one.sh")
    assert '#BSUB -R "rusage[mem=32GB]"\n#BSUB -M 32GB\n#BSUB -W 2:00\n' in script


def test_lsf_script_of_an_array_names_its_range_and_limit_and_waits_on_done() -> None:
    script = lsf_script.job_script(LSF, job_name="hpcr-sweep", log_folder=LOGS, command=COMMAND, workdir=WORKDIR,
                                   array_size=4, max_running=2, after_ok=["5678", "5683"])
    _same_as_golden(script, "lsf/lsf_array.sh")
    assert '#BSUB -J "hpcr-sweep[1-4]%2"\n' in script and '#BSUB -w "done(5678) && done(5683)"\n' in script
    assert "#BSUB -o /scratch/sweeps/s1/logs/%J_%I.out\n" in script and '#BSUB -Q 99\n' in script


@pytest.mark.parametrize("values", [{"queue": "a b"}, {"run_limit": "1:75"}, {"run_limit": "٣"}, {"slots": -1},
                                    {"mem": "1Q"}, {"gpus": True}, {"requeue_exit": 0}, {"quue": "x"}])
def test_lsf_settings_refuse_values_lsf_would_misread(values: dict) -> None:
    with pytest.raises(ClusterError):
        LsfSettings.from_mapping(values)


@pytest.mark.parametrize("kwargs", [{"job_name": "a[1]"}, {"log_folder": "/x/%J"}, {"log_folder": '/x/"a'},
                                    {"after_ok": ["5678) || done(1"]}, {"max_running": 0, "array_size": 2},
                                    {"setup": ["#BSUB -q other"]}])
def test_lsf_script_refuses_what_would_change_its_options(kwargs: dict) -> None:
    base = {"job_name": "ok", "log_folder": LOGS, "command": COMMAND}
    with pytest.raises(ClusterError):
        lsf_script.job_script(LSF, **{**base, **kwargs})


# ------------------------------------------------------------------------------------------------ LSF answers


def test_bsub_answer_names_the_job_and_its_queue() -> None:
    job = lsf_answers.parse_submission((GOLDEN / "lsf/bsub.txt").read_text())
    assert (job.job_id, job.queue) == ("5678", "normal")
    assert lsf_answers.parse_submission((GOLDEN / "lsf/bsub_default_queue.txt").read_bytes()).job_id == "5683"


def test_bjobs_json_maps_each_lsf_state_and_exit_reason_to_ours(recorded) -> None:
    recorded("bjobs", "lsf/bjobs.json")
    reports = lsf_commands.job_reports(["5678", "5683", "9999"])
    states = {job: r.status.state for job, r in reports.items()}
    assert states == {
        "5678": JobState.COMPLETED, "5679": JobState.TIMEOUT, "5680": JobState.OUT_OF_MEMORY,
        "5681": JobState.CANCELLED, "5682": JobState.PENDING, "5683_0": JobState.COMPLETED,
        "5683_1": JobState.RUNNING, "5683_2": JobState.FAILED, "5684": JobState.PENDING, "5685": JobState.PREEMPTED,
    }  # 9999 is not found: left out
    assert reports["5683_1"].status.node == "hostE" and reports["5683_2"].status.exit_code == 3
    assert reports["5682"].status.reason == "Job dependency condition not satisfied;"
    usage = reports["5678"].usage
    assert (usage.elapsed_s, usage.cpu_time_s, usage.time_limit_s) == (900, 6600.5, 7200)
    assert usage.peak_memory_bytes == int(3.7 * (1 << 30)) and usage.memory_request_bytes == 32 << 30
    assert (usage.cpus, usage.gpus) == (8, 1)


def test_lsf_ids_convert_between_our_tasks_and_its_indices() -> None:
    assert lsf_commands.native_id("5683_0") == "5683[1]" and lsf_commands.native_id("5683") == "5683"
    assert lsf_commands.cancel_argv(["5683_2"]) == ["bkill", "5683[3]"]
    assert pbs_commands.cancel_argv(["1235_2", "1234"]) == ["qdel", "1235[2]", "1234"]
    with pytest.raises(ClusterError):
        lsf_commands.native_id("5683_²")


# ------------------------------------------------------------------------------------------------ hostile answers

HOSTILE = [b"", b"\xff\xfe\x00garbage", "１２３４.pbs01".encode(), b"1234\xb2.server", b"[" * 100_000,
           b'{"Jobs": {"1.s": {"job_state": "\xe2\x80\xae", "Exit_status": "\xc2\xb2"}}}',
           b'{"Jobs": {"1.s": {"job_state": "F", "Exit_status": 1e400, "resources_used": [1]}}}',
           b'{"Jobs": {"1.s": {"job_state": ["F"], "run_count": true, "exec_host": 7}}}',
           b'{"RECORDS": [{"JOBID": "\xd9\xa3", "STAT": "DONE"}, {"JOBID": "7", "JOBINDEX": "-1"}, 5, null]}',
           b'{"RECORDS": [{"JOBID": "7", "STAT": "EXIT", "EXIT_CODE": "\xc2\xb2", "MAX_MEM": "9e999 Gbytes"}]}',
           b"Job <> is submitted", b"x" * (1 << 20), b"Job <1234\xb2> is submitted to queue <n>."]


@pytest.mark.parametrize("answer", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_answers_read_as_unknown_or_a_user_error(answer: bytes) -> None:
    for parse in (pbs_answers.parse_submission, pbs_answers.reports_from_qstat, lsf_answers.parse_submission,
                  lsf_answers.reports_from_bjobs):
        try:
            result = parse(answer)
        except UserError:
            continue
        if isinstance(result, dict):
            for report in result.values():
                assert isinstance(report.status.state, JobState)


def test_unknown_state_words_are_unknown_not_a_guess() -> None:
    reports = pbs_answers.reports_from_qstat('{"Jobs": {"7.s": {"job_state": "Z"}}}')
    assert reports["7"].status.state is JobState.UNKNOWN
    garbled = pbs_answers.reports_from_qstat('{"Jobs": {"8.s": {"job_state": "F", "Exit_status": "\u00b2"}}}')
    assert garbled["8"].status.state is JobState.UNKNOWN
    reports = lsf_answers.reports_from_bjobs('{"RECORDS": [{"JOBID": "7", "JOBINDEX": "0", "STAT": "WEIRD"}]}')
    assert reports["7"].status.state is JobState.UNKNOWN


# ------------------------------------------------------------------------------------------------ job sides


def test_pbs_job_side_reads_its_subjob_hosts_cpus_and_scratch(tmp_path: Path) -> None:
    nodefile = tmp_path / "nodes"
    nodefile.write_text("node06\nnode06\nnode07\nnode07\n")
    env = {"PBS_JOBID": "1235[1].pbs01", "PBS_ARRAY_INDEX": "1", "PBS_NODEFILE": str(nodefile), "NCPUS": "2",
           "TMPDIR": "/local/pbs.1235[1]", "PBS_JOBNAME": "hpcr-sweep", "PBS_QUEUE": "gpu"}
    job = pbs_side.this_job(env)
    assert job is not None and (job.job_id, job.array_task, job.cpus) == ("1235_1", 1, 2)
    assert job.nodes == ("node06", "node07") and job.processes == 4 and str(job.scratch) == "/local/pbs.1235[1]"
    assert pbs_side.requeue_argv(job) == ["qrerun", "1235[1].pbs01"]
    assert pbs_side.this_job({}) is None
    with pytest.raises(ClusterError):
        pbs_side.this_job({"PBS_JOBID": "1235.pbs01", "NCPUS": "٨"})


def test_lsf_job_side_reads_its_element_slots_and_hosts(tmp_path: Path) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("hostE\nhostE\nhostF\nhostF\n")
    env = {"LSB_JOBID": "5683", "LSB_JOBINDEX": "2", "LSB_DJOB_HOSTFILE": str(hostfile), "LSB_DJOB_NUMPROC": "4",
           "TMPDIR": "/tmp/5683.tmpdir", "LSB_HOSTS": "ignored"}
    job = lsf_side.this_job(env)
    assert job is not None and (job.job_id, job.native_id, job.array_task, job.slots) == ("5683_1", "5683[2]", 1, 4)
    assert job.nodes == ("hostE", "hostF") and lsf_side.requeue_argv(job) == ["brequeue", "5683[2]"]
    plain = lsf_side.this_job({"LSB_JOBID": "5678", "LSB_JOBINDEX": "0", "LSB_HOSTS": "hostA hostA hostB"})
    assert plain is not None and (plain.job_id, plain.array_task) == ("5678", None)
    assert plain.nodes == ("hostA", "hostB")
    assert lsf_side.requeue_exit_status() == LSF.requeue_exit == 99

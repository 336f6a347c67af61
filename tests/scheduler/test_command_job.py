"""A command array: one JSON file of arguments per array, read by each task; what is not JSON goes to submitit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpc_runner.jobs.task import run_sweep_task
from hpc_runner.records.atomic import write_text_atomic
from hpc_runner.scheduler.job_arguments import task_arguments
from hpc_runner.scheduler.slurm.command_job import args_file_for, usable_folder
from hpc_runner.scheduler.slurm.job_call import task_call


def echo_args(*args: object) -> None:
    """Not one of hpc-runner's functions: a command array refuses to name it."""


def test_a_sweep_tasks_arguments_are_one_json_file_each_task_reads_its_own(tmp_path: Path) -> None:
    points = [[{"index": i, "dir": f"points/{i:04d}", "overrides": {"lr": 10.0 ** -i, "net::ch": [8, 16]}}]
              for i in range(3)]
    text = task_arguments(run_sweep_task, [["/s"] * 3, points, ["training"] * 3, [{"cluster": "c"}] * 3, [1] * 3])
    assert text is not None
    args_file = args_file_for(tmp_path)
    args_file.write_text(text)
    fn, args = task_call(args_file, 2)
    assert fn is run_sweep_task and args == ["/s", points[2], "training", {"cluster": "c"}, 1]
    with pytest.raises(ValueError, match="no arguments for task 3"):
        task_call(args_file, 3)


@pytest.mark.parametrize("argument_lists", [
    [[(1, 2), (3, 4)]],  # tuples would come back as lists
    [[object(), object()]],  # not JSON at all
    [[float("nan"), 1.0]],  # not JSON either
])
def test_arguments_that_would_not_read_back_equal_go_to_submitit(argument_lists: list) -> None:
    assert task_arguments(run_sweep_task, argument_lists) is None


def test_only_hpc_runners_array_entries_are_named_or_called(tmp_path: Path) -> None:
    assert task_arguments(echo_args, [[1, 2]]) is None  # a test module's function: submitit pickles it instead
    assert task_arguments(write_text_atomic, [["a", "b"], ["c", "d"]]) is None  # ours, but no array entry
    for function in ("os:system", "hpc_runner.records.atomic:write_text_atomic"):
        args_file = tmp_path / "array-edited.json"
        args_file.write_text(json.dumps({"function": function, "tasks": [[str(tmp_path / "pwned"), "x"]]}))
        with pytest.raises(ValueError, match="not a function"):
            task_call(args_file, 0)
    assert not (tmp_path / "pwned").exists()


def test_a_folder_with_a_job_id_pattern_cannot_hold_the_file_before_sbatch(tmp_path: Path) -> None:
    assert usable_folder(tmp_path / "jobs") and not usable_folder(tmp_path / "jobs" / "%A")


def test_a_task_whose_call_raises_ends_with_status_1_and_the_traceback(tmp_path: Path) -> None:
    """As under submitit's runner (the calls that return are the sweeps of tests/slurm)."""
    args_file = tmp_path / "array-x.json"
    missing = str(tmp_path / "no-sweep")
    args_file.write_text(task_arguments(run_sweep_task, [[missing], [[{"index": 0, "dir": "points/0000",
                                                                       "overrides": {}}]]]) or "")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "SLURM_JOB_ID": "42"}
    for k in ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_JOB_ID"):
        env.pop(k, None)
    cmd = [sys.executable, "-m", "hpc_runner.scheduler.slurm.job_call", str(args_file)]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)  # a job that is no array: task 0
    assert res.returncode == 1 and "Traceback" in res.stderr, res.stdout + res.stderr
    # beside its logs, a note that the call ended (`submit --wait` reads it, as submitit's result pickle)
    note = json.loads((tmp_path / "42_0_result.json").read_text())
    assert note["call"] == "raised" and "no-sweep" in note["error"]
    assert subprocess.run(cmd[:-1], env=env, capture_output=True, text=True).returncode == 2  # no file named
    outside = {k: v for k, v in env.items() if k != "SLURM_JOB_ID"}
    assert subprocess.run(cmd, env=outside, capture_output=True, text=True).returncode == 2  # not in a job
    # an array queued by an earlier version names the module array_task: it runs the same call
    old = [sys.executable, "-m", "hpc_runner.scheduler.slurm.array_task", str(args_file)]
    (tmp_path / "42_0_result.json").unlink()
    res = subprocess.run(old, env={**env, "SLURM_ARRAY_TASK_ID": "0"}, capture_output=True, text=True, timeout=120)
    assert res.returncode == 1 and "no-sweep" in res.stderr, res.stdout + res.stderr
    assert not list(tmp_path.glob("*_result.json"))  # an array's tasks write no note: 2,000 more files


@pytest.mark.parametrize("job_id", ["4242_17", "4243"])
def test_a_jobs_logs_are_named_where_submitit_puts_them(tmp_path: Path, job_id: str) -> None:
    from submitit.core.utils import JobPaths

    from hpc_runner.scheduler.slurm.command_job import _task_job

    job = _task_job(tmp_path, job_id)
    paths = JobPaths(tmp_path, job_id=job_id, task_id=0)
    assert (job.job_id, job.stdout, job.stderr) == (job_id, paths.stdout, paths.stderr)
    assert job.logs == {"stdout": str(paths.stdout), "stderr": str(paths.stderr)}


def test_a_submitted_runs_job_is_a_command_job_too(tmp_path: Path) -> None:
    from hpc_runner.jobs.job import run_submitted

    text = task_arguments(run_submitted, [[str(tmp_path / "run")], ["training"], [{"cluster": "c"}]])
    assert text is not None and json.loads(text)["function"] == "hpc_runner.jobs.job:run_submitted"
    args_file = args_file_for(tmp_path, array=False)
    assert args_file.name.startswith("job-") and args_file_for(tmp_path).name.startswith("array-")
    args_file.write_text(text)
    assert task_call(args_file, 0) == (run_submitted, [str(tmp_path / "run"), "training", {"cluster": "c"}])


def test_an_arguments_file_of_an_earlier_version_names_the_entry_before_it_moved_to_jobs(tmp_path: Path) -> None:
    """A job queued (or requeued) before the jobs core left sweep/ still runs its task (job_arguments MOVED_ENTRIES)."""
    args_file = tmp_path / "array-old.json"
    args_file.write_text(json.dumps({"function": "hpc_runner.sweep.task:run_sweep_task", "tasks": [["/s", [], "t"]]}))
    fn, args = task_call(args_file, 0)
    assert fn is run_sweep_task and args == ["/s", [], "t"]
    args_file.write_text(json.dumps({"function": "hpc_runner.sweep.spec:parse_spec", "tasks": [["x"]]}))
    with pytest.raises(ValueError, match="not a function"):
        task_call(args_file, 0)

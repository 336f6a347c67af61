"""What the real SLURM printed (tests/scheduler/golden, recorded by scripts/record_slurm_goldens.py on the local
cluster), read through our parsers; and the in-memory cluster's sacct text in the same shape.

The commands are stand-ins on PATH that print the recorded text, so the code under test runs its own
subprocess call and its own parsing, exactly as on the cluster, with no cluster.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hpc_runner.scheduler.executor import JobRequest
from hpc_runner.scheduler.job_state import FROM_ACCOUNTING
from hpc_runner.scheduler.job_status import JobState
from hpc_runner.scheduler.memory.executor import MemoryCluster
from hpc_runner.scheduler.profiles import ClusterProfile
from hpc_runner.scheduler.select import executor_for
from hpc_runner.scheduler.slurm import accounting, cluster_info
from hpc_runner.scheduler.slurm.executor import SlurmExecutor
from hpc_runner.scheduler.slurm.job_clock import job_end_time

GOLDEN = Path(__file__).with_name("golden")
JOBS = json.loads((GOLDEN / "jobs.json").read_text())


@pytest.fixture
def recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``recorded(command, golden_file)``: ``command`` on PATH prints that recorded output."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setattr(cluster_info, "_CACHE", {})

    def record(command: str, name: str | None) -> None:
        script = bin_dir / command
        script.write_text(f"#!/bin/sh\ncat '{GOLDEN / name}'\n" if name else "#!/bin/sh\nexit 0\n")
        script.chmod(0o755)

    return record


def test_sacct_of_completed_failed_cancelled_requeued_and_held_jobs(recorded) -> None:
    recorded("sacct", "sacct.txt")
    array, requeued, held = JOBS["array"], JOBS["requeued"], JOBS["held"]
    answer = accounting.query_scheduler([array, requeued, held])
    assert answer.source == FROM_ACCOUNTING and answer.said() == "sacct" and answer.calls == 1
    states = {job: answer.statuses[job].state for job in (f"{array}_0", f"{array}_1", f"{array}_2")}
    assert states == {f"{array}_0": JobState.COMPLETED, f"{array}_1": JobState.FAILED, f"{array}_2": JobState.CANCELLED}
    assert answer.statuses[f"{array}_1"].exit_code == 3 and answer.statuses[f"{array}_1"].signal is None
    assert answer.requeues(requeued) >= 1  # sacct -D keeps the requeued attempt's record
    attempts = answer.attempts[requeued]
    assert attempts[-1].state == "COMPLETED" and attempts[0].state == "REQUEUED" and attempts[0].node
    assert answer.statuses[held].state is JobState.CANCELLED
    assert all(u.elapsed_s is not None and u.cpus for u in answer.usage.values() if u.cpus)  # what each job used


def test_squeue_states_and_pending_reasons(recorded) -> None:
    recorded("squeue", "squeue_states.txt")
    states = accounting.queued_states([JOBS["array"], JOBS["requeued"], JOBS["held"]])
    assert states is not None and states.get(f"{JOBS['array']}_2") == "RUNNING"
    assert states.get(JOBS["held"]) == "PENDING"
    recorded("squeue", "squeue_reasons.txt")
    reasons = SlurmExecutor(ClusterProfile("slurm", [], {})).pending_reasons([JOBS["held"]])
    assert reasons == {JOBS["held"]: "DependencyNeverSatisfied"}


def test_scontrol_gives_the_job_end_time_and_the_max_array_size(recorded) -> None:
    recorded("squeue", None)  # squeue answers nothing: the end time comes from scontrol show job
    recorded("scontrol", "scontrol_show_job.txt")
    end = job_end_time(JOBS["requeued"], environ={})
    assert end is not None and end > 1.7e9
    recorded("scontrol", "scontrol_show_config.txt")
    size, source = cluster_info.max_array_size()
    assert (size, source) == (1001, "scontrol show config")


def test_the_in_memory_cluster_answers_in_the_typed_shape_slurms_parser_gives(recorded) -> None:
    """The contract between the two schedulers the tests use: the same typed answer, the same figures known."""
    recorded("sacct", "sacct.txt")
    slurm = accounting.query_scheduler([JOBS["array"]])
    cluster = MemoryCluster()
    with cluster.installed():
        executor = executor_for(ClusterProfile("mem", [], {"executor": "memory", "time": 5}))
        jobs = executor.submit(print, [[0, 1]], JobRequest(job_name="golden", folder=Path("/nonexistent")))
        cluster.advance(0)
        cluster.finish(jobs[0].job_id)
        cluster.finish(jobs[1].job_id, "FAILED", exit_code="3:0")
        ours = executor.query([jobs[0].job_id])
    assert {j: s.state for j, s in ours.statuses.items()} == {jobs[0].job_id: JobState.COMPLETED,
                                                              jobs[1].job_id: JobState.FAILED}
    assert ours.statuses[jobs[1].job_id].exit_code == slurm.statuses[f"{JOBS['array']}_1"].exit_code == 3
    known = {f for f in ("elapsed_s", "time_limit_s", "cpus", "memory_request_bytes")
             if getattr(slurm.usage[f"{JOBS['array']}_0"], f) is not None}
    assert known and all(getattr(ours.usage[jobs[0].job_id], f) is not None for f in known)


# a profile that reaches every part of the job script: options, the array, setup lines, srun arguments, sbatch extras
SBATCH_SETTINGS = {"executor": "slurm", "partition": "small", "gpus_per_node": 1, "cpus_per_task": 5, "mem_gb": 32,
                   "time": "24:00:00", "account": "proj-1", "setup": ["module load cuda/12.1"],
                   "env": {"PYTHONUNBUFFERED": "1"}, "signal_delay_s": 120, "array_parallelism": 32,
                   "python": "/opt/venv/bin/python", "srun_args": ["--cpu-bind=cores"], "sbatch": {"mail_type": "END"}}


def test_the_sbatch_script_is_the_recorded_one_byte_for_byte() -> None:
    """The script sbatch gets (submitit renders it, scheduler/slurm/job_script.py proves it) is unchanged: a
    submitit upgrade that writes it differently fails here, not only in the proof at submission time."""
    executor = SlurmExecutor(ClusterProfile("golden", [], SBATCH_SETTINGS))
    array = JobRequest(job_name="my bundle (v2)", folder=Path("/scratch/sweeps/s1/jobs/%A"),
                       chdir="/scratch/sweeps/s1", hold=True, exclude="gpu7", dependency="afterok:123",
                       describe="hpc-runner: sweep points 0-11 of /scratch/sweeps/s1; training of /scratch/bundles/b")
    assert executor.script(array, 12) == (GOLDEN / "sbatch_array.sh").read_text()
    one = JobRequest(job_name="run", folder=Path("/scratch/runs/r1/jobs/%j"))
    assert executor.script(one, 1) == (GOLDEN / "sbatch_one.sh").read_text()
    # a command job (its folder exists before sbatch): the first comment says what runs, the command is one a
    # user can run by hand (hpc-runner job FILE through the profile's python)
    command = JobRequest(job_name="my bundle (v2)", folder=Path("/scratch/sweeps/s1/jobs"), chdir="/scratch/sweeps/s1",
                         describe="hpc-runner: sweep points 0-3 of /scratch/sweeps/s1; training of /scratch/bundles/b")
    text = executor.script(command, 4)
    assert text == (GOLDEN / "sbatch_command.sh").read_text()
    assert text.splitlines()[1] == f"# {command.describe}"
    assert text.rstrip().endswith("/opt/venv/bin/python -u -m hpc_runner job /scratch/sweeps/s1/jobs/array-ID.json")

"""End to end on a real Grid Engine (scripts/local-sge.sh start): an array of hpc-runner job entries completes;
a job over h_rt is TIMEOUT, over h_vmem OUT_OF_MEMORY (sge_execd's kill, and the address-space limit's
MemoryError in our job runner); -hold_jid holds a dependent job until its dependency ended; qdel cancels; exit 99
runs a job again. States are read as hpc-runner reads them: GridEngineExecutor.query (qstat, then qacct)."""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

import pytest

from hpc_runner.monai_cli.job import run_monai_command
from hpc_runner.scheduler.executor import JobRequest, SchedulerAnswer
from hpc_runner.scheduler.gridengine import commands
from hpc_runner.scheduler.gridengine.executor import GridEngineExecutor
from hpc_runner.scheduler.gridengine.job_script import job_script
from hpc_runner.scheduler.gridengine.settings import GridEngineSettings
from hpc_runner.scheduler.job_status import JobState
from hpc_runner.scheduler.profile import ClusterProfile

pytestmark = [pytest.mark.gridengine, pytest.mark.usefixtures("grid_engine")]
ROOT = Path(__file__).resolve().parents[2]


def executor(**gridengine: object) -> GridEngineExecutor:
    settings = {"executor": "gridengine", "gridengine": dict(gridengine)}
    return GridEngineExecutor(ClusterProfile("sge-local", [], settings))


def submit_command(tmp_path: Path, command: list[str], name: str = "hpcr-test", hold_jids: tuple[str, ...] = (),
                   **requests: object) -> str:
    """Submit ``command`` as one job (the script our builder writes); return its id."""
    logs = tmp_path / "logs"
    logs.mkdir(exist_ok=True)
    script = job_script(GridEngineSettings.from_mapping(requests), job_name=name, log_folder=str(logs),
                        command=command, workdir=str(tmp_path), hold_jids=list(hold_jids))
    path = tmp_path / f"{name}.sh"
    path.write_text(script)
    return commands.submit(path).job_id


def wait_final(ex: GridEngineExecutor, job_ids: list[str], timeout: float = 120) -> SchedulerAnswer:
    """Ask (as status does) until every job has a final state."""
    end = time.monotonic() + timeout
    while True:
        answer = ex.query(job_ids)
        if all((s := answer.status(j)) is not None and s.state.final for j in job_ids):
            return answer
        if time.monotonic() > end:
            raise AssertionError(f"not final after {timeout}s: {answer.statuses}")
        time.sleep(1)


def wait_state(ex: GridEngineExecutor, job_id: str, state: JobState, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while (s := ex.query([job_id]).status(job_id)) is None or s.state is not state:
        assert time.monotonic() < end, f"{job_id} not {state} after {timeout}s: {s}"
        time.sleep(0.5)


def test_an_array_of_four_job_entries_completes_two_at_a_time(tmp_path: Path) -> None:
    ex = executor()
    request = JobRequest(job_name="hpcr-array", folder=tmp_path / "logs", chdir=str(tmp_path), array_parallelism=2)
    folders = [str(tmp_path / f"bundle{k}") for k in range(4)]
    ex.check_resources(request, 4, "4 tasks")
    jobs = ex.submit(run_monai_command, [["init_bundle"] * 4, [[f] for f in folders]], request)
    assert [j.job_id.split("_")[1] for j in jobs] == ["0", "1", "2", "3"]
    answer = wait_final(ex, [j.job_id for j in jobs], timeout=240)
    assert {answer.status(j.job_id).state for j in jobs} == {JobState.COMPLETED}, answer.statuses
    assert all((Path(f) / "configs" / "metadata.json").is_file() for f in folders)
    assert all(j.stdout.is_file() and "init_bundle done" in j.stdout.read_text() for j in jobs)
    assert answer.usage[jobs[0].job_id].cpus == 1 and answer.usage[jobs[0].job_id].elapsed_s is not None


def test_a_job_over_its_h_rt_is_timeout(tmp_path: Path) -> None:
    ex = executor()
    job = submit_command(tmp_path, ["sleep", "60"], name="hpcr-h_rt", h_rt="3")
    status = wait_final(ex, [job]).status(job)
    # -notify: SIGUSR2 comes before the SIGKILL, and `sleep` dies of it (140); a job that handles it gets 137
    assert status.state is JobState.TIMEOUT and status.exit_code in (137, 140), status


def test_a_job_whose_processes_pass_h_vmem_together_is_killed_out_of_memory(tmp_path: Path) -> None:
    ex = executor()
    grow = f"{shlex.quote(sys.executable)} -c 'import time; b = bytearray(200 << 20); time.sleep(30)'"
    job = submit_command(tmp_path, ["bash", "-c", f"{grow} & {grow} & wait"], name="hpcr-h_vmem", h_vmem="300M")
    answer = wait_final(ex, [job])
    assert answer.status(job).state is JobState.OUT_OF_MEMORY, answer.status(job)
    assert answer.usage[job].peak_memory_bytes > answer.usage[job].memory_request_bytes == 300 << 20


def test_a_job_entry_whose_allocation_fails_at_h_vmem_is_out_of_memory(tmp_path: Path) -> None:
    # h_vmem is also the address-space limit: one process past it gets MemoryError, not a kill; job_call exits 137
    ex = executor()
    code = ("import sys; from hpc_runner.scheduler import job_call; "
            "job_call.task_call = lambda f, t: ((lambda: bytearray(1 << 30)), []); "
            "sys.exit(job_call.main(['/dev/null']))")
    job = submit_command(tmp_path, [sys.executable, "-c", code], name="hpcr-memoryerror", h_vmem="400M")
    status = wait_final(ex, [job]).status(job)
    assert status.state is JobState.OUT_OF_MEMORY and status.exit_code == 137, status
    assert "MemoryError" in next((tmp_path / "logs").glob("hpcr-memoryerror.e*")).read_text()


def test_hold_jid_holds_a_dependent_job_until_its_dependency_ended(tmp_path: Path) -> None:
    ex = executor()
    first = submit_command(tmp_path, ["sleep", "5"], name="hpcr-first")
    second = submit_command(tmp_path, ["true"], name="hpcr-second", hold_jids=(first,))
    seen = []
    end = time.monotonic() + 60
    while True:
        answer = ex.query([first, second])
        a, b = answer.status(first), answer.status(second)
        seen.append((a and a.state, b and b.raw))
        if a is not None and not a.state.final:
            assert b is not None and b.state is JobState.PENDING and b.raw == "hqw", seen
        if b is not None and b.state.final:
            break
        assert time.monotonic() < end, seen
        time.sleep(0.5)
    assert a.state is JobState.COMPLETED and b.state is JobState.COMPLETED
    assert any(s[0] is JobState.RUNNING and s[1] == "hqw" for s in seen), seen


def test_qdel_cancels_a_running_job(tmp_path: Path) -> None:
    ex = executor()
    job = submit_command(tmp_path, ["sleep", "60"], name="hpcr-cancel")
    wait_state(ex, job, JobState.RUNNING)
    assert ex.cancel([job]) == [job]
    assert wait_final(ex, [job]).status(job).state is JobState.CANCELLED
    assert ex.still_queued([job]) == set()


def test_a_job_that_exits_99_is_run_again_and_counts_one_requeue(tmp_path: Path) -> None:
    ex = executor()
    marker = tmp_path / "ran-once"
    script = f"if [ -e {shlex.quote(str(marker))} ]; then exit 0; fi; touch {shlex.quote(str(marker))}; exit 99"
    job = submit_command(tmp_path, ["bash", "-c", script], name="hpcr-requeue")
    answer = wait_final(ex, [job])
    assert answer.status(job).state is JobState.COMPLETED and answer.requeues(job) == 1
    assert [a.state for a in answer.attempts[job]] == ["REQUEUED", "COMPLETED"]

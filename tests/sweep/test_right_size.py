"""What the next submission should ask for, from what a finished sweep's points used."""

from __future__ import annotations

from pathlib import Path

from hpc_runner.jobs.causes import Cause
from hpc_runner.jobs.states import PointState
from hpc_runner.jobs.time_limits import round_limit_minutes, slurm_time
from hpc_runner.jobs.usage import PointUsage
from hpc_runner.scheduler.profiles import ClusterProfile
from hpc_runner.sweep.right_size import (
    apply_to_profile,
    finished,
    from_states,
    suggest,
)


def used(job: str, *, cpus=8, cpus_used=1.0, rss_gb=None, req_gb=32.0, elapsed_min=10.0, limit_h=4.0, gpu=None):
    return PointUsage(elapsed_s=elapsed_min * 60, time_limit_s=limit_h * 3600, cpus=cpus, cpus_used=cpus_used,
                      cpu_efficiency=cpus_used / cpus, max_rss_mb=rss_gb * 1024 if rss_gb else None,
                      mem_request_mb=req_gb * 1024, gpu_util=gpu, job_id=job)


def test_the_issues_example_asks_for_what_was_used_with_headroom() -> None:
    s = suggest([used("1_0", cpus_used=1.3, rss_gb=3.1, elapsed_min=12), used("1_1", cpus_used=0.9, rss_gb=2.0)])
    assert s.line() == ("asked 8 CPUs, used at most 1.3: --cpus 2; peak memory 3.1 GB of 32 GB: mem_gb 4; "
                        "longest point 12 min of 4 h: time 00:30:00")
    assert s.settings == {"cpus_per_task": 2, "mem_gb": 4, "mem": None, "time": "00:30:00"}
    assert s.options() == ["--cpus 2", "--scheduler-option mem_gb=4", "--scheduler-option time=00:30:00"]
    assert s.to_json()["settings"] == {"cpus_per_task": 2, "mem_gb": 4, "time": "00:30:00"}


def test_what_fits_is_kept_and_what_sacct_did_not_record_is_not_suggested() -> None:
    s = suggest([used("2", cpus=1, cpus_used=0.98, rss_gb=None, elapsed_min=40, limit_h=1.5)],
                settings={"signal_delay_s": 60})
    assert "asked 1 CPU, used at most 0.98: keep" in s.line() and "cpus_per_task" not in s.settings
    assert "peak memory not recorded" in s.line() and "mem_gb" not in s.settings
    assert "longest point 40 min of 1.5 h: keep" in s.line() and "time" not in s.settings


def test_a_packed_tasks_job_counts_once_and_gpu_use_is_reported() -> None:
    s = suggest([used("3_0", gpu=30.0), used("3_0", gpu=30.0), used("3_1", gpu=50.0)])
    assert s.jobs == 2 and "GPUs busy 40% on average" in s.line()


def test_points_that_ran_out_of_memory_or_time_raise_the_floor() -> None:
    s = suggest([used("4_0", rss_gb=1.0, req_gb=2, elapsed_min=5, limit_h=0.5)],
                failed=[("OUT_OF_MEMORY", used("4_1", req_gb=2)), ("TIMEOUT", used("4_2", limit_h=0.5))])
    assert s.settings["mem_gb"] == 4 and "(1 point(s) ran out of memory)" in s.line()
    assert s.settings["time"] == "01:00:00" and "(1 point(s) ran out of time)" in s.line()


def test_round_time_limits() -> None:
    assert [round_limit_minutes(m) for m in (1, 24, 31, 61, 1000, 1441, 3000)] == [5, 30, 45, 90, 1440, 2880, 4320]
    assert slurm_time(30) == "00:30:00" and slurm_time(2880) == "2-00:00:00"


def point(index: int, state: str, cause: str | None = None) -> PointState:
    st = PointState(index, Path("."), {}, f"5_{index}", state, "sacct")
    st.cause = Cause(cause) if cause else None
    return st


def test_a_sweep_is_finished_when_no_point_may_still_run_and_only_completed_points_teach() -> None:
    states = [point(0, "COMPLETED"), point(1, "OUT_OF_MEMORY", "OUT_OF_MEMORY")]
    assert finished(states) and not finished([*states, point(2, "RUNNING")])
    assert not finished([*states, point(3, "WAITING")])
    usage = {0: used("5_0", rss_gb=1.5, req_gb=1), 1: used("5_1", req_gb=1)}
    s = from_states(states, usage)
    assert s.jobs == 1 and s.settings["mem_gb"] == 2


def test_right_size_applies_under_explicit_settings(tmp_path: Path, monkeypatch) -> None:
    import hpc_runner.sweep.right_size as rs

    s = suggest([used("6_0", cpus_used=1.3, rss_gb=3.1, elapsed_min=12)])
    monkeypatch.setattr(rs, "suggested_settings", lambda path: (dict(s.settings), s))
    profile = ClusterProfile("p", [], {"cpus_per_task": 8, "mem": "32G", "time": 240})
    lines: list[str] = []
    apply_to_profile(profile, str(tmp_path), {"time": "02:00:00"}, log=lines.append)
    assert profile.settings == {"cpus_per_task": 2, "mem_gb": 4, "time": 240}  # time: the explicit --slurm wins
    assert "cpus_per_task=2, mem_gb=4" in lines[0]

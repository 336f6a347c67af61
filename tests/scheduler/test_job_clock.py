"""Whether a packed task starts one more point, with given clocks (no job, no waiting)."""

from __future__ import annotations

import datetime as dt

from hpc_runner.scheduler.job_clock import JobClock, can_start, point_estimate_s
from hpc_runner.scheduler.slurm.job_clock import SIGNAL_EARLY_S, job_end_time, parse_slurm_time, stop_margin_s

END = 10_000.0


def test_a_point_starts_only_if_it_ends_before_the_stop_signal():
    assert can_start(now=END - 200, end=END, estimate_s=100, margin_s=60)
    assert can_start(now=END - 160, end=END, estimate_s=100, margin_s=60)  # exactly fits
    assert not can_start(now=END - 159, end=END, estimate_s=100, margin_s=60)


def test_without_an_end_time_every_point_starts():
    assert can_start(now=1e12, end=None, estimate_s=1e6, margin_s=60)


def test_before_any_point_ended_a_point_starts_until_the_signal_is_due():
    assert can_start(now=END - 61, end=END, estimate_s=None, margin_s=60)
    assert not can_start(now=END - 59, end=END, estimate_s=None, margin_s=60)


def test_the_estimate_is_the_longest_point_so_far_else_the_profile_hint():
    assert point_estimate_s([], None) is None
    assert point_estimate_s([], 300.0) == 300.0
    assert point_estimate_s([5.0, 40.0, 12.0], 300.0) == 40.0


def test_the_clock_learns_from_the_points_it_ran():
    clock = JobClock(end=END, margin_s=10)
    now = END - 100
    assert clock.can_start(now)
    clock.ran(50)
    assert clock.can_start(now)  # 50 + 10 <= 100
    clock.ran(95)
    assert not clock.can_start(now)  # the longest, 95, no longer fits
    assert "100 s left" in clock.why_not(now) and "95 s" in clock.why_not(now)


def test_a_profile_hint_stops_a_first_point_that_could_not_finish():
    assert not JobClock(end=END, margin_s=0, hint_s=600).can_start(END - 300)


def test_slurm_times_are_local_and_unknown_ones_are_none():
    assert parse_slurm_time("2026-11-23T17:05:00") == dt.datetime(2026, 11, 23, 17, 5).timestamp()
    for text in ("Unknown", "N/A", "NONE", "", None, "garbage"):
        assert parse_slurm_time(text) is None


def test_end_time_comes_from_one_squeue_call_then_scontrol_then_the_environment():
    calls: list[list[str]] = []

    def squeue_answers(cmd: list[str]) -> str:
        calls.append(cmd)
        return "2026-11-23T17:05:00\n" if cmd[0] == "squeue" else ""

    assert job_end_time("12_3", {}, squeue_answers) == parse_slurm_time("2026-11-23T17:05:00")
    assert calls == [["squeue", "-h", "-j", "12_3", "-o", "%e"]]

    def only_scontrol(cmd: list[str]) -> str:
        line = "JobId=12 JobName=x RunTime=00:00:05 EndTime=2026-11-23T18:00:00 Deadline=N/A"
        return "" if cmd[0] == "squeue" else line

    assert job_end_time("12", {}, only_scontrol) == parse_slurm_time("2026-11-23T18:00:00")
    assert job_end_time("12", {"SLURM_JOB_END_TIME": "1790000000"}, squeue_answers) == 1790000000.0
    assert job_end_time(None, {}, squeue_answers) is None
    assert job_end_time("12", {}, lambda cmd: "") is None


def test_the_margin_covers_a_signal_that_slurm_sends_early():
    assert stop_margin_s(20) == 20 + SIGNAL_EARLY_S
    assert stop_margin_s(None) == SIGNAL_EARLY_S

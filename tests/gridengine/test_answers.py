"""Grid Engine's answers, recorded from a real Grid Engine 8.1.9 (tests/scheduler/golden/gridengine/README), parsed
into our JobStatus, Usage and limits; hostile variants of each come out as UNKNOWN, absent or a ClusterError, never a
traceback. No Grid Engine needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpc_runner.errors import ClusterError
from hpc_runner.scheduler.gridengine import answers
from hpc_runner.scheduler.job_status import MAX_ANSWER_CHARS, JobState

GOLDEN = Path(__file__).resolve().parents[1] / "scheduler" / "golden" / "gridengine"


def golden(name: str) -> str:
    return (GOLDEN / name).read_text()


def one_report(name: str) -> answers.Report:
    reports = answers.reports_from_qacct(golden(name))
    assert len(reports) == 1
    return next(iter(reports.values()))


def test_qsub_terse_of_an_array_names_its_tasks_and_our_ids_count_from_zero() -> None:
    sub = answers.parse_submission(golden("qsub_terse_array.txt"))
    assert sub.job_id == "11" and list(sub.tasks) == [1, 2, 3, 4]
    assert sub.our_ids() == ["11_0", "11_1", "11_2", "11_3"]
    assert answers.parse_submission("1234\n").our_ids() == ["1234"]


def test_qstat_xml_lists_running_pending_held_and_each_array_task() -> None:
    states = answers.statuses_from_qstat(golden("qstat_mixed.xml"))
    assert states["19"].state is JobState.RUNNING and states["19"].node == "vm"
    assert states["11_2"].state is JobState.PENDING and states["11_3"].raw == "qw"
    assert states["16"].raw == "hqw" and states["16"].state is JobState.PENDING  # qsub -h
    assert states["17"].raw == "hqw" and states["17"].state is JobState.PENDING  # -hold_jid 16


def test_a_job_in_error_state_is_failed_with_a_reason_while_it_sits_in_the_queue() -> None:
    states = answers.statuses_from_qstat(golden("qstat_late.xml"))
    assert states["18"].raw == "Eqw" and states["18"].state is JobState.FAILED and "qmod -cj" in states["18"].reason


def test_qacct_of_an_array_is_one_completed_report_per_task_with_its_usage() -> None:
    reports = answers.reports_from_qacct(golden("qacct_array.txt"))
    assert sorted(reports) == ["11_0", "11_1", "11_2", "11_3"]
    first = reports["11_0"]
    assert first.status.state is JobState.COMPLETED and first.status.exit_code == 0 and first.status.node == "vm"
    assert first.usage.elapsed_s == 2.0 and first.usage.cpu_time_s == pytest.approx(0.102)
    assert first.usage.peak_memory_bytes == int(5.152 * 2**20) and first.usage.cpus == 1


@pytest.mark.parametrize(("name", "state"), [
    ("qacct_exit3.txt", JobState.FAILED),
    ("qacct_h_rt.txt", JobState.TIMEOUT),
    ("qacct_h_vmem.txt", JobState.OUT_OF_MEMORY),
    ("qacct_cancelled.txt", JobState.CANCELLED),
    ("qacct_pe.txt", JobState.COMPLETED),
])
def test_how_a_job_ended_is_read_from_failed_exit_status_and_what_it_asked(name: str, state: JobState) -> None:
    assert one_report(name).status.state is state


def test_a_timeout_and_an_out_of_memory_kill_look_alike_but_for_the_request_they_passed() -> None:
    rt, vmem = one_report("qacct_h_rt.txt"), one_report("qacct_h_vmem.txt")
    assert rt.status.raw.startswith("failed 37") and vmem.status.raw.startswith("failed 37")
    assert rt.status.exit_code == vmem.status.exit_code == 137 and rt.status.signal == 9
    assert rt.usage.time_limit_s == 3.0 and rt.usage.elapsed_s >= 3.0
    assert vmem.usage.memory_request_bytes == 300 * 2**20 < vmem.usage.peak_memory_bytes


def test_a_job_that_exited_99_was_requeued_once_and_its_second_run_completed() -> None:
    report = one_report("qacct_requeue.txt")
    assert report.status.state is JobState.COMPLETED and report.status.requeues == 1
    assert [a.state for a in report.attempts] == ["REQUEUED", "COMPLETED"]


def test_a_parallel_job_reports_its_slots_and_its_memory_request_per_slot_times_slots() -> None:
    usage = one_report("qacct_pe.txt").usage
    assert usage.cpus == 2 and usage.time_limit_s == 600.0 and usage.memory_request_bytes == 2 * 2**30


def test_qacct_of_an_unknown_job_is_no_report() -> None:
    assert answers.reports_from_qacct(golden("qacct_unknown.txt")) == {}


def test_the_global_configuration_gives_the_array_limits_and_zero_means_none() -> None:
    limits = answers.limits_from_sconf(golden("qconf_sconf_global.txt"))
    assert limits.max_u_jobs is None and limits.max_jobs is None
    assert limits.max_aj_tasks == 75000 and limits.max_aj_instances == 2000


def test_the_queue_configuration_gives_its_slots_and_parallel_environments() -> None:
    queue = answers.queue_limits(golden("qconf_sq.txt"))
    assert queue.name == "all.q" and queue.slots == 2 and queue.pe_list == ("smp",) and queue.h_rt_s is None


def test_qsub_refused_by_max_u_jobs_is_a_limit_refusal_and_a_bad_request_is_not() -> None:
    assert answers.is_limit_refusal(golden("qsub_refused_max_u_jobs.txt"))
    assert not answers.is_limit_refusal('job rejected: the requested parallel environment "nope" does not exist')


@pytest.mark.parametrize("text", [
    "1234.1-0:1", "12345678901234567890", "１２３", "1234.1-9999999:1", "", "Your job 12 has been submitted",
    "12\n13", "²", b"12\xff".decode("latin-1"),
])
def test_a_qsub_answer_that_names_no_job_is_a_cluster_error(text: str) -> None:
    with pytest.raises(ClusterError):
        answers.parse_submission(text)


@pytest.mark.parametrize("text", [
    "<job_info><job_list><JB_job_number>１２</JB_job_number><state>r</state></job_list></job_info>",
    "<job_info><job_list><JB_job_number>12</JB_job_number><state>zz</state></job_list></job_info>",
    "<job_info><job_list><JB_job_number>12</JB_job_number><state>r</state><tasks>1-99999999:1</tasks>"
    "</job_list></job_info>",
    "<job_info><job_list><JB_job_number>12</JB_job_number><state>qw</state><tasks>²</tasks></job_list></job_info>",
])
def test_odd_qstat_entries_are_left_out_or_unknown_never_a_traceback(text: str) -> None:
    states = answers.statuses_from_qstat(text)
    assert all(s.state in (JobState.UNKNOWN, JobState.RUNNING, JobState.PENDING) for s in states.values())
    assert "１２" not in states and len(states) <= 1


@pytest.mark.parametrize("text", [
    "not xml at all", "<other/>", "<?xml version='1.0'?><!DOCTYPE x [<!ENTITY a 'b'>]><job_info>&a;</job_info>",
    "<job_info>" * 100 + "<unclosed", b"<job_info>\xff\xfe</job_info>\x00".decode("utf-8", "replace") + "<",
])
def test_a_qstat_answer_that_is_not_its_xml_is_a_cluster_error(text: str) -> None:
    with pytest.raises(ClusterError):
        answers.statuses_from_qstat(text)


def test_a_huge_qstat_answer_is_refused_by_size() -> None:
    with pytest.raises(ClusterError, match="larger"):
        answers.statuses_from_qstat("<job_info>" + " " * (MAX_ANSWER_CHARS + 1))


@pytest.mark.parametrize("mutate", [
    lambda t: t.replace("exit_status  137", "exit_status  １３７"),
    lambda t: t.replace("failed       37", "failed       ３７"),
    lambda t: t.replace("maxvmem      429.855MB", "maxvmem      lots"),
    lambda t: t.replace("jobnumber    14", "jobnumber    99999999999999999999999"),
    lambda t: t.replace("taskid       undefined", "taskid       ²"),
    lambda t: t.replace("category     -l h_vmem=300M", "category     -l h_vmem=\udcff"),
    lambda t: t + "\n" + "x" * 100_000,
    lambda t: t.encode().replace(b"vm", b"\xff\xfe").decode("utf-8", "replace"),
])
def test_a_garbled_qacct_record_reads_as_unknown_or_absent_never_a_traceback(mutate) -> None:
    reports = answers.reports_from_qacct(mutate(golden("qacct_h_vmem.txt")))
    for report in reports.values():
        assert report.status.state in (JobState.OUT_OF_MEMORY, JobState.TIMEOUT, JobState.UNKNOWN)


def test_grid_engine_sizes_and_times_are_read_in_its_own_units() -> None:
    assert answers.ge_memory_bytes("300M") == 300 * 2**20 and answers.ge_memory_bytes("1g") == 10**9
    assert answers.ge_memory_bytes("１G") is None and answers.ge_time_s("0:10:0") == 600.0
    assert answers.ge_time_s("INFINITY") is None and answers.qacct_size_bytes("0.000B") == 0
    assert answers.expand_tasks("1-3:1,7") == [1, 2, 3, 7]

"""`hpc-runner cluster check`, in-process: the check job's probes as plain functions, the findings read back, the
profile's `checked:` section written (atomically, only when valid), and the workarounds the next submission uses;
the in-memory cluster stands in for the scheduler (tests/slurm/test_cluster_check.py runs it on the local SLURM)."""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

import pytest

from hpc_runner.errors import ClusterError
from hpc_runner.scheduler import cluster_check as cc
from hpc_runner.scheduler import site_check
from hpc_runner.scheduler.job_environment import JobEnvironment
from hpc_runner.scheduler.memory.executor import MemoryCluster
from hpc_runner.scheduler.memory.executor import Usage as MemoryUsage
from hpc_runner.scheduler.profile import ClusterProfile
from hpc_runner.scheduler.profiles import check_new_profile, load_profile
from hpc_runner.scheduler.select import executor_for
from hpc_runner.scheduler.site_findings import (
    NO_ACCOUNTING,
    NO_STAGING,
    RESUBMIT,
    checked_lines,
    checked_of,
    submission_notes,
    uses_workaround,
)

# ---------------------------------------------------------------- the probes, as plain functions


def test_gpus_visible_must_match_the_request():
    assert site_check.probe_gpus(2, {"CUDA_VISIBLE_DEVICES": "0,1"}, lambda: None)["ok"] is True
    wrong = site_check.probe_gpus(1, {"CUDA_VISIBLE_DEVICES": "0,1"}, lambda: None)
    assert wrong["ok"] is False and "2 GPU(s) visible, 1 asked" in wrong["detail"]
    assert site_check.probe_gpus(0, {}, lambda: 0)["ok"] is None  # nothing asked, nothing seen: nothing to check


def test_cpu_binding_below_the_cpus_per_task_fails_and_names_both():
    fewer = site_check.probe_cpu_binding(2, affinity=1, environ={})
    assert fewer["ok"] is False and "bound to 1 CPU(s) of the 2 asked" in fewer["detail"]
    assert site_check.probe_cpu_binding(2, affinity=2, environ={})["ok"] is True
    unbound = site_check.probe_cpu_binding(1, affinity=4, environ={})
    assert unbound["ok"] is True and unbound["detail"].startswith("not bound")


def test_scratch_that_does_not_exist_is_no_scratch(tmp_path):
    missing = site_check.probe_scratch({"TMPDIR": str(tmp_path / "gone")}, test_mb=1)
    assert missing["ok"] is False and "no scratch folder" in missing["detail"] and "TMPDIR" in missing["detail"]
    there = site_check.probe_scratch({"TMPDIR": str(tmp_path)}, test_mb=1)
    assert there["ok"] is True and there["write_mb_s"] > 0 and there["free_gb"] >= 0
    assert not list(tmp_path.iterdir())  # the write test leaves nothing behind


def test_shm_missing_is_said(tmp_path):
    assert site_check.probe_shm(str(tmp_path / "no-shm"))["ok"] is False
    assert "GB" in site_check.probe_shm(str(tmp_path))["detail"]


def test_the_first_setup_line_that_fails_is_named():
    found = site_check.probe_setup(["true", "module-that-is-not-here load x", "true"])
    assert found["ok"] is False and found["failed_line"] == 2
    assert "setup line 2 failed" in found["detail"] and "module-that-is-not-here" in found["detail"]
    assert site_check.probe_setup(["export A=1", "test \"$A\" = 1"])["ok"] is True  # one shell, as in the script
    assert site_check.probe_setup([])["ok"] is None


def test_imports_that_fail_in_the_jobs_python_are_named(tmp_path):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho '{\"torch\": {\"error\": \"ModuleNotFoundError: No module named torch\"}, "
                    "\"monai\": {\"s\": 0.5, \"version\": \"1.4\"}}'\n")
    fake.chmod(0o755)
    found = site_check.probe_imports(str(fake))
    assert found["ok"] is False and "cannot import torch: ModuleNotFoundError" in found["detail"]
    broken = tmp_path / "broken"
    broken.write_text("#!/bin/sh\necho 'no python here' >&2\nexit 127\n")
    broken.chmod(0o755)
    assert "could not run the import probe (exit 127)" in site_check.probe_imports(str(broken))["detail"]


def test_container_runtime_missing_on_the_node():
    assert site_check.probe_container("no-such-runtime-hpcr")["ok"] is False
    assert site_check.probe_container(None)["ok"] is None


def test_the_stop_signal_is_caught_and_timed():
    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGUSR2))
    timer.start()
    found = site_check.wait_for_stop_signal(10, lambda: 42.0, step_s=0.05)
    assert found["ok"] is True and found["signal"] == "SIGUSR2" and found["before_limit_s"] == 42
    late = site_check.wait_for_stop_signal(0.1, lambda: None, step_s=0.05)
    assert late["ok"] is False and "no stop signal" in late["detail"]


# ---------------------------------------------------------------- the check through the executor (in memory)


@pytest.fixture
def profiles(tmp_path, monkeypatch):
    """A profile folder with `mem`: the in-memory cluster, two partitions, a setup line that fails."""
    folder = tmp_path / "clusters"
    folder.mkdir()
    monkeypatch.setenv("HPCR_CLUSTER_PATH", str(folder))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (folder / "mem.yaml").write_text("# the in-memory cluster\nexecutor: memory\npartitions: [small, gpu]\n"
                                     "setup: ['true', 'false']\ntime: 10\ncpus_per_task: 1\n")
    monkeypatch.setattr(site_check, "probe_imports",
                        lambda python=None: site_check.finding(True, "torch 2 in 1 s, monai 1 in 1 s"))
    return folder


def _run_all(cluster: MemoryCluster, jobs: list[cc.CheckJob], rss_mb: float | None = 50.0) -> None:
    """Run each check job here, as the scheduler would start it; sacct's peak memory recorded."""
    for job in jobs:
        cluster.run(job.job_id)
        if rss_mb is not None:
            cluster.job(job.job_id).current.usage = MemoryUsage(max_rss_mb=rss_mb)


def _no_sleep(_s: float) -> None:
    raise AssertionError("the check waited although every job had written its findings")


def test_one_job_per_partition_and_the_findings_read_back(profiles, tmp_path):
    with MemoryCluster().installed() as cluster:
        profile = load_profile("mem")
        jobs = cc.submit_checks(profile, cc.partitions_to_check(profile, None), tmp_path / "jobs", executor_for,
                                scratch_mb=1, wait_for_signal=False)
        assert [j.partition for j in jobs] == ["small", "gpu"] and cluster.calls["sbatch"] == 2
        assert cluster.job(jobs[0].job_id).settings["time"] == 2  # short: just long enough for the stop signal
        _run_all(cluster, jobs)
        assert cc.wait_for_checks(jobs, 60, sleep=_no_sleep) == []
        found = [cc.collect_findings(j) for j in jobs]
    small = found[0].findings
    assert small["setup"].ok is False and "setup line 2 failed" in small["setup"].detail
    assert small["accounting"].ok is True and "COMPLETED" in small["accounting"].detail
    assert small["cpu_binding"].ok is not False and small["imports"].ok is True
    assert small["queue_wait"].ok is None and small["queue_wait"].figures["seconds"] >= 0
    assert small["stop_signal"].ok is None  # asked not to wait for it


def test_accounting_off_is_found_and_its_workaround_chosen(profiles, tmp_path):
    with MemoryCluster(accounting=False).installed() as cluster:
        profile = load_profile("mem")
        jobs = cc.submit_checks(profile, ["small"], tmp_path / "jobs", executor_for, scratch_mb=1,
                                wait_for_signal=False)
        _run_all(cluster, jobs)
        cc.wait_for_checks(jobs, 60, sleep=_no_sleep)
        found = cc.collect_findings(jobs[0])
    acc = found.findings["accounting"]
    assert acc.ok is False and acc.workaround == "states from the queue and the jobs' exit files"
    assert acc.line().startswith("FAILED accounting: no accounting for job")


def test_accounting_without_peak_memory_names_what_is_missing(profiles, tmp_path):
    with MemoryCluster().installed() as cluster:
        jobs = cc.submit_checks(load_profile("mem"), ["small"], tmp_path / "jobs", executor_for, scratch_mb=1,
                                wait_for_signal=False)
        _run_all(cluster, jobs, rss_mb=None)
        acc = cc.collect_findings(jobs[0]).findings["accounting"]
    assert acc.ok is False and "but not the job's peak memory" in acc.detail


def test_a_check_still_queued_at_the_timeout_is_cancelled_and_named(profiles, tmp_path):
    clock = [0.0]

    def sleep(s: float) -> None:
        clock[0] += s

    logged: list[str] = []
    with MemoryCluster(max_running=0).installed() as cluster:  # nothing ever starts
        jobs = cc.submit_checks(load_profile("mem"), ["small", "gpu"], tmp_path / "jobs", executor_for,
                                wait_for_signal=False)
        late = cc.wait_for_checks(jobs, 30, sleep=sleep, clock=lambda: clock[0], log=logged.append)
        assert late == jobs and clock[0] == pytest.approx(30)
        assert all(cluster.state(j.job_id).startswith("CANCELLED") for j in jobs)
        found = cc.collect_findings(jobs[0], timed_out=True)
    assert "still queued after 30 s, cancelled" in logged[0]
    assert found.findings["job"].ok is False and "still queued at the timeout" in found.findings["job"].detail


def test_the_requeued_attempt_notes_it_came_back(tmp_path, monkeypatch):
    monkeypatch.setattr(site_check, "probe_imports", lambda python=None: site_check.finding(True, "imported"))
    findings = tmp_path / "findings.json"
    request = {"partition": "small", "signal_wait_s": 0, "scratch_mb": 1}
    with MemoryCluster().installed() as cluster:
        executor = executor_for(ClusterProfile("m", [], {"executor": "memory"}))
        from hpc_runner.scheduler.executor import JobRequest

        job = executor.submit(site_check.run_site_check, [[str(findings)], [request]],
                              JobRequest("check", tmp_path))[0]
        cluster.run(job.job_id)
        cluster.requeue(job.job_id)  # what the job's own requeue does after the stop signal
        cluster.run(job.job_id)
    data = site_check.read_findings(findings)
    assert data["done"] and data["findings"]["requeue"]["came_back"] is True


# ---------------------------------------------------------------- the profile's checked: section


def test_findings_are_written_into_the_profile_and_shown(profiles, tmp_path):
    path = profiles / "mem.yaml"
    with MemoryCluster(accounting=False).installed() as cluster:
        profile = load_profile("mem")
        jobs = cc.submit_checks(profile, ["small"], tmp_path / "jobs", executor_for, scratch_mb=1,
                                wait_for_signal=False)
        _run_all(cluster, jobs)
        site = cc.checked_site(profile, [cc.collect_findings(j) for j in jobs], "hpc-runner cluster check mem")
    text = cc.profile_with_checked(path.read_text(), site)
    check_new_profile("mem", text, path)
    path.write_text(text)
    again = cc.profile_with_checked(text, site)  # a second check replaces the section, it does not add one
    assert again.count("checked:") == 1 and again.startswith("# the in-memory cluster\nexecutor: memory")
    reread = checked_of(load_profile("mem").settings)
    assert reread is not None and reread.partitions["small"].findings["accounting"].ok is False
    lines = checked_lines(reread)
    assert lines[0].startswith("# checked ") and any("FAILED setup: setup line 2 failed" in ln for ln in lines)
    assert any("FAILED accounting" in ln and "-> states from the queue" in ln for ln in lines)


def test_a_hand_broken_checked_section_is_refused_naming_the_key(profiles):
    (profiles / "bad.yaml").write_text("extends: mem\nchecked: {partitions: {small: 3}}\n")
    with pytest.raises(ClusterError, match="checked: partition 'small' is not a mapping"):
        load_profile("bad")


def _checked(**failed: str) -> dict:
    findings = {name: {"ok": False, "detail": why} for name, why in failed.items()}
    findings["gpus"] = findings.get("gpus") or {"ok": True, "detail": "1 GPU(s) visible, as asked"}
    return {"date": "2025-01-01T00:00:00", "by": "hpc-runner cluster check x",
            "partitions": {"small": {"node": "n1", "job_id": "7", "findings": findings}}}


def test_the_next_submission_says_each_failed_check_it_depends_on():
    settings = {"checked": _checked(accounting="no accounting", requeue="refused", setup="setup line 1 failed")}
    notes = submission_notes(settings)
    assert [n.fatal for n in notes] == [False, False, False]
    assert any("accounting failed" in n.text and "using: states from the queue" in n.text for n in notes)
    assert any("requeue failed" in n.text and "using: resubmit instead of requeue" in n.text for n in notes)
    fatal = submission_notes({"checked": _checked(imports="cannot import torch")})
    assert fatal[0].fatal and "cannot work" in fatal[0].text
    # a failed container check matters only to a submission that uses a container
    assert submission_notes({"checked": _checked(container="apptainer missing")}) == []
    assert submission_notes({"checked": _checked(container="apptainer missing")}, container=True)[0].fatal


def test_a_submission_that_cannot_work_stops_before_queueing(profiles):
    (profiles / "broken.yaml").write_text("extends: mem\n")
    path = profiles / "broken.yaml"
    import yaml

    path.write_text(path.read_text() + yaml.safe_dump({"checked": _checked(imports="cannot import torch")}))
    said: list[str] = []
    with MemoryCluster().installed() as cluster:
        executor = executor_for(load_profile("broken"))
        with pytest.raises(ClusterError, match="imports failed: cannot import torch") as err:
            executor.check_site(said.append)
        assert err.value.exit_code == 2 and cluster.calls["sbatch"] == 0
    path.write_text("extends: mem\n" + yaml.safe_dump({"checked": _checked(scratch="no scratch folder")}))
    with MemoryCluster().installed():
        executor_for(load_profile("broken")).check_site(said.append)
    assert said == [said[0]] and "scratch failed: no scratch folder; using: staging off" in said[0]


def test_workarounds_are_asked_by_what_they_change():
    settings = {"checked": _checked(accounting="off", requeue_flag="Requeue=0", scratch="none")}
    assert uses_workaround(settings, NO_ACCOUNTING) and uses_workaround(settings, RESUBMIT)
    assert uses_workaround(settings, NO_STAGING)
    assert not uses_workaround({"checked": _checked()}, NO_ACCOUNTING)
    assert not uses_workaround({}, RESUBMIT)


def test_requeue_refused_makes_the_next_slurm_job_resubmit_instead(tmp_path):
    from hpc_runner.scheduler.slurm.executor import export_option

    refused = ClusterProfile("s", [], {"checked": _checked(requeue="the scheduler refused to requeue the job")})
    assert "HPCR_REQUEUE=resubmit" in export_option(refused).split(",")
    assert "HPCR_REQUEUE" not in export_option(ClusterProfile("s", [], {"checked": _checked()}))


def test_a_job_told_to_resubmit_does_not_ask_for_requeue(monkeypatch):
    monkeypatch.setenv("HPCR_REQUEUE", "resubmit")
    asked: list[str] = []
    from hpc_runner.scheduler.job_environment import in_process_job

    with in_process_job({}, lambda job: asked.append(job) or True):
        assert JobEnvironment().requeue() is None
    assert asked == []


def test_accounting_off_makes_the_next_query_ask_the_queue_only(monkeypatch):
    from hpc_runner.records.command_output import CommandOutput
    from hpc_runner.scheduler.slurm import accounting
    from hpc_runner.scheduler.slurm.executor import SlurmExecutor

    ran: list[str] = []

    def fake(argv, **_kw):
        ran.append(argv[0])
        return CommandOutput(tuple(argv), 0, "12|RUNNING\n", "")

    monkeypatch.setattr(accounting, "run_command", fake)
    answer = SlurmExecutor(ClusterProfile("s", [], {"checked": _checked(accounting="off")})).query(["12"])
    assert ran == ["squeue"] and answer.status("12").state.value == "RUNNING"
    ran.clear()
    SlurmExecutor(ClusterProfile("s", [], {"checked": _checked()})).query(["12"])
    assert ran[0] == "sacct"


# ---------------------------------------------------------------- the command


def test_cluster_check_writes_the_profile_and_show_prints_it(profiles, monkeypatch, capsys):
    from hpc_runner.cli import main

    real_wait = cc.wait_for_checks
    with MemoryCluster(accounting=False).installed() as cluster:
        def run_then_wait(jobs, timeout, **kw):
            _run_all(cluster, list(jobs))
            return real_wait(jobs, timeout, sleep=_no_sleep, log=kw.get("log", print))

        monkeypatch.setattr(cc, "wait_for_checks", run_then_wait)
        monkeypatch.setattr(cc, "check_request", _small_request(cc.check_request))
        assert main(["cluster", "check", "mem", "--partition", "small", "--timeout", "60"]) == 1
        out = capsys.readouterr()
        assert "FAILED accounting" in out.out and "FAILED setup" in out.out
        assert "wrote the findings into" in out.err and "accounting, setup" in out.err
        assert main(["cluster", "show", "mem"]) == 0
    shown = capsys.readouterr().out
    assert "# checked " in shown and "partition small" in shown and "-> states from the queue" in shown
    assert "checked:" in (profiles / "mem.yaml").read_text()


def _small_request(real):
    def request(*args, **kw):
        kw["scratch_mb"], kw["wait_for_signal"] = 1, False
        return real(*args, **kw)
    return request


def test_ctrl_c_cancels_the_check_jobs_and_writes_nothing(profiles, monkeypatch, capsys):
    from hpc_runner.cli import main

    before = (profiles / "mem.yaml").read_text()

    def interrupted(*_a, **_kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(cc, "wait_for_checks", interrupted)
    with MemoryCluster().installed() as cluster:
        assert main(["cluster", "check", "mem", "--timeout", "60"]) == 130
        assert cluster.calls["scancel"] == 2 and all(j.state.startswith("CANCELLED") for j in cluster.jobs.values())
    assert (profiles / "mem.yaml").read_text() == before
    assert "interrupted; 2 job(s) cancelled; nothing written" in capsys.readouterr().err


def test_a_bad_timeout_is_refused(profiles):
    from hpc_runner.cli import main

    with MemoryCluster().installed():
        assert main(["cluster", "check", "mem", "--timeout", "nan"]) == 2


def test_check_job_entry_is_listed():
    from hpc_runner.scheduler.executor import JOB_ENTRIES, job_entry_name

    assert job_entry_name(site_check.run_site_check) in JOB_ENTRIES
    assert sys.modules["hpc_runner.scheduler.site_check"].FINDINGS_VERSION == 1
    assert Path(site_check.__file__).name == "site_check.py"

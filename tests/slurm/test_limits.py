"""The submit limits that apply to the user: parsed from real sacctmgr/squeue output, and read from the local SLURM."""

from __future__ import annotations

import subprocess
import time

import pytest

from hpc_runner.errors import ClusterError
from hpc_runner.scheduler.executor import Limit, SubmitLimits
from hpc_runner.scheduler.profiles import check_settings
from hpc_runner.scheduler.slurm.limits import (
    is_limit_refusal,
    parse_associations,
    parse_qos,
    parse_queue,
    read_limits,
)

# captured on the local SLURM 22.05 (scripts/local-slurm.sh) after
#   sacctmgr -i modify user where name=root account=hpcr set MaxSubmitJobs=40 MaxJobs=6
#   sacctmgr -i modify qos hpcr-limited set MaxSubmitJobsPerUser=50 MaxJobsPerUser=8
ASSOC = "root|hpcr|hpcr||hpcr-limited,normal|normal|40|6\nroot|hpcr|root||normal|||\n"
QOS = "normal||\nhpcr-limited|50|8\n"
QUEUE = "383_2|hpcr|normal\n383_3|hpcr|normal\n390_0|hpcr|hpcr-limited\n391|root|normal\n"
REFUSED = ("sbatch: error: QOSMaxSubmitJobPerUserLimit\nsbatch: error: Batch job submission failed: Job violates "
           "accounting/QOS policy (job submit limit, user's size and/or time limits)")


def test_association_rows_are_parsed_with_their_limits_and_qos_lists():
    rows = parse_associations(ASSOC)
    assert rows[0] == {"user": "root", "default_account": "hpcr", "account": "hpcr", "partition": None,
                       "qos": ["hpcr-limited", "normal"], "default_qos": "normal", "max_submit": 40, "max_jobs": 6}
    assert rows[1]["account"] == "root" and rows[1]["max_submit"] is None and rows[1]["default_qos"] is None


def test_qos_rows_give_per_user_limits_and_none_for_unlimited():
    assert parse_qos(QOS) == {"normal": {"max_submit_pu": None, "max_jobs_pu": None},
                              "hpcr-limited": {"max_submit_pu": 50, "max_jobs_pu": 8}}


def test_queue_lines_are_one_job_or_array_task_each():
    assert parse_queue(QUEUE) == [("383_2", "hpcr", "normal"), ("383_3", "hpcr", "normal"),
                                  ("390_0", "hpcr", "hpcr-limited"), ("391", "root", "normal")]


def test_limit_refusals_are_told_from_other_sbatch_errors():
    assert is_limit_refusal(REFUSED)
    assert is_limit_refusal("sbatch: error: AssocMaxSubmitJobLimit")
    assert is_limit_refusal("sbatch: error: Batch job submission failed: Socket timed out on send/recv operation")
    assert not is_limit_refusal("sbatch: error: Batch job submission failed: Invalid partition name specified")
    assert not is_limit_refusal("sbatch: error: Batch job submission failed: Requested node configuration is not "
                                "available")


def test_the_binding_limit_is_the_submit_limit_with_fewest_free_slots():
    limits = SubmitLimits("root", limits=[
        Limit("MaxSubmitJobs", "association", 40, queued=30),
        Limit("MaxJobs", "association", 6, queued=6, limits_submission=False),  # jobs past it wait; not binding
        Limit("MaxSubmitJobsPerUser", "QOS hpcr-limited", 50, queued=45),
    ])
    assert limits.free_slots == 5 and limits.binding.name == "MaxSubmitJobsPerUser"
    limits.consume(5)
    assert limits.free_slots == 0
    assert SubmitLimits("root").free_slots is None and not SubmitLimits("root").known


def _fake(outputs: dict[str, str]):
    """A runner for read_limits that answers sacctmgr/squeue with captured text (scontrol is the real one)."""
    calls = []

    def run(cmd):
        calls.append(cmd[0])
        key = "qos" if cmd[:3] == ["sacctmgr", "-nP", "show"] and cmd[3] == "qos" else cmd[0]
        return subprocess.CompletedProcess(cmd, 0, outputs[key], "")

    return run, calls


@pytest.mark.slurm
def test_read_limits_counts_queued_jobs_per_limit_from_captured_accounting(slurm_cluster):
    run, calls = _fake({"sacctmgr": ASSOC, "qos": QOS, "squeue": QUEUE})
    limits = read_limits({"qos": "hpcr-limited"}, user="root", run=run)
    by_name = {lim.name: lim for lim in limits.limits}
    assert (limits.account, limits.qos) == ("hpcr", "hpcr-limited")
    assert by_name["MaxSubmitJobs"].value == 40 and by_name["MaxSubmitJobs"].queued == 3  # account hpcr
    assert by_name["MaxSubmitJobsPerUser"].value == 50 and by_name["MaxSubmitJobsPerUser"].queued == 1  # its QOS
    assert by_name["MaxJobCount"].queued == 4  # every job of the user
    assert limits.free_slots == 37 and calls.count("squeue") == 1
    # without --qos the association's default QOS applies, which has no per-user limit
    assert "MaxSubmitJobsPerUser" not in {lim.name for lim in read_limits({}, user="root", run=run).limits}


def test_profile_max_submit_jobs_applies_when_accounting_is_not_enforced(tmp_path, monkeypatch):
    from hpc_runner.scheduler.slurm import cluster_info

    monkeypatch.setitem(cluster_info._CACHE, "", {"MaxArraySize": "7"})  # a cluster without accounting limits
    monkeypatch.setenv("SLURM_CONF", "")
    run, calls = _fake({"squeue": QUEUE})
    limits = read_limits({"max_submit_jobs": 10}, user="root", run=run)
    assert [(lim.name, lim.value, lim.queued) for lim in limits.limits] == [("max_submit_jobs", 10, 4)]
    assert limits.free_slots == 6 and limits.max_array_size == 7 and "sacctmgr" not in calls
    assert "AccountingStorageEnforce has no `limits`" in limits.notes[0]
    nothing = read_limits({}, user="root", run=_fake({})[0])
    assert nothing.free_slots is None and "no submit limit known" in nothing.describe()


def test_profile_limit_keys_are_validated():
    check_settings({"max_submit_jobs": 50, "max_array_size": 1001}, "p.yaml")
    with pytest.raises(ClusterError, match="max_submit_jobs: 0 is too small"):
        check_settings({"max_submit_jobs": 0}, "p.yaml")
    with pytest.raises(ClusterError, match="max_submit_jobs: '50' is not valid"):
        check_settings({"max_submit_jobs": "50"}, "p.yaml")


@pytest.mark.slow
@pytest.mark.slurm
def test_read_limits_on_the_local_cluster_sees_the_qos_limit_and_a_held_job(slurm_cluster, qos_limit, tmp_path):
    qos_limit(7)
    before = read_limits({"qos": "hpcr-limited"})
    assert before.binding.name == "MaxSubmitJobsPerUser" and before.binding.value == 7
    assert before.binding.source == "QOS hpcr-limited (sacctmgr)" and before.account == "hpcr"
    res = slurm_cluster.run("sbatch", "--parsable", "-H", "--qos=hpcr-limited", "--array=0-2", "-o", "/dev/null",
                            f"--chdir={tmp_path}", "--wrap", "true")
    job = res.stdout.strip()
    try:
        assert res.returncode == 0, res.stderr
        after = read_limits({"qos": "hpcr-limited"})
        assert after.free_slots == before.free_slots - 3  # each array task counts, pending ones too
        refused = slurm_cluster.run("sbatch", "-H", "--qos=hpcr-limited", f"--array=0-{after.free_slots}",
                                    "-o", "/dev/null", f"--chdir={tmp_path}", "--wrap", "true")
        assert refused.returncode != 0 and is_limit_refusal(refused.stderr), refused.stderr  # one more than free
    finally:
        slurm_cluster.run("scancel", job)
    deadline = time.monotonic() + 30
    while read_limits({"qos": "hpcr-limited"}).free_slots != before.free_slots and time.monotonic() < deadline:
        time.sleep(0.2)
    assert read_limits({"qos": "hpcr-limited"}).free_slots == before.free_slots


def test_sacctmgrs_answers_are_kept_a_few_minutes_and_the_queue_is_always_asked(tmp_path, monkeypatch):
    from hpc_runner.scheduler.slurm import cluster_info, limits, limits_cache

    monkeypatch.setitem(cluster_info._CACHE, "", {"MaxArraySize": "7", "ClusterName": "c1",
                                                  "AccountingStorageEnforce": "associations,limits,qos"})
    monkeypatch.setenv("SLURM_CONF", "")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("HPCR_LIMITS_CACHE_S", "300")
    outputs = {"sacctmgr": ASSOC, "qos": QOS, "squeue": QUEUE}
    run, calls = _fake(outputs)
    monkeypatch.setattr(limits, "_run", run)

    first = read_limits({"qos": "hpcr-limited"}, user="root")
    assert first.free_slots == 37 and calls.count("sacctmgr") == 2 and calls.count("squeue") == 1
    outputs["qos"] = "normal||\nhpcr-limited|5|8\n"  # an admin lowers the QOS's limit meanwhile
    kept = read_limits({"qos": "hpcr-limited"}, user="root")
    assert calls.count("sacctmgr") == 2 and calls.count("squeue") == 2  # slurmdbd not asked; the queue is
    assert kept.free_slots == 37 and any("as sacctmgr gave them" in n for n in kept.notes)
    assert read_limits({"qos": "hpcr-limited"}, user="root", fresh=True).free_slots == 4  # `cluster show`
    assert calls.count("sacctmgr") == 4
    limits_cache.forget("c1", "root")  # what a refusal for a limit does (SlurmExecutor.submit)
    assert read_limits({"qos": "hpcr-limited"}, user="root").free_slots == 4 and calls.count("sacctmgr") == 6
    monkeypatch.setenv("HPCR_LIMITS_CACHE_S", "0")
    read_limits({"qos": "hpcr-limited"}, user="root")
    assert calls.count("sacctmgr") == 8  # kept answers are not used when keeping is off


@pytest.mark.parametrize("damage", ["old", "future", "damaged", "other commands", "not numbers"])
def test_kept_answers_that_are_old_damaged_or_for_other_commands_are_not_used(tmp_path, monkeypatch, damage):
    import json as json_
    import time as time_

    from hpc_runner.scheduler.slurm import limits_cache

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("HPCR_LIMITS_CACHE_S", "300")
    commands = [["sacctmgr", "show", "qos"], ["sacctmgr", "show", "user", "me"]]
    limits_cache.keep("c1", "me", commands, ["a|1|", "b|2|"])
    assert limits_cache.kept("c1", "me", commands)[0] == ["a|1|", "b|2|"]
    assert limits_cache.kept("c2", "me", commands) is None and limits_cache.kept("c1", "you", commands) is None
    (file,) = (tmp_path / "hpc-runner" / "slurm-limits").iterdir()
    data = json_.loads(file.read_text())
    if damage == "old":
        data["at"] = time_.time() - 301
    elif damage == "future":
        data["at"] = time_.time() + 60  # a clock that went back: not trusted
    elif damage == "damaged":
        data = "{not json"
    elif damage == "other commands":
        data["answers"] = {"sacctmgr show qos": "a|1|"}
    else:
        data["answers"] = {" ".join(c): 7 for c in commands}
    file.write_text(data if isinstance(data, str) else json_.dumps(data))
    assert limits_cache.kept("c1", "me", commands) is None


def _nothing(_: int) -> None:
    """What the refused array would have run."""


@pytest.mark.slow
@pytest.mark.slurm
def test_a_refusal_for_a_limit_drops_the_kept_limits(slurm_cluster, qos_limit, tmp_path, monkeypatch):
    from hpc_runner.scheduler.executor import JobRequest
    from hpc_runner.scheduler.profiles import load_profile
    from hpc_runner.scheduler.select import executor_for

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("HPCR_LIMITS_CACHE_S", "300")
    kept = tmp_path / "cache" / "hpc-runner" / "slurm-limits"
    qos_limit(2)
    executor = executor_for(load_profile("slurm", {"qos": "hpcr-limited", "time": 5}))
    assert executor.limits().binding.value == 2 and len(list(kept.iterdir())) == 1
    with pytest.raises(ClusterError) as refused:  # 3 tasks against a limit of 2: sbatch says no
        executor.submit(_nothing, [[1, 2, 3]], JobRequest("refused", tmp_path / "logs", hold=True))
    assert is_limit_refusal(refused.value.message) and not list(kept.iterdir())

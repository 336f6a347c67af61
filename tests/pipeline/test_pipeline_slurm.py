"""Pipelines on the local SLURM: every stage queued at once, each waiting on its inputs; failure propagates."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from warm_python import WARM

from hpc_runner.pipeline import record as pr
from hpc_runner.scheduler.slurm import limits_cache

ROOT = Path(__file__).resolve().parents[2]
PROFILE = "pipelinecluster"
LIMITED_QOS = "hpcr-limited"

pytestmark = [pytest.mark.slow, pytest.mark.slurm]


@pytest.fixture
def run(tmp_path, slurm_cluster):
    """``run(*args)``: the CLI in a new process, as a user runs it, with the profile `pipelinecluster` (1 CPU)."""
    clusters = tmp_path / "clusters"
    clusters.mkdir()
    (clusters / f"{PROFILE}.yaml").write_text("extends: slurm\ncpus_per_task: 1\ntime: 10\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HPCR_", "SLURM_JOB", "SLURM_ARRAY"))}
    env.update(PYTHONPATH=str(ROOT), HPCR_CLUSTER_PATH=str(clusters), XDG_CONFIG_HOME=str(tmp_path / "config"),
               OMP_NUM_THREADS="1", SLURM_CONF=slurm_cluster.env.get("SLURM_CONF", ""))

    def call(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return WARM.run("hpc_runner", list(args), env=env, cwd=tmp_path, timeout=timeout)

    call.clusters = clusters  # type: ignore[attr-defined]
    return call


def all_jobs(directory: Path) -> list[str]:
    """Every job id the pipeline's stages were queued as (array ids for arrays)."""
    record = pr.PipelineRecord.load(directory)
    return [j for s in record.stages for j in s.get("jobs") or []]


def queued(slurm_cluster, jobs: list[str]) -> dict[str, str]:
    """squeue's reason for each of ``jobs`` still queued (array tasks by their array id)."""
    res = slurm_cluster.run("squeue", "-h", "-j", ",".join(jobs), "-o", "%i|%T|%r")
    rows = [line.split("|") for line in res.stdout.split() if "|" in line]
    return {r[0].split("_")[0]: f"{r[1]} {r[2]}" for r in rows}


def sacct_states(slurm_cluster, jobs: list[str], timeout: float = 60) -> dict[str, str]:
    """sacct's state of each job (an array that never started has one record, ``123_[0-1%2]``), once it has one."""
    deadline = time.monotonic() + timeout
    while True:
        res = slurm_cluster.run("sacct", "-X", "-n", "-P", "-j", ",".join(jobs), "-o", "JobID,State")
        states = {line.split("|")[0]: line.split("|")[1].split()[0] for line in res.stdout.split("\n") if "|" in line}
        if {j.split("_")[0] for j in states} >= set(jobs) or time.monotonic() > deadline:
            return states
        time.sleep(1)


def wait_for_the_pipeline(run, directory: Path, slurm_cluster, timeout: float = 480) -> str:
    res = run("status", str(directory), "--wait", "--interval", "3", "--timeout", str(timeout), timeout=timeout + 60)
    if "still queued or running" in res.stdout:
        pytest.fail(f"the pipeline did not end in {timeout} s:\n{res.stdout}\n"
                    f"{slurm_cluster.explain(directory, all_jobs(directory))}")
    return res.stdout


def test_the_example_pipeline_is_queued_at_once_and_runs_to_the_end(run, write_pipeline, example, slurm_cluster):
    path = write_pipeline(example())
    directory = path.parent / "study"
    res = run("pipeline", str(path), "--cluster", PROFILE, "--output_dir", str(directory))
    assert res.returncode == 0, res.stderr
    record = pr.PipelineRecord.load(directory)
    jobs = {s["name"]: s["jobs"] for s in record.stages}
    assert all(s["state"] == pr.QUEUED for s in record.stages)
    # right after `pipeline` returns, the later stages wait on their inputs (squeue says why once the scheduler
    # has looked at them: within its sched_interval)
    later = [j for n in ("best", "test", "predict") for j in jobs[n]]
    deadline = time.monotonic() + 15
    reasons = queued(slurm_cluster, later)
    while any(r.endswith(" None") for r in reasons.values()) and time.monotonic() < deadline:
        time.sleep(0.5)
        reasons = queued(slurm_cluster, later)
    assert reasons == {jobs["best"][0]: "PENDING Dependency", jobs["test"][0]: "PENDING Dependency",
                       jobs["predict"][0]: "PENDING Dependency"}, reasons
    assert record.stage("best")["dependency"] == f"afterany:{jobs['search'][0]}"
    assert record.stage("test")["dependency"] == record.stage("predict")["dependency"] == f"afterok:{jobs['best'][0]}"
    status = run("status", str(directory)).stdout
    assert "PENDING (Dependency)" in status, status
    final = wait_for_the_pipeline(run, directory, slurm_cluster)
    assert "4 COMPLETED" in final, final + slurm_cluster.explain(directory, all_jobs(directory))
    record = pr.PipelineRecord.load(directory)
    chosen = record.choice("best")
    metrics = json.loads((directory / "test" / "summary.json").read_text())["metrics"]
    assert metrics["dice"]["mean"] is not None and metrics["hd95"]["mean"] is not None
    assert json.loads((directory / "test" / "summary.json").read_text())["weights"].startswith(chosen["run_dir"])
    assert len(list((directory / "predict" / "predictions").glob("*_seg.nii.gz"))) == 2
    assert queued(slurm_cluster, all_jobs(directory)) == {}
    collected = run("collect", str(directory))
    assert collected.returncode == 0 and f"chosen: point {chosen['point']} of search" in collected.stdout


def test_a_pipeline_whose_search_points_all_fail_leaves_no_job_pending_and_says_why(run, write_pipeline, example,
                                                                                   slurm_cluster):
    path = write_pipeline(example({"batch_size": 0}))  # every point fails when its loader is built
    directory = path.parent / "study"
    assert run("pipeline", str(path), "--cluster", PROFILE, "--output_dir", str(directory)).returncode == 0
    jobs = {s["name"]: s["jobs"] for s in pr.PipelineRecord.load(directory).stages}
    wait_for_the_pipeline(run, directory, slurm_cluster)
    deadline = time.monotonic() + 60
    while queued(slurm_cluster, all_jobs(directory)) and time.monotonic() < deadline:
        time.sleep(1)
    assert queued(slurm_cluster, all_jobs(directory)) == {}  # nothing pending, nothing in DependencyNeverSatisfied
    assert set(sacct_states(slurm_cluster, [j for n in ("test", "predict") for j in jobs[n]]).values()) == {
        "CANCELLED"}
    res = run("status", str(directory), "--json")
    by_stage = {s["stage"]: s for s in map(json.loads, res.stdout.splitlines())}
    assert by_stage["best"]["state"] == "FAILED" and by_stage["best"]["cause"]["kind"] == "NO_CHOICE"
    assert "batch_size should be a positive integer" in by_stage["best"]["cause"]["message"]
    for name in ("test", "predict"):
        assert by_stage[name]["state"] == "CANCELLED"
        assert by_stage[name]["cause"]["message"].startswith("stage 'best' failed: nothing to choose")


@pytest.fixture
def qos_limit(slurm_cluster):
    """``qos_limit(n)``: MaxSubmitJobsPerUser=n on QOS hpcr-limited (once slurmctld knows it); reset after."""
    def shown() -> str:
        return slurm_cluster.run("scontrol", "show", "assoc_mgr", "flags=qos", f"qos={LIMITED_QOS}").stdout

    if LIMITED_QOS not in slurm_cluster.run("sacctmgr", "-nP", "show", "qos", "format=Name").stdout.split():
        pytest.skip(f"no QOS {LIMITED_QOS}: restart the cluster with the current scripts/local-slurm.sh")
    if "No Users" in shown():  # slurmctld shows a user's QOS limits once they submitted in the QOS
        job = slurm_cluster.run("sbatch", "--parsable", "--hold", f"--qos={LIMITED_QOS}", "-o", "/dev/null",
                                "--wrap", "true").stdout.strip()
        slurm_cluster.run("scancel", job)

    def set_limit(n: int) -> None:
        slurm_cluster.run("sacctmgr", "-i", "modify", "qos", LIMITED_QOS, "set", f"MaxSubmitJobsPerUser={n}")
        want = f"MaxSubmitJobsPU={'N' if n < 0 else n}("
        deadline = time.monotonic() + 20
        while want not in shown():
            if time.monotonic() > deadline:
                pytest.fail(f"slurmctld did not take MaxSubmitJobsPerUser={n} on {LIMITED_QOS}")
            time.sleep(0.2)
        shutil.rmtree(limits_cache.folder(), ignore_errors=True)  # as after an admin's change and a refusal

    yield set_limit
    set_limit(-1)


def test_the_submit_limit_holds_for_the_whole_pipeline_and_the_select_stage_waits_for_the_topped_up_points(
        run, write_pipeline, example, slurm_cluster, qos_limit):
    qos_limit(5)  # 3 search points, 2 shards and 3 single jobs would need 8 slots
    (run.clusters / f"{PROFILE}.yaml").write_text(f"extends: slurm\ncpus_per_task: 1\ntime: 10\nqos: {LIMITED_QOS}\n")
    stages = example()
    stages[0]["sweep"] = ["learning_rate=1e-3,2e-3,4e-3"]
    path = write_pipeline(stages)
    directory = path.parent / "study"
    res = run("pipeline", str(path), "--cluster", PROFILE, "--output_dir", str(directory))
    assert res.returncode == 0, res.stderr
    # the search keeps a slot for each later stage: 2 of its points are queued now, 1 waits; 1 shard waits
    search = json.loads((directory / "search" / "sweep.yaml").read_text())
    assert [p["submit"] for p in search["points"]] == ["submitted", "submitted", "waiting"]
    predict = json.loads((directory / "predict" / "sweep.yaml").read_text())
    assert [p["submit"] for p in predict["points"]] == ["submitted", "waiting"]
    assert predict["dependency"] == pr.PipelineRecord.load(directory).stage("predict")["dependency"]
    final = wait_for_the_pipeline(run, directory, slurm_cluster, timeout=600)
    assert "4 COMPLETED" in final, final + slurm_cluster.explain(directory, all_jobs(directory))
    record = pr.PipelineRecord.load(directory)
    search = json.loads((directory / "search" / "sweep.yaml").read_text())
    assert all(p["submit"] == "submitted" for p in search["points"])
    assert [s["reason"] for s in search["submissions"]] == ["sweep", "top-up"]  # the waiting point went later
    # the select stage chose among all 3 points: it waited for the one a task topped up later
    considered = json.loads((directory / "best" / "choice.json").read_text())["considered"]
    assert [c["state"] for c in considered] == ["COMPLETED"] * 3
    assert "is the max of 3 point(s) that completed" in record.choice("best")["why"]
    assert len(list((directory / "predict" / "predictions").glob("*_seg.nii.gz"))) == 2

"""Pipelines against the in-memory cluster, through the CLI's own commands (``pipeline``, ``status``, ``cancel``,
``resume``, ``collect``) run in this process: every stage is queued at once and waits on its inputs, a failed
input propagates with its cause, the submit limit holds for the whole pipeline, cancel stops every stage and
resume queues again only what never ran. The scenarios of tests/pipeline/test_pipeline_slurm.py, in
milliseconds.

No job's own code runs except the select stage's (``cluster.run``, our code): the test ends each training,
evaluation and inference job, and where a later stage reads what a job leaves behind (a point's summary.json
and weights, a failed job's log) the test writes it, standing in for the bundle.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from submitit.core.utils import JobPaths

from hpc_runner.cli import main
from hpc_runner.config import preflight
from hpc_runner.jobs.ledger import SweepRecord
from hpc_runner.jobs.targets import load_target
from hpc_runner.pipeline import record as pr
from hpc_runner.scheduler.memory.executor import MemoryCluster
from hpc_runner.scheduler.slurm import cluster_info

PROFILE = "mem"
SLURM_COMMANDS = ("sbatch", "squeue", "sacct", "sacctmgr", "scontrol", "scancel", "sinfo", "srun")
Cli = Callable[..., tuple[int, str, str]]
ERROR_LINE = "ValueError: batch_size should be a positive integer value, but got batch_size=0"

pytestmark = pytest.mark.filterwarnings("ignore:.*every `_target_` is imported:UserWarning")


@pytest.fixture(autouse=True)
def no_real_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """SLURM's commands, should any code path still call one, fail here and are listed: a test of the in-memory
    cluster must never reach the machine's SLURM."""
    bin_dir, calls = tmp_path / "no-slurm-bin", tmp_path / "slurm-calls.txt"
    bin_dir.mkdir()
    for name in SLURM_COMMANDS:
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\necho "{name} $*" >> {calls}\nexit 1\n')
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setattr(cluster_info, "_CACHE", {})  # a `scontrol show config` answered earlier is not reused
    yield
    assert not calls.exists(), f"a SLURM command was run: {calls.read_text()}"


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Cli:
    """``cli(*args)``: the CLI in this process with the profile `mem` (executor: memory); returns (code, stdout,
    stderr)."""
    clusters = tmp_path / "clusters"
    clusters.mkdir()
    (clusters / f"{PROFILE}.yaml").write_text("executor: memory\ncpus_per_task: 1\ntime: 10\nmem_gb: 1\n")
    monkeypatch.setenv("HPCR_CLUSTER_PATH", str(clusters))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    for key in [k for k in os.environ if k.startswith(("SLURM_JOB", "SLURM_ARRAY"))]:
        monkeypatch.delenv(key)  # the select job reads its own job id from these

    def call(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(list(args))
        out = capsys.readouterr()
        return code, out.out, out.err

    return call


@pytest.fixture
def start(cli: Cli, write_pipeline: Callable[..., Path], example: Callable[..., list[dict[str, Any]]],
          tmp_path: Path) -> Callable[..., Path]:
    """``start(stages=None)``: `hpc-runner pipeline` of the example (or ``stages``) without the pre-flight (it
    would import the bundle's code); returns the pipeline dir."""

    def run(stages: list[dict[str, Any]] | None = None) -> Path:
        directory = tmp_path / "study"
        code, out, err = cli("pipeline", str(write_pipeline(stages or example())), "--cluster", PROFILE,
                             "--output_dir", str(directory), "--no-preflight")
        assert code == 0 and "pipeline of" in out and "stage(s) queued (profile mem)" in out, err
        assert "pre-flight skipped" in pr.PipelineRecord.load(directory).data["checked"]
        return directory

    return run


@pytest.fixture
def preflight_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The config pre-flight, recorded and not run: `resume DIR` of a pipeline always pre-flights the folders it
    resumes (pipeline/resume.py passes no --no-preflight on), and the pre-flight imports the bundle's targets
    (MONAI and torch: 10 s here)."""
    calls: list[str] = []
    monkeypatch.setattr(preflight, "check_points", lambda cfg, points, *a, **k: calls.append("points") or "stub")
    monkeypatch.setattr(preflight, "check_config", lambda cfg, *a, **k: calls.append("config"))
    return calls


def jobs_of(directory: Path) -> dict[str, list[str]]:
    """Return each stage's job ids as the pipeline record holds them now."""
    return {s["name"]: list(s.get("jobs") or []) for s in pr.PipelineRecord.load(directory).stages}


def tasks_of(cluster: MemoryCluster, job: str) -> list[str]:
    """Return the task ids of a job or array (``4`` -> ``4_0``, ``4_1``)."""
    return [j.job_id for j in cluster.jobs.values() if j.array_id == job or j.job_id == job]


def point_jobs(folder: Path) -> list[str | None]:
    """Return the job id of each point of a sweep or sharded stage (None: it waits for a slot)."""
    return [p.get("job_id") for p in SweepRecord.load(folder).points]


def status_json(cli: Cli, directory: Path) -> dict[str, dict[str, Any]]:
    """Return `hpc-runner status DIR --json`, by stage."""
    code, out, err = cli("status", str(directory), "--json")
    assert code == 0, err
    return {s["stage"]: s for s in map(json.loads, out.splitlines())}


def trained(folder: Path, values: dict[int, float]) -> None:
    """Leave what a completed training leaves for the select stage: summary.json with val_dice, and weights (the
    test stands in for the bundle, whose code does not run here)."""
    target = load_target(folder)
    for point in target.points:
        if point["index"] in values:
            run_dir = target.run_dir(point)
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / "summary.json").write_text(json.dumps({"val_dice": values[point["index"]]}))
            (run_dir / "model.pt").write_bytes(b"weights")


def end_search(cluster: MemoryCluster, directory: Path, values: dict[int, float]) -> None:
    """The search's queued points complete with these val_dice values."""
    trained(directory / "search", values)
    folder = directory / "search"
    for job in [j for j in point_jobs(folder) if j]:
        if cluster.state(job) in ("PENDING", "RUNNING"):
            cluster.finish(job)


def run_select(cluster: MemoryCluster, directory: Path) -> Any:
    """Run the select stage's current job here (its code is ours); return what it returned."""
    (job,) = jobs_of(directory)["best"]
    cluster.advance(0)
    assert cluster.state(job) == "RUNNING", (job, cluster.state(job), cluster.job(job).reason)
    return cluster.run(job)


def test_every_stage_is_queued_at_once_each_waiting_on_its_inputs_and_the_chain_runs_to_the_end(
        make_cluster, start, cli) -> None:
    cluster = make_cluster()
    directory = start()
    record = pr.PipelineRecord.load(directory)
    jobs = jobs_of(directory)
    assert all(s["state"] == pr.QUEUED for s in record.stages) and cluster.calls["sbatch"] == 4
    assert record.stage("best")["dependency"] == f"afterany:{jobs['search'][0]}"
    assert record.stage("test")["dependency"] == record.stage("predict")["dependency"] == f"afterok:{jobs['best'][0]}"
    later = [j for n in ("best", "test", "predict") for j in jobs[n]]
    cluster.advance(0)  # the search starts; nothing else may
    assert set(cluster.pending_reasons(later).values()) == {"Dependency"}
    assert {cluster.state(t) for t in tasks_of(cluster, jobs["search"][0])} == {"RUNNING"}
    _, out, _ = cli("status", str(directory))
    assert "PENDING (Dependency)" in out and "RUNNING" in out
    end_search(cluster, directory, {0: 0.5, 1: 0.7})
    assert run_select(cluster, directory)["point"] == 1
    chosen = pr.PipelineRecord.load(directory).choice("best")
    # the choice was written into the waiting stages' configs before they could start
    assert chosen["run_dir"] in (directory / "test" / "config.yaml").read_text()
    assert chosen["run_dir"] in (directory / "predict" / "base" / "config.yaml").read_text()
    cluster.advance(0)
    for job in [*jobs["test"], *tasks_of(cluster, jobs["predict"][0])]:
        assert cluster.state(job) == "RUNNING"
        cluster.finish(job)
    states = status_json(cli, directory)
    assert {s["state"] for s in states.values()} == {"COMPLETED"} and cluster.queued() == []
    _, out, _ = cli("status", str(directory))
    assert "4 COMPLETED" in out
    code, out, _ = cli("collect", str(directory))
    assert code == 0 and "chosen: point 1 of search" in out


def test_pipeline_json_prints_one_object_with_each_stage_s_job_ids_and_what_it_waits_on(
        make_cluster, cli, write_pipeline, example, tmp_path: Path) -> None:
    make_cluster()
    directory = tmp_path / "study"
    code, out, err = cli("pipeline", str(write_pipeline(example())), "--cluster", PROFILE, "--output_dir",
                         str(directory), "--no-preflight", "--json")
    assert code == 0, err
    answer = json.loads(out)  # stdout is the one object; the progress lines went to stderr
    jobs = jobs_of(directory)
    assert answer["dir"] == str(directory.resolve()) and answer["profile"] == PROFILE
    assert {name: s["job_ids"] for name, s in answer["stages"].items()} == jobs
    assert answer["stages"]["best"]["waits"] == f"afterany:{jobs['search'][0]}"
    assert answer["stages"]["search"]["waits"] is None


def test_search_points_that_all_fail_leave_no_job_pending_and_every_later_stage_names_the_cause(
        make_cluster, start, cli) -> None:
    cluster = make_cluster()
    directory = start()
    jobs = jobs_of(directory)
    folder = load_target(directory / "search").job_folder
    cluster.advance(0)
    for task in tasks_of(cluster, jobs["search"][0]):  # each fails as the bundle fails on batch_size 0
        JobPaths(folder, job_id=task).stderr.parent.mkdir(parents=True, exist_ok=True)
        JobPaths(folder, job_id=task).stderr.write_text(f"Traceback (most recent call last):\n{ERROR_LINE}\n")
        cluster.finish(task, "FAILED")
    assert run_select(cluster, directory) is None
    assert type(cluster.job(jobs["best"][0]).error).__name__ == "SelectFailed"
    assert cluster.state(jobs["best"][0]) == "FAILED" and cluster.queued() == []
    later = [jobs["test"][0], *tasks_of(cluster, jobs["predict"][0])]
    # scancel'd by the select job itself (pipeline/propagate.py), not left to the scheduler's kill-on-invalid-dep
    assert {cluster.state(j) for j in later} == {f"CANCELLED by {os.getuid()}"}
    states = status_json(cli, directory)
    assert states["best"]["state"] == "FAILED" and states["best"]["cause"]["kind"] == "NO_CHOICE"
    assert "batch_size should be a positive integer" in states["best"]["cause"]["message"]
    for name in ("test", "predict"):
        assert states[name]["state"] == "CANCELLED" and states[name]["cause"]["kind"] == "INPUT_FAILED"
        assert states[name]["cause"]["message"].startswith("stage 'best' failed: nothing to choose")


def test_a_select_job_killed_before_it_chose_lets_slurm_end_the_later_stages_and_status_names_the_input(
        make_cluster, start, cli) -> None:
    cluster = make_cluster()  # kill_invalid_dep: what the SLURM executor asks for
    directory = start()
    jobs = jobs_of(directory)
    end_search(cluster, directory, {0: 0.5, 1: 0.7})
    cluster.advance(0)
    cluster.finish(jobs["best"][0], "OUT_OF_MEMORY")  # its own code never ran: nothing recorded, nothing cancelled
    assert cluster.queued() == []  # the scheduler ended test and predict: afterok can never be met
    assert cluster.job(jobs["test"][0]).reason == "DependencyNeverSatisfied"
    states = status_json(cli, directory)
    assert states["best"]["state"] == "FAILED" and states["best"]["cause"]["kind"] == "OUT_OF_MEMORY"
    for name in ("test", "predict"):
        assert states[name]["state"] == "CANCELLED" and states[name]["cause"]["kind"] == "INPUT_FAILED"
        assert states[name]["cause"]["message"].startswith("stage 'best' failed")


def test_on_a_cluster_that_ignores_kill_on_invalid_dep_status_cancels_the_stages_that_can_never_start(
        make_cluster, start, cli) -> None:
    cluster = make_cluster(kill_invalid_dep=False)
    directory = start()
    jobs = jobs_of(directory)
    end_search(cluster, directory, {0: 0.5})
    cluster.advance(0)
    cluster.finish(jobs["best"][0], "NODE_FAIL")
    stuck = [jobs["test"][0], *tasks_of(cluster, jobs["predict"][0])]
    assert set(cluster.pending_reasons(stuck).values()) == {"DependencyNeverSatisfied"}
    code, _, err = cli("status", str(directory))
    assert code == 0 and "cancelled stage(s) test, predict" in err
    assert cluster.queued() == [] and {cluster.state(j).split()[0] for j in stuck} == {"CANCELLED"}
    record = pr.PipelineRecord.load(directory)
    for name in ("test", "predict"):
        assert record.stage(name)["state"] == pr.CANCELLED
        assert record.stage(name)["cause"]["kind"] == "INPUT_FAILED"
        assert "DependencyNeverSatisfied" in record.stage(name)["cause"]["message"]


def test_the_submit_limit_holds_for_the_whole_pipeline_and_the_select_stage_waits_for_the_topped_up_points(
        make_cluster, start, cli, example) -> None:
    cluster = make_cluster(max_submit=5)  # 3 search points, 2 shards and 3 single jobs would need 8 slots
    stages = example()
    stages[0]["sweep"] = ["learning_rate=1e-3,2e-3,4e-3"]
    directory = start(stages)
    jobs = jobs_of(directory)
    # the search keeps a slot for each later stage: 2 of its points are queued now, 1 waits; 1 shard waits
    assert [p["submit"] for p in SweepRecord.load(directory / "search").points] == ["submitted", "submitted",
                                                                                    "waiting"]
    predict = SweepRecord.load(directory / "predict")
    assert [p["submit"] for p in predict.points] == ["submitted", "waiting"]
    assert predict.data["dependency"] == pr.PipelineRecord.load(directory).stage("predict")["dependency"]
    assert len(cluster.queued()) == 5
    cluster.advance(0)
    first = [j for j in point_jobs(directory / "search") if j]
    trained(directory / "search", {0: 0.5, 1: 0.9, 2: 0.7})
    cluster.finish(first[0])
    cli("status", str(directory))  # the top-up sends the waiting point into the freed slot
    third = point_jobs(directory / "search")[2]
    assert third and len(cluster.queued()) == 5
    best = cluster.job(jobs["best"][0])
    assert third.split("_")[0] in best.dependency  # the select job waits on the topped-up point too
    cluster.finish(first[1])
    cluster.advance(0)
    assert best.state == "PENDING" and best.reason == "Dependency"  # its first array ended; the point still runs
    cluster.finish(third)
    assert run_select(cluster, directory)["point"] == 1
    considered = json.loads((directory / "best" / "choice.json").read_text())["considered"]
    assert [c["state"] for c in considered] == ["COMPLETED"] * 3
    assert "is the max of 3 point(s) that completed" in pr.PipelineRecord.load(directory).choice("best")["why"]
    cli("status", str(directory))  # the waiting shard goes into a freed slot, with the stage's dependency
    shards = point_jobs(directory / "predict")
    assert all(shards) and cluster.job(shards[1]).dependency == f"afterok:{jobs['best'][0]}"
    cluster.advance(0)
    for job in cluster.queued():
        cluster.finish(job)
    assert {s["state"] for s in status_json(cli, directory).values()} == {"COMPLETED"}
    assert [s["reason"] for s in SweepRecord.load(directory / "search").submissions()] == ["sweep", "top-up"]
    assert cluster.most_queued == 5 and cluster.refused == []


def test_a_select_job_that_starts_while_a_point_still_waits_tops_it_up_and_waits_again_as_a_new_job(
        make_cluster, start, cli, example) -> None:
    cluster = make_cluster(max_submit=5)
    stages = example()
    stages[0]["sweep"] = ["learning_rate=1e-3,2e-3,4e-3"]
    directory = start(stages)
    jobs = jobs_of(directory)
    end_search(cluster, directory, {0: 0.5, 1: 0.6, 2: 0.9})  # nobody topped up: point 2 still waits
    deferred = run_select(cluster, directory)
    assert deferred["status"] == "deferred"
    third, copy = point_jobs(directory / "search")[2], deferred["job"]
    assert third and deferred["dependency"] == f"afterany:{third.split('_')[0]}"
    assert cluster.state(jobs["best"][0]) == "COMPLETED"  # it ended; its waiting stages now wait on the copy
    record = pr.PipelineRecord.load(directory)
    assert record.stage("best")["state"] == pr.QUEUED and record.stage("best")["deferrals"] == 1
    for name in ("test", "predict"):
        assert record.stage(name)["dependency"] == f"afterok:{copy}"
        assert {cluster.job(j).dependency for j in tasks_of(cluster, jobs[name][0])} == {f"afterok:{copy}"}
    assert SweepRecord.load(directory / "predict").data["dependency"] == f"afterok:{copy}"
    cluster.advance(0)
    cluster.finish(third)
    assert run_select(cluster, directory)["point"] == 2
    assert "is the max of 3 point(s)" in pr.PipelineRecord.load(directory).choice("best")["why"]
    cluster.advance(0)
    assert cluster.state(jobs["test"][0]) == "RUNNING" and cluster.refused == []


def test_cancel_stops_every_stage_and_resume_queues_again_only_what_never_ran(make_cluster, start, cli,
                                                                             preflight_calls) -> None:
    cluster = make_cluster()
    directory = start()
    first = jobs_of(directory)
    code, out, _ = cli("cancel", str(directory))
    assert code == 0 and "cancelled stage(s) search, best, test, predict" in out, out
    assert cluster.queued() == []
    record = pr.PipelineRecord.load(directory)
    assert {s["state"] for s in record.stages} == {pr.CANCELLED}
    assert {s["cause"]["kind"] for s in record.stages} == {"CANCELLED"}
    code, out, err = cli("resume", str(directory))
    assert code == 0, err
    assert "0 stage(s) kept (none); 4 to queue again" in out
    assert preflight_calls == ["points"]  # the search's cancelled points, resumed in its folder
    record = pr.PipelineRecord.load(directory)
    assert all(s["state"] == pr.QUEUED and s["submissions"] == 2 and s["jobs"] != first[s["name"]]
               for s in record.stages)
    assert (directory / "attempts" / "test-1").is_dir()  # it never ran with a choice: started anew
    jobs = jobs_of(directory)
    assert record.stage("best")["dependency"] == f"afterany:{jobs['search'][0]}"
    assert record.stage("test")["dependency"] == f"afterok:{jobs['best'][0]}"
    end_search(cluster, directory, {0: 0.5, 1: 0.7})
    assert run_select(cluster, directory)["point"] == 1
    cluster.advance(0)
    for job in cluster.queued():
        cluster.finish(job)
    assert {s["state"] for s in status_json(cli, directory).values()} == {"COMPLETED"}


def test_resume_after_a_failed_evaluation_queues_only_that_stage_and_keeps_the_choice(
        make_cluster, start, cli, preflight_calls) -> None:
    cluster = make_cluster()
    directory = start()
    jobs = jobs_of(directory)
    end_search(cluster, directory, {0: 0.5, 1: 0.7})
    run_select(cluster, directory)
    chosen = pr.PipelineRecord.load(directory).choice("best")
    cluster.advance(0)
    cluster.finish(jobs["test"][0], "FAILED")
    for task in tasks_of(cluster, jobs["predict"][0]):
        cluster.finish(task)
    assert status_json(cli, directory)["test"]["state"] == "FAILED"
    sbatch = cluster.calls["sbatch"]
    code, out, err = cli("resume", str(directory))
    assert code == 0, err
    assert "3 stage(s) kept (search, best, predict); 1 to queue again (test: points)" in out
    assert preflight_calls == ["config"]  # the evaluation's run dir, resumed with the choice it took
    record = pr.PipelineRecord.load(directory)
    assert record.choice("best") == chosen and record.stage("test")["submissions"] == 2
    assert cluster.calls["sbatch"] == sbatch + 1 and cluster.queued() == record.stage("test")["jobs"]
    assert record.stage("search")["submissions"] == record.stage("predict")["submissions"] == 1


def test_a_pipeline_without_a_free_slot_for_each_stage_is_refused_before_anything_is_written(
        make_cluster, cli, write_pipeline, example, tmp_path) -> None:
    cluster = make_cluster(max_submit=3)
    directory = tmp_path / "study"
    code, _, err = cli("pipeline", str(write_pipeline(example())), "--cluster", PROFILE, "--output_dir",
                       str(directory), "--no-preflight")
    assert code == 2 and "needs at least 4 submit slot(s) to start" in err and "3 are free" in err
    assert not directory.exists() and cluster.calls["sbatch"] == 0


def test_a_stage_sbatch_refuses_cancels_the_stages_queued_before_it_and_names_resume(
        make_cluster, start, cli, write_pipeline, example, tmp_path) -> None:
    cluster = make_cluster()
    stages = example()
    stages[2]["slurm"] = {"mem_gb": 4096}  # no node has that much: sbatch refuses the evaluation
    directory = tmp_path / "study"
    code, _, err = cli("pipeline", str(write_pipeline(stages)), "--cluster", PROFILE, "--output_dir",
                       str(directory), "--no-preflight")
    assert code == 2 and "queueing stage 'test' failed" in err and f"hpc-runner resume {directory}" in err
    assert "Requested node configuration is not available" in cluster.refused[0]
    assert cluster.queued() == []  # the search and the select stage were cancelled again
    record = pr.PipelineRecord.load(directory)
    assert [s["state"] for s in record.stages] == [pr.CANCELLED, pr.CANCELLED, pr.NOT_SUBMITTED, pr.CANCELLED]
    assert record.stage("search")["cause"]["kind"] == "INPUT_FAILED"
    assert "could not be queued" in record.stage("predict")["cause"]["message"]


def test_resume_no_preflight_of_a_pipeline_checks_no_config_of_the_folders_it_resumes(
        make_cluster, start, cli, preflight_calls) -> None:
    make_cluster()
    directory = start()
    code, out, _ = cli("cancel", str(directory))
    assert code == 0, out
    code, out, err = cli("resume", str(directory), "--no-preflight")
    assert code == 0 and "4 to queue again" in out, err
    assert preflight_calls == []  # was ["points"]: the flag was read for sweeps, runs and tunes, not pipelines


def test_status_no_submit_collect_and_report_leave_a_pipeline_dir_as_it_was(make_cluster, start, cli, example,
                                                                           tmp_path) -> None:
    """Read-only for a pipeline dir too (issue 32; the other kinds: tests/cli/test_read_only.py): a stage that
    can never start (a plain status cancels it: scancel, pipeline.yaml) and a search point waiting for a slot
    (a plain status tops it up) are left alone, every file's bytes and mtime as they were."""
    from tests.cli.test_read_only import REPORT, TABLES, changed, snapshot

    cluster = make_cluster(kill_invalid_dep=False, max_submit=5)
    stages = example()
    stages[0]["sweep"] = ["learning_rate=1e-3,2e-3,4e-3"]  # 2 of the search's points queued, 1 waits
    directory = start(stages)
    jobs = jobs_of(directory)
    end_search(cluster, directory, {0: 0.5, 1: 0.7})
    cluster.advance(0)
    cluster.finish(jobs["best"][0], "NODE_FAIL")  # test and predict: DependencyNeverSatisfied, left pending
    calls = dict(cluster.calls)
    before = snapshot(directory)
    for args in (["status", str(directory), "--no-submit"], ["status", str(directory), "--no-submit", "--all"]):
        code, _, err = cli(*args)
        assert code == 0 and changed(before, snapshot(directory)) == [], err
    assert (cluster.calls["sbatch"], cluster.calls["scancel"]) == (calls.get("sbatch", 0), calls.get("scancel", 0))
    code, _, err = cli("collect", str(directory), "--out", str(tmp_path / "tables"), "--quiet")
    assert code == 0 and changed(before, snapshot(directory), TABLES) == [], err  # the search's own table only
    code, _, err = cli("report", str(directory))
    assert code == 0 and changed(before, snapshot(directory), (*TABLES, *REPORT)) == [], err
    assert cluster.calls["scancel"] == calls.get("scancel", 0)
    code, _, err = cli("status", str(directory))  # plain: the clean-up and the top-up write, as documented
    assert code == 0 and "pipeline.yaml" in changed(before, snapshot(directory)), err


def _files_of(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("how", ["path", "link"])
def test_a_pipeline_record_whose_stage_dir_leads_to_another_sweep_is_refused_and_nothing_is_written_there(
        make_cluster, start, cli, tmp_path, how) -> None:
    """Issue 32: a pipeline.yaml stage `dir` naming another sweep (or a stage folder that is a link to it) made
    `collect` write that sweep's results there; every command now refuses the record, naming the stage and key."""
    import shutil

    from hpc_runner.records.atomic import write_text_atomic

    cluster = make_cluster()
    directory = start()
    end_search(cluster, directory, {0: 0.5, 1: 0.7})
    assert run_select(cluster, directory)["point"] == 1
    victim = Path(shutil.copytree(directory / "search", tmp_path / "victim"))
    record = pr.PipelineRecord.load(directory)
    if how == "path":
        record.stage("search")["dir"] = "../victim"
        write_text_atomic(record.file, record.text())
    else:
        shutil.rmtree(directory / "search")
        (directory / "search").symlink_to(victim)
    before, record_text = _files_of(victim), record.file.read_text()
    for command in (["collect", str(directory)], ["status", str(directory)], ["resume", str(directory)],
                    ["cancel", str(directory)]):
        code, out, err = cli(*command)
        assert code == 2, (command, out, err)
        assert err.count("error:") == 1 and "Traceback" not in err
        assert f"{record.file}: stage 0 ('search') dir '" in err and "outside the record's folder" in err
    assert _files_of(victim) == before and record.file.read_text() == record_text


def test_a_choice_whose_run_dir_leads_outside_the_pipeline_is_refused_where_it_is_used(
        make_cluster, start, cli, tmp_path) -> None:
    """The run dir a select stage chose (whose weights the later stages and the export load) lies inside the
    pipeline dir: a record edited to name another run dir is refused naming the key."""
    from hpc_runner.records.atomic import write_text_atomic

    cluster = make_cluster()
    directory = start()
    end_search(cluster, directory, {0: 0.5, 1: 0.7})
    run_select(cluster, directory)
    record = pr.PipelineRecord.load(directory)
    assert Path(record.choice("best")["run_dir"]).is_relative_to(directory.resolve())
    record.stage("best")["chosen"]["run_dir"] = str(tmp_path / "elsewhere" / "points" / "0000")
    write_text_atomic(record.file, record.text())
    with pytest.raises(pr.ClusterError, match=r"the run_dir chosen by stage 'best' '.*' resolves to .*, outside"):
        pr.PipelineRecord.load(directory).choice("best")


def test_status_wait_of_a_pipeline_puts_the_collectors_thresholds_back(importing_heap, make_cluster, start,
                                                                       cli) -> None:
    """The pipeline's own wait loop gives the collector back at its first poll (the sweep's loops:
    tests/cli/test_wait_gives_the_collector_back.py)."""
    import gc

    from hpc_runner import heap

    make_cluster()
    directory = start()  # every stage queued, none ended: the wait polls until --timeout
    code, out, err = cli("status", str(directory), "--wait", "--no-submit", "--interval", "0.01", "--timeout", "0.05")
    assert code == 1 and "still queued or running after 0.05 s" in out, err  # 1: not every stage ended well
    assert gc.get_threshold() == importing_heap and heap._saved is None

"""``hpc-runner tune`` on the real local SLURM: K workers as one array share the budget; a refused
submission leaves nothing; ``resume`` restarts the workers a tune still needs."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hpc_runner.jobs.ledger import SweepRecord

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "bundles" / "synthetic_seg"
TEST_PROFILE = "testcluster"
SPACE = ["--space", "learning_rate=loguniform(1e-4,1e-1)", "--space", "network_def::channels=choice([4,8],[8,16])"]


def tune_args(out: Path, tiny: list[str], *extra: str) -> list[str]:
    epochs = tiny.index("--max_epochs")
    tiny3 = [*tiny[:epochs], "--max_epochs", "3", *tiny[epochs + 2:]]
    return ["tune", "--bundle", str(BUNDLE), *SPACE, "--metric", "val_dice", "--sampler", "random", "--sampler-seed",
            "0", "--output_dir", str(out), *extra, *tiny3]


def workers_queued(cluster, out: Path) -> set[str]:
    jobs = {j.split("_")[0] for s in SweepRecord.load(out).submissions() for j in (s.get("workers") or {}).values()}
    if not jobs:
        return set()
    return set(cluster.run("squeue", "-h", "-r", "-j", ",".join(jobs), "-o", "%i").stdout.split())


def wait_idle(cluster, out: Path, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while workers_queued(cluster, out):
        if time.monotonic() > deadline:
            pytest.fail(f"tune workers still queued after {timeout} s: {workers_queued(cluster, out)}")
        time.sleep(1)


def journal_states(out: Path) -> list[str]:
    from hpc_runner.tune.study import open_study

    study = open_study(out, "maximize", "random", "none")
    return [t.state.name for t in study.get_trials(deepcopy=False)]


@pytest.mark.slow
@pytest.mark.slurm
def test_two_workers_share_four_trials_with_asha_and_every_trial_is_told(slurm_cluster, cli, tmp_path, tiny):
    out = tmp_path / "tune"
    res = cli(*tune_args(out, tiny, "--trials", "4", "--parallel", "2", "--pruner", "asha", "--cluster",
                         TEST_PROFILE))
    assert res.returncode == 0, res.stderr[-3000:]
    assert "2 tune worker(s) submitted as array" in res.stdout, res.stdout
    wait_idle(slurm_cluster, out)
    points = SweepRecord.load(out).points
    assert len(points) == 4
    assert {p["state"] for p in points} <= {"completed", "pruned"}, points
    assert {p["worker"] for p in points} <= {0, 1}
    told = {"completed": "COMPLETE", "pruned": "PRUNED"}
    assert journal_states(out) == [told[p["state"]] for p in sorted(points, key=lambda p: p["trial"])]
    col = cli("collect", str(out), "--quiet")
    assert col.returncode == 0, col.stdout + col.stderr
    assert "tune: 4 of 4 trial(s) started" in col.stdout, col.stdout
    assert (out / "tune.md").read_text().count("| 0 |") + (out / "tune.md").read_text().count("| 1 |") >= 4


@pytest.mark.slurm
@pytest.mark.parametrize("preflight", [True, False], ids=["our-check", "sbatch-refuses"])
def test_a_refused_submission_exits_2_and_leaves_no_tune_dir_and_nothing_queued(slurm_cluster, cli, tmp_path,
                                                                               tiny, preflight):
    out = tmp_path / "tune"
    extra = ["--trials", "2", "--parallel", "2", "--cluster", TEST_PROFILE, "--slurm", "partition=nosuchpart"]
    res = cli(*tune_args(out, tiny, *extra, *([] if preflight else ["--no-preflight"])))
    assert res.returncode == 2, res.stdout + res.stderr
    assert "nosuchpart" in res.stderr, res.stderr
    assert not out.exists()
    queued = slurm_cluster.run("squeue", "-h", "-o", "%j").stdout.split()
    assert not [n for n in queued if n.startswith("hpcr-tune")], queued


@pytest.mark.slow
@pytest.mark.slurm
def test_resume_starts_workers_for_the_unspent_budget_and_then_has_nothing_to_do(slurm_cluster, cli, tmp_path,
                                                                                  tiny):
    out = tmp_path / "tune"
    res = cli(*tune_args(out, tiny, "--trials", "3", "--parallel", "2", "--pruner", "none", "--cluster",
                         TEST_PROFILE, "--hold"))
    assert res.returncode == 0, res.stderr[-3000:]
    array = SweepRecord.load(out).submissions()[-1]["arrays"][0]["job_id"]
    slurm_cluster.run("scancel", array)  # the held workers never ran: no trial started
    wait_idle(slurm_cluster, out, 60)
    assert not [p for p in SweepRecord.load(out).points if "trial" in p]  # no trial claimed

    res = cli("resume", str(out))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "3 trial(s) not started: new worker(s) [0, 1]" in res.stdout, res.stdout
    wait_idle(slurm_cluster, out)
    points = SweepRecord.load(out).points
    assert [p["state"] for p in points] == ["completed"] * 3, points
    assert journal_states(out) == ["COMPLETE"] * 3

    again = cli("resume", str(out))
    assert again.returncode == 0 and "nothing to restart" in again.stdout, again.stdout + again.stderr


@pytest.mark.slow
@pytest.mark.slurm
def test_a_stop_signal_requeues_the_worker_and_it_finishes_the_same_trial_from_its_checkpoint(
    slurm_cluster, cli, tmp_path, dataset_dir
):
    """USR2 (SLURM's warning before a preemption or the time limit) while trial 0 trains: the worker
    checkpoints it and requeues itself; after the requeue it continues trial 0, every step once, then
    runs trial 1. No trial is lost, none is run twice."""
    import json

    out = tmp_path / "tune"
    train = ["--num_train", "8", "--num_val", "1", "--image_size", "16", "--batch_size", "1", "--max_epochs", "4",
             "--val_interval", "1", "--dataset_dir", str(dataset_dir)]
    res = cli("tune", "--bundle", str(BUNDLE), "--space", "learning_rate=loguniform(1e-3,1e-2)", "--metric",
              "val_dice", "--sampler", "random", "--sampler-seed", "0", "--pruner", "none", "--trials", "2",
              "--parallel", "1", "--cluster", TEST_PROFILE, "--output_dir", str(out), *train)
    assert res.returncode == 0, res.stderr[-3000:]
    job = SweepRecord.load(out).submissions()[-1]["workers"]["0"]
    metrics = out / "points" / "0000" / "metrics.jsonl"
    deadline = time.monotonic() + 180
    while not (metrics.is_file() and '"iter"' in metrics.read_text()):
        assert time.monotonic() < deadline, "trial 0 never started training"
        time.sleep(0.1)
    slurm_cluster.run("scancel", "--signal=USR2", job)
    wait_idle(slurm_cluster, out, 300)
    points = SweepRecord.load(out).points
    assert [(p["trial"], p["state"]) for p in points] == [(0, "completed"), (1, "completed")], points
    assert journal_states(out) == ["COMPLETE", "COMPLETE"]
    run = yaml_load(out / "points" / "0000" / "run.yaml")
    assert run["attempts"] == 2, run  # stopped once, then continued: not started again from scratch
    steps = [json.loads(line)["step"] for line in metrics.read_text().splitlines() if '"iter"' in line]
    assert steps == list(range(1, 33))  # 4 epochs x 8 steps, each once
    requeues = slurm_cluster.run("sacct", "-X", "-D", "-n", "-j", job, "-o", "JobID").stdout.split()
    assert len(requeues) >= 2, requeues  # one record per attempt: the worker's job was requeued


@pytest.mark.slow
@pytest.mark.slurm
def test_a_worker_cancelled_mid_trial_is_restarted_by_resume_and_finishes_that_trial_from_its_checkpoint(
    slurm_cluster, cli, tmp_path, dataset_dir
):
    """`scancel` of the only worker after trial 0's first epoch: the trial is left running (its job is gone,
    nobody told Optuna); `resume` restarts that worker, which continues trial 0 from its checkpoint and
    then runs trial 1. Every step of trial 0 is recorded once."""
    import json

    out = tmp_path / "tune"
    train = ["--num_train", "8", "--num_val", "1", "--image_size", "16", "--batch_size", "1", "--max_epochs", "4",
             "--val_interval", "1", "--dataset_dir", str(dataset_dir)]
    res = cli("tune", "--bundle", str(BUNDLE), "--space", "learning_rate=loguniform(1e-3,1e-2)", "--metric",
              "val_dice", "--sampler", "random", "--sampler-seed", "0", "--pruner", "none", "--trials", "2",
              "--parallel", "1", "--cluster", TEST_PROFILE, "--output_dir", str(out), *train)
    assert res.returncode == 0, res.stderr[-3000:]
    job = SweepRecord.load(out).submissions()[-1]["workers"]["0"]
    metrics = out / "points" / "0000" / "metrics.jsonl"
    deadline = time.monotonic() + 180
    while not (metrics.is_file() and '"kind": "epoch"' in metrics.read_text()):
        assert time.monotonic() < deadline, "trial 0 never finished its first epoch"
        time.sleep(0.1)
    slurm_cluster.run("scancel", job)
    wait_idle(slurm_cluster, out, 120)
    left = [p for p in SweepRecord.load(out).points if "trial" in p]  # the claimed ones
    assert [(p["trial"], p["state"]) for p in left] == [(0, "running")], left
    assert journal_states(out) == ["RUNNING"]  # never told: the trial is neither lost nor finished

    res = cli("resume", str(out))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "restart [0] (trial left running)" in res.stdout, res.stdout
    wait_idle(slurm_cluster, out, 300)
    points = SweepRecord.load(out).points
    assert [(p["trial"], p["state"]) for p in points] == [(0, "completed"), (1, "completed")], points
    assert journal_states(out) == ["COMPLETE", "COMPLETE"]
    summary = json.loads((out / "points" / "0000" / "summary.json").read_text())
    assert summary["resumed_from"] and summary["epochs"] == 4, summary  # continued, not started again
    steps = [json.loads(line)["step"] for line in metrics.read_text().splitlines() if '"iter"' in line]
    assert steps == list(range(1, 33))  # 4 epochs x 8 steps, each once


def yaml_load(path: Path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text())

"""Issue 22 on the real local SLURM: no sweep resubmits itself without bound, status sees a tune from the
start and waits for it, --watch tops up, and a top-up passes only what the user set."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

TINY = str(Path(__file__).parent / "data" / "tiny_point")  # its run prints one line
BUNDLE = str(Path(__file__).resolve().parents[2] / "bundles" / "synthetic_seg")
QOS = "hpcr-limited"


def _record(sweep: Path) -> dict:
    return json.loads((sweep / "sweep.yaml").read_text())


def _sbatch_calls(record: dict) -> int:
    return sum(s.get("sbatch_calls", len(s.get("arrays", []))) for s in record["submissions"])


def test_a_time_limit_that_leaves_no_room_before_the_stop_signal_is_refused_before_anything_is_queued(offline_cli):
    out = offline_cli("sweep", "--bundle", TINY, "--cluster", "slurm", "--slurm", "time=1", "--output_dir", "sw",
                      "--sweep", "seed=1,2,3")
    assert out.returncode == 2, out.stdout + out.stderr
    assert "time limit 1 min leaves no room before the stop signal" in out.stderr and "signal_delay_s=60" in out.stderr
    assert not (offline_cli.cwd / "sw").exists() and offline_cli.calls()["sbatch"] == 0


@pytest.mark.slow
@pytest.mark.slurm
def test_a_short_time_limit_runs_every_point_once_and_nothing_is_submitted_after_the_sweep_is_final(
    slurm_cluster, cli
):
    """time=2 with the stop signal due up to 120 s before the end: the clock says no point fits, which used to
    return every point unrun and top up a new job for it, forever (26 sbatch calls in 20 s). A task now always
    runs its first point."""
    out = cli("sweep", "--bundle", TINY, "--cluster", "testcluster", "--slurm", "time=2", "--slurm",
              "signal_delay_s=60", "--output_dir", "sw", "--sweep", "seed=1,2,3")
    assert out.returncode == 0, out.stdout + out.stderr
    status = cli("status", "sw", "--wait", "--interval", "2", "--timeout", "300")
    assert status.returncode == 0, status.stdout + status.stderr + slurm_cluster.explain(cli.cwd / "sw")
    record = _record(cli.cwd / "sw")
    assert [p.get("returns", 0) for p in record["points"]] == [0, 0, 0]
    calls = cli.calls()["sbatch"]
    assert calls == 2 and _sbatch_calls(record) == 1  # the pre-flight's --test-only, then one array
    time.sleep(5)
    cli("status", "sw")
    assert cli.calls()["sbatch"] == calls  # final: nothing submits anything any more


@pytest.mark.slow
@pytest.mark.slurm
def test_status_lists_a_tunes_trials_from_the_start_and_wait_waits_for_them(slurm_cluster, cli, tiny):
    pytest.importorskip("optuna")
    out = cli("tune", "--bundle", BUNDLE, "--cluster", "testcluster", "--space",
              "learning_rate=loguniform(1e-3,1e-2)", "--trials", "2", "--parallel", "1", "--metric", "val_dice",
              "--output_dir", "tn", "--hold", *tiny)
    assert out.returncode == 0, out.stdout + out.stderr
    job = next(iter(_record(cli.cwd / "tn")["submissions"][0]["workers"].values()))
    try:
        held = cli("status", "tn", "--json")  # the worker is held: queued, no trial claimed yet
        rows = [json.loads(line) for line in held.stdout.splitlines() if line.startswith('{"point"')]
        assert [r["state"] for r in rows] == ["PENDING", "PENDING"], held.stdout
        assert "sweep of 2 points" in cli("status", "tn").stdout
        slurm_cluster.run("scontrol", "release", job.split("_")[0])
        waited = cli("status", "tn", "--wait", "--interval", "2", "--timeout", "600")
    finally:  # never leave the worker queued for the next test
        slurm_cluster.run("scancel", job.split("_")[0])
    assert waited.returncode == 0, waited.stdout + waited.stderr + slurm_cluster.explain(cli.cwd / "tn", [job])
    assert waited.stdout.count("COMPLETED") >= 1 and "PENDING" not in waited.stdout.split("\n", 2)[1]
    states = {p.get("state") for p in _record(cli.cwd / "tn")["points"]}
    assert states <= {"completed", "pruned"}, states


@pytest.mark.slow
@pytest.mark.slurm
def test_watch_submits_the_points_that_wait_for_a_slot(slurm_cluster, qos_limit, cli):
    """The sweep's tasks are held, so none ends to top up: only --watch can send the waiting points."""
    qos_limit(2)
    out = cli("sweep", "--bundle", TINY, "--cluster", "testcluster", "--slurm", f"qos={QOS}", "--hold",
              "--output_dir", "sw", "--sweep", "seed=range(4)", "--no-preflight")
    assert out.returncode == 0 and "2 point(s) wait" in out.stdout, out.stdout + out.stderr
    first = [a["job_id"] for s in _record(cli.cwd / "sw")["submissions"] for a in s["arrays"]]
    slurm_cluster.run("scontrol", "release", first[0])
    try:
        watch = cli("status", "sw", "--watch", "--interval", "2", "--timeout", "300")
    finally:
        jobs = {p["job_id"].split("_")[0] for p in _record(cli.cwd / "sw")["points"] if p.get("job_id")}
        slurm_cluster.run("scancel", *jobs)
    assert watch.returncode == 0, watch.stdout + watch.stderr + slurm_cluster.explain(cli.cwd / "sw")
    record = _record(cli.cwd / "sw")
    assert all(p["submit"] == "submitted" for p in record["points"]), record["points"]
    assert [s["reason"] for s in record["submissions"]].count("top-up") >= 1
    # held by --hold like their sweep? the top-up submits with the sweep's own options (not held)
    assert "COMPLETED 4" in watch.stdout


def test_a_top_up_from_inside_a_job_passes_only_what_the_user_set(monkeypatch):
    from hpc_runner.jobs.governor import outside_the_job
    from hpc_runner.resources.cpus import CpuBudget
    from hpc_runner.resources.threads import set_thread_variables

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("MKL_NUM_THREADS", "3")  # the user's own
    set_thread_variables(CpuBudget(2, "SLURM_CPUS_PER_TASK", "SLURM_CPUS_PER_TASK=2"))  # what the ending job set
    assert os.environ["OMP_NUM_THREADS"] == "2"
    with outside_the_job():
        seen = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('OMP_NUM_THREADS'), "
                               "os.environ.get('MKL_NUM_THREADS'))"], capture_output=True, text=True).stdout.split()
    assert seen == ["None", "3"]  # the new job decides its own threads; the user's setting goes on
    assert os.environ["OMP_NUM_THREADS"] == "2"  # put back for the ending job

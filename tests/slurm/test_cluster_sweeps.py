"""Sweeps, status, resume, collect, cancel and submit on the real local SLURM (scripts/local-slurm.sh)."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

INIT_PROFILE = "initd"  # written by `hpc-runner cluster init` in the batch
ROOT = Path(__file__).resolve().parents[2]
BUNDLE = str(ROOT / "bundles" / "synthetic_seg")
WAIT = ["--wait", "--interval", "2", "--timeout", "400"]
PROFILE = "testcluster"


def _record(path: Path) -> dict:
    return json.loads((path / "sweep.yaml").read_text())


def _why(batch: dict, sweep: Path, proc) -> str:
    """The command's output, then the scheduler's view of the sweep's jobs and their logs."""
    jobs = [p.get("job_id") or "" for p in _record(sweep)["points"]] if (sweep / "sweep.yaml").is_file() else []
    return f"{proc.stdout}{proc.stderr}\n{batch['cluster'].explain(sweep, jobs)}"


@pytest.fixture(scope="module")
def batch(slurm_cluster, tmp_path_factory, cli_factory, tiny, dataset_dir):
    """Everything that trains, submitted at once so the 2 CPUs run it side by side: a 2x2 grid sweep,
    3 zipped points of which point 2 fails at run time (batch_size 0 is a valid int that the DataLoader
    refuses), one `submit --wait` (in the background) and one plain `sbatch jobs/jade/train.sbatch`."""
    import subprocess
    import sys

    cli = cli_factory(tmp_path_factory.mktemp("batch"))
    # the grid runs with a profile `cluster init` wrote from this cluster, unchanged (its GPU, memory, account, QOS)
    init = cli("cluster", "init", INIT_PROFILE)
    assert init.returncode == 0, init.stdout + init.stderr
    grid = cli("sweep", "training", "--bundle", BUNDLE, "--cluster", INIT_PROFILE, "--output_dir", "grid",
               "--sweep", "learning_rate=1e-3,2e-3", "--sweep", "network_def::num_res_units=1,2", *tiny)
    assert grid.returncode == 0, grid.stderr
    assert cli.calls()["sbatch"] == 2  # the pre-flight's sbatch --test-only, then the array
    fail = cli("sweep", "training", "--bundle", BUNDLE, "--cluster", PROFILE, "--output_dir", "fail", "--zip",
               "--sweep", "learning_rate=1e-3,2e-3,3e-3", "--sweep", "batch_size=1,1,0", *tiny)
    assert fail.returncode == 0, fail.stderr
    env = {**cli.env, "SLURM_CONF": slurm_cluster.env.get("SLURM_CONF", "")}
    log = (cli.cwd / "submit-wait.out").open("w")  # a file, not a pipe: nobody reads it until the test
    waiting = subprocess.Popen(
        [sys.executable, "-m", "hpc_runner", "submit", "training", "--bundle", BUNDLE, "--cluster", PROFILE,
         "--output_dir", "one", "--wait", *tiny],
        cwd=cli.cwd, env=env, stdout=log, stderr=subprocess.STDOUT, text=True,
    )
    args = f"--num_train 2 --num_val 1 --image_size 16 --val_interval 1 --batch_size 1 --dataset_dir {dataset_dir}"
    jade = slurm_cluster.run(
        "sbatch", "--parsable", f"--chdir={cli.cwd}", "--cpus-per-task=1", "--time=10",
        f"--export=ALL,EPOCHS=2,MODULES=,PYTHON={sys.executable},BUNDLE={BUNDLE},ARGS={args}",
        str(ROOT / "jobs" / "jade" / "train.sbatch"),
    )
    assert jade.returncode == 0, jade.stderr
    yield {"cli": cli, "cluster": slurm_cluster, "grid": cli.cwd / "grid", "fail": cli.cwd / "fail", "init": init,
           "grid_out": grid.stdout, "submit": waiting, "jade_job": jade.stdout.strip().split(";")[0]}
    if waiting.poll() is None:
        waiting.kill()
    log.close()


def test_cluster_init_writes_what_sinfo_and_sacctmgr_say_and_show_reads_it_back(batch):
    cli, cluster = batch["cli"], batch["cluster"]
    written = yaml.safe_load((cli.cwd / "clusters" / f"{INIT_PROFILE}.yaml").read_text())
    sinfo = cluster.run("sinfo", "-h", "-o", "%P|%c|%G").stdout.split()
    default = next(line for line in sinfo if line.split("|")[0].endswith("*")).split("|")
    assert written["partition"] == default[0].rstrip("*")
    assert written["partitions"] == [line.split("|")[0].rstrip("*") for line in sinfo]
    assert written["gpus_per_node"] == 1 and default[2].startswith("gpu:")
    assoc = cluster.run("sacctmgr", "-nP", "show", "assoc", f"user={os.environ.get('USER') or 'root'}",
                        "format=Account,DefaultQOS").stdout.split()
    assert f"{written['account']}|{written['qos']}" in assoc, assoc
    assert "# sinfo: the default partition (*)" in batch["init"].stdout  # each value says where it came from
    shown = cli("cluster", "show", INIT_PROFILE)
    assert shown.returncode == 0 and f'partition: "{written["partition"]}"' in shown.stdout, shown.stderr
    assert "# limits now:" in shown.stdout and "slurm.yaml" in shown.stdout  # resolved through extends


def test_grid_sweep_completes_and_collect_has_a_row_with_metrics_per_point(batch, tmp_path):
    cli, grid, submitted = batch["cli"], batch["grid"], batch["grid_out"]
    assert "4 points checked" in submitted and "1 array(s)" in submitted
    record = _record(grid)
    assert record["params"] == ["learning_rate", "network_def::num_res_units"] and len(record["points"]) == 4
    assert len({p["job_id"].split("_")[0] for p in record["points"]}) == 1  # one array
    assert (grid / "base" / "config.yaml").is_file()

    waited = cli("status", str(grid), *WAIT)
    assert waited.returncode == 0 and "COMPLETED 4" in waited.stdout, _why(batch, grid, waited)

    alone = cli.apart(tmp_path)  # the batch's other jobs and its `submit --wait` may still call squeue
    status = alone("status", str(grid))
    assert status.returncode == 0 and "COMPLETED 4" in status.stdout
    assert alone.calls()["sacct"] == 1 and alone.calls()["squeue"] == 0, status.stdout  # one call for all points

    collected = cli("collect", str(grid))
    assert collected.returncode == 0, collected.stderr
    rows = list(csv.DictReader((grid / "results.csv").open()))
    assert [r["point"] for r in rows] == ["0", "1", "2", "3"]
    assert [(r["learning_rate"], r["network_def::num_res_units"]) for r in rows] == [
        ("0.001", "1"), ("0.001", "2"), ("0.002", "1"), ("0.002", "2")]
    for r in rows:
        assert r["state"] == "COMPLETED" and r["epochs"] == "1"
        assert 0 <= float(r["val_dice"]) <= 1 and float(r["final_loss"]) > 0 and float(r["wall_s"]) > 0
        assert r["job_id"].startswith(record["points"][0]["job_id"].split("_")[0] + "_")
    md = (grid / "results.md").read_text().splitlines()
    assert md[0].startswith("| point | learning_rate | network_def::num_res_units | state |") and len(md) == 6
    # each point's run dir holds its resolved config and its overrides
    point = grid / "points" / "0003"
    assert yaml.safe_load((point / "config.yaml").read_text())["learning_rate"] == 0.002
    overrides = yaml.safe_load((point / "overrides.yaml").read_text())
    swept = {o["id"]: o["value"] for o in overrides if o["source"] == "sweep"}
    assert swept == {"learning_rate": 0.002, "network_def::num_res_units": 2}
    run = yaml.safe_load((point / "run.yaml").read_text())
    assert run["status"] == "completed" and run["job"]["id"] == record["points"][3]["job_id"]


def test_failed_point_is_shown_then_resumed_alone_with_a_fix(batch, tmp_path):
    cli, fail = batch["cli"], batch["fail"]
    alone = cli.apart(tmp_path)  # the batch's other jobs and its `submit --wait` may still call sbatch
    waited = cli("status", str(fail), *WAIT)
    assert waited.returncode == 1, _why(batch, fail, waited)  # not everything completed
    assert "COMPLETED 2" in waited.stdout and "FAILED 1" in waited.stdout, _why(batch, fail, waited)
    line = next(ln for ln in waited.stdout.splitlines() if ln.startswith("2 "))
    assert "FAILED" in line and "batch_size should be a positive integer" in line
    before = {p["index"]: p["job_id"] for p in _record(fail)["points"]}

    resumed = alone("resume", str(fail), "--batch_size", "1")
    assert resumed.returncode == 0, resumed.stderr
    assert "2 completed (kept)" in resumed.stdout and "1 to resubmit" in resumed.stdout
    assert alone.calls()["sbatch"] == 2  # sbatch --test-only, then the array
    after = _record(fail)
    jobs = {p["index"]: p["job_id"] for p in after["points"]}
    assert jobs[0] == before[0] and jobs[1] == before[1] and jobs[2] != before[2]
    assert after["points"][2]["extra"] == {"batch_size": 1}
    assert after["points"][2]["jobs"] == [before[2], jobs[2]]
    assert (fail / "attempts" / "0002-1" / "error.txt").is_file()  # the failed attempt is kept aside

    waited = cli("status", str(fail), *WAIT)
    assert waited.returncode == 0 and "COMPLETED 3" in waited.stdout, _why(batch, fail, waited)
    assert yaml.safe_load((fail / "points" / "0002" / "config.yaml").read_text())["batch_size"] == 1

    alone.reset()
    again = alone("resume", str(fail))
    assert again.returncode == 0 and "nothing to resubmit" in again.stdout
    assert alone.calls()["sbatch"] == 0

    cli("collect", str(fail))
    rows = list(csv.DictReader((fail / "results.csv").open()))
    assert [r["state"] for r in rows] == ["COMPLETED"] * 3
    assert [r["batch_size"] for r in rows] == ["1", "1", "1"] and rows[2]["resumed_with"] == "batch_size=1"


def test_sweep_larger_than_max_array_size_is_split_one_sbatch_per_array(slurm_cluster, cli):
    n = slurm_cluster.max_array_size + 3
    out = cli("sweep", "--bundle", BUNDLE, "--cluster", PROFILE, "--hold", "--output_dir", "big",
              "--sweep", f"seed=range({n})")
    assert out.returncode == 0, out.stderr
    record = _record(cli.cwd / "big")
    arrays = [a for s in record["submissions"] for a in s["arrays"]]
    try:
        assert [a["size"] for a in arrays] == [slurm_cluster.max_array_size, 3]
        assert len({a["job_id"] for a in arrays}) == 2
        assert cli.calls()["sbatch"] == 3 == record["submissions"][0]["sbatch_calls"] + 1  # + --test-only
        assert record["points"][-1]["job_id"] == f"{arrays[1]['job_id']}_2"
        assert record["state"] == "submitted" and len(record["points"]) == n
    finally:
        cli.reset()
        cancelled = cli("cancel", str(cli.cwd / "big"))
    assert cancelled.returncode == 0, cancelled.stderr
    assert cli.calls()["scancel"] == 1 and cli.calls()["sacct"] == 1
    slurm_cluster.wait_for_jobs([a["job_id"] for a in arrays], timeout=60)
    status = cli("status", str(cli.cwd / "big"), *WAIT)
    assert f"CANCELLED {n}" in status.stdout, status.stdout


@pytest.mark.parametrize("preflight", [True, False])
@pytest.mark.parametrize("command", ["sweep", "submit"])
def test_a_partition_that_does_not_exist_exits_2_with_sbatchs_message(cli, command, preflight):
    """The pre-flight's `sbatch --test-only` refuses it first; without the pre-flight, the real sbatch does."""
    args = ["--sweep", "seed=1,2"] if command == "sweep" else []
    args += [] if preflight else ["--no-preflight"]
    out = cli(command, "--bundle", BUNDLE, "--cluster", PROFILE, "--slurm", "partition=nosuchpart",
              "--output_dir", "out", *args)
    assert out.returncode == 2, out.stdout + out.stderr
    said = "sbatch --test-only says" if preflight else "sbatch refused the submission"
    assert said in out.stderr and "Invalid partition name specified" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    assert not (cli.cwd / "out").exists()  # nothing left that status could take for a submitted run


def test_submit_wait_runs_one_job_and_records_it(batch):
    cli = batch["cli"]
    with contextlib.suppress(subprocess.TimeoutExpired):  # the message below says where it got stuck
        batch["submit"].wait(timeout=400)
    stdout = (cli.cwd / "submit-wait.out").read_text()
    record = cli.cwd / "one" / "run.yaml"
    job = yaml.safe_load(record.read_text()).get("job", {}).get("id", "") if record.is_file() else ""
    assert batch["submit"].returncode == 0, f"{stdout}\n{batch['cluster'].explain(cli.cwd / 'one', [job])}"
    assert "submitted job" in stdout and "hpc-runner status" in stdout and "tail -f" in stdout
    assert "trained 1 epochs" in stdout  # --wait printed the job's log
    run = yaml.safe_load((cli.cwd / "one" / "run.yaml").read_text())
    assert run["status"] == "completed" and run["job"]["id"].isdigit()
    assert run["job"]["cluster"]["profile"] == PROFILE
    overrides = {o["id"] for o in yaml.safe_load((cli.cwd / "one" / "overrides.yaml").read_text())}
    assert {"num_train", "max_epochs", "dataset_dir"} <= overrides
    status = cli("status", str(cli.cwd / "one"))
    assert "COMPLETED 1" in status.stdout, status.stdout


def test_jade_script_takes_its_parameters_from_the_environment(slurm_cluster, batch):
    job = batch["jade_job"]
    slurm_cluster.wait_for_jobs([job], timeout=400)
    assert slurm_cluster.sacct_states([job], timeout=60) == {job: "COMPLETED"}
    run_dir = batch["cli"].cwd / "runs" / "synthetic_seg" / f"job-{job}"
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    record = yaml.safe_load((run_dir / "run.yaml").read_text())
    assert config["max_epochs"] == 2
    assert {"id": "max_epochs", "variable": "EPOCHS", "value": "2"} in record["env"]["refs"]
    assert record["scheduler"]["name"] == "slurm" and record["scheduler"]["job_id"] == job
    assert record["scheduler"]["variables"]["SLURM_JOB_ID"] == job and record["status"] == "completed"
    assert json.loads((run_dir / "summary.json").read_text())["epochs"] == 2

"""The CLI end to end on the real local Grid Engine (scripts/local-sge.sh), with the shipped profile `sge-local`:
the scenarios of tests/slurm (test_cluster_sweeps, test_right_size, test_preemption, test_limits,
tests/pipeline/test_pipeline_slurm) on Grid Engine.

Everything that runs is submitted at once by one module fixture (``batch``), so the queue's 2 slots run it side by
side: a 4-point sweep of the example bundle, a point over its ``h_rt``, a point over its ``h_vmem`` with
``--retry OUT_OF_MEMORY:mem*2``, a pipeline of three stages and a point that gets a stop signal. Each test then
waits for its part. The submit limit comes last: it restarts the local Grid Engine with ``max_u_jobs=1`` (and
back to none after).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.slurm.conftest import make_cli
from tests.slurm.test_preemption import iter_steps, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.gridengine, pytest.mark.usefixtures("grid_engine")]

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = str(ROOT / "bundles" / "synthetic_seg")
USAGE_POINT = str(ROOT / "tests" / "slurm" / "data" / "usage_point")
PROFILE = "sge-local"  # shipped: hpc_runner/scheduler/profiles/sge-local.yaml
COUNTED = ("qsub", "qstat", "qacct", "qdel")
WAIT = ["--wait", "--interval", "2", "--timeout", "400"]
TINY = ["--num_train", "2", "--num_val", "1", "--image_size", "16", "--max_epochs", "1", "--val_interval", "1",
        "--batch_size", "1"]


def _record(path: Path) -> dict:
    return json.loads((path / "sweep.yaml").read_text())


def explain(folder: Path) -> str:
    """What a failure message needs: qstat, qacct of the folder's jobs, and the last lines of their logs."""
    parts = [subprocess.run(["qstat", "-u", "*"], capture_output=True, text=True, timeout=30).stdout]
    for script in sorted(folder.rglob("*_submission.sh"))[:8]:
        job = script.name.split("_")[0]
        out = subprocess.run(["qacct", "-j", job], capture_output=True, text=True, timeout=30)
        parts.append("\n".join(ln for ln in out.stdout.splitlines()
                               if ln.split()[:1] and ln.split()[0] in ("jobnumber", "taskid", "failed", "exit_status")))
    for log in sorted(p for p in folder.rglob("*") if p.is_file() and (".e" in p.suffix or p.name == "error.txt"))[:8]:
        parts.append(f"== {log}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-12:]))
    return "\n".join(parts)[-8000:]


def local_sge(**limits: str) -> None:
    """(Re)apply the local Grid Engine's global configuration: ``LOCAL_SGE_MAX_U_JOBS=1`` etc. (none: defaults)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCAL_SGE_MAX")}
    res = subprocess.run([str(ROOT / "scripts" / "local-sge.sh"), "start"], env={**env, **limits},
                         capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr[-2000:]


STUDY = """\
bundle: {bundle}
overrides: {{num_train: 2, num_val: 1, image_size: 16, val_interval: 1, batch_size: 1, max_epochs: 1,
             dataset_dir: {data}}}
stages:
  - {{name: search, sweep: ["learning_rate=1e-3,4e-3"]}}
  - {{name: best, select: {{from: search, metric: val_dice, mode: max}}}}
  - {{name: test, entry: evaluate, from: best}}
"""


@pytest.fixture(scope="module")
def batch(grid_engine, tmp_path_factory):
    """Everything that runs, submitted at once (see the module's text)."""
    cli = make_cli(tmp_path_factory.mktemp("sge"), counted=COUNTED)
    data = cli.cwd / "data"  # the first job writes the synthetic dataset into it (the pipeline's pre-flight wants it)
    data.mkdir()
    tiny = [*TINY, "--dataset_dir", str(data)]
    started = time.monotonic()
    grid = cli("sweep", "training", "--bundle", BUNDLE, "--cluster", PROFILE, "--output_dir", "grid",
               "--sweep", "learning_rate=1e-3,2e-3", "--sweep", "network_def::num_res_units=1,2", *tiny)
    assert grid.returncode == 0, grid.stdout + grid.stderr
    submitted = {"grid": grid.stdout}
    for name, args in {
        # a point that sleeps past its h_rt: killed, TIMEOUT
        "timeout": ["--scheduler-option", "h_rt=20", "--sweep", "seconds=120"],
        # a point that holds more than its h_vmem: OUT_OF_MEMORY, then completes on its retry with twice the memory
        "oom": ["--scheduler-option", "h_vmem=1500M", "--sweep", "alloc_mb=1100", "--sweep", "hold_s=3",
                "--retry", "OUT_OF_MEMORY:mem*2"],
        # a point that trains long enough to get a stop signal mid-run
        "stop": ["--sweep", "mode=train", "--sweep", "max_epochs=2", "--sweep", "n_items=8", "--sweep", "item_s=1"],
    }.items():
        res = cli("sweep", "--bundle", USAGE_POINT, "--cluster", PROFILE, "--output_dir", name, *args)
        assert res.returncode == 0, res.stdout + res.stderr
        submitted[name] = res.stdout
    study = cli.cwd / "study.yaml"
    study.write_text(STUDY.format(bundle=BUNDLE, data=data))
    pipeline = cli("pipeline", str(study), "--cluster", PROFILE, "--output_dir", "study")
    assert pipeline.returncode == 0, pipeline.stdout + pipeline.stderr
    submitted["pipeline"] = pipeline.stdout
    yield {"cli": cli, "out": submitted, "started": started}


def test_a_stop_signal_checkpoints_exits_99_and_grid_engine_runs_the_job_again_from_the_checkpoint(batch):
    cli = batch["cli"]
    stop = cli.cwd / "stop"
    run_dir = stop / "points" / "0000"
    wait_until(lambda: len(iter_steps(run_dir)) >= 2, 300, "two training steps", run_dir / "log.txt")
    args_file = next(stop.rglob("job-*.json"))
    pids = subprocess.run(["pgrep", "-f", f"hpc_runner job {args_file}"], capture_output=True,
                          text=True).stdout.split()
    assert pids, "the job's process is not running"
    os.kill(int(pids[0]), 12)  # SIGUSR2: what -notify sends before a kill
    waited = cli("status", str(stop), *WAIT)
    assert waited.returncode == 0 and "COMPLETED 1" in waited.stdout, waited.stdout + explain(stop)
    assert "requeued: 1 point(s), 1 requeue(s)" in waited.stdout, waited.stdout
    job = _record(stop)["points"][0]["job_id"]
    qacct = subprocess.run(["qacct", "-j", job], capture_output=True, text=True, timeout=30).stdout
    assert "rescheduling" in qacct and "exit_status  99" in qacct, qacct  # the first run asked to run again
    log = (run_dir / "log.txt").read_text()
    assert "resuming from" in log and "checkpoint" in log, log[-2000:]
    run = yaml.safe_load((run_dir / "run.yaml").read_text())
    assert run["status"] == "completed" and run["scheduler"]["restarts"] == 1


def test_a_4_point_sweep_completes_and_status_resume_collect_and_report_work(batch, tmp_path):
    cli, grid = batch["cli"], batch["cli"].cwd / "grid"
    assert "4 points checked" in batch["out"]["grid"] and "1 array(s)" in batch["out"]["grid"]
    record = _record(grid)
    assert len({p["job_id"].split("_")[0] for p in record["points"]}) == 1  # one array: qsub -t 1-4
    assert "#$ -t 1-4" in next(grid.rglob("*_submission.sh")).read_text()

    waited = cli("status", str(grid), *WAIT)
    assert waited.returncode == 0 and "COMPLETED 4" in waited.stdout, waited.stdout + explain(grid)

    alone = cli.apart(tmp_path)  # the batch's jobs may still top up through the fixture's counter
    status = alone("status", str(grid))
    assert status.returncode == 0 and "COMPLETED 4" in status.stdout
    assert sum(alone.calls().values()) == 1 and alone.calls()["qacct"] == 1, (alone.calls(), status.stdout)

    resumed = cli("resume", str(grid))
    assert resumed.returncode == 0 and "nothing to resubmit" in resumed.stdout + resumed.stderr, resumed.stdout

    collected = cli("collect", str(grid))
    assert collected.returncode == 0, collected.stderr
    rows = list(csv.DictReader((grid / "results.csv").open()))
    assert [r["point"] for r in rows] == ["0", "1", "2", "3"]
    for r in rows:
        assert r["state"] == "COMPLETED" and r["epochs"] == "1" and 0 <= float(r["val_dice"]) <= 1
        assert r["job_id"].startswith(record["points"][0]["job_id"].split("_")[0] + "_")
    run = yaml.safe_load((grid / "points" / "0003" / "run.yaml").read_text())
    assert run["status"] == "completed" and run["job"]["id"] == record["points"][3]["job_id"]
    assert run["scheduler"]["name"] == "gridengine"

    report = cli("report", str(grid))
    assert report.returncode == 0 and (grid / "report.html").is_file(), report.stdout + report.stderr


def test_a_point_over_h_rt_is_timeout_and_one_over_h_vmem_is_out_of_memory_then_completes_on_its_retry(batch):
    cli = batch["cli"]
    timeout = cli.cwd / "timeout"
    waited = cli("status", str(timeout), *WAIT)
    assert "TIMEOUT 1" in waited.stdout, waited.stdout + explain(timeout)

    oom = cli.cwd / "oom"
    first = _record(oom)["points"][0]["job_id"]
    waited = cli("status", str(oom), *WAIT)  # each poll's top-up sends the killed point again
    point = _record(oom)["points"][0]
    assert waited.returncode == 0 and "COMPLETED 1" in waited.stdout, waited.stdout + explain(oom)
    assert point["retries"] == 1 and point["request"] == {"mem_gb": 3, "mem": None}, point  # 1500M*2, whole GB
    (attempt,) = point["history"]
    assert attempt["cause"] == "OUT_OF_MEMORY" and attempt["job_id"] == first
    assert attempt["rule"] == "OUT_OF_MEMORY:mem*2"
    retried = next(oom.rglob(f"{point['job_id']}_submission.sh")).read_text()
    assert "h_vmem=3072M" in retried, retried  # mem_gb 3 on one slot


def test_a_pipelines_stages_wait_on_their_dependencies_with_hold_jid(batch):
    cli = batch["cli"]
    study = cli.cwd / "study"
    jobs = {s["name"]: s["jobs"] for s in yaml.safe_load((study / "pipeline.yaml").read_text())["stages"]}
    scripts = {name: next((study / name).rglob(f"{jobs[name][0]}_submission.sh")).read_text() for name in jobs}
    assert "-hold_jid" not in scripts["search"]
    assert f"#$ -hold_jid {jobs['search'][0]}\n" in scripts["best"], scripts["best"]
    assert f"#$ -hold_jid {jobs['best'][0]}\n" in scripts["test"], scripts["test"]
    waited = cli("status", str(study), "--wait", "--interval", "3", "--timeout", "400")
    assert "3 COMPLETED" in waited.stdout, waited.stdout + explain(study)
    # each stage started after the one it waits on ended (qacct's start and end times)
    times = {}
    for name in ("search", "best", "test"):
        out = subprocess.run(["qacct", "-j", jobs[name][0].split("_")[0]], capture_output=True, text=True).stdout
        starts = [ln.split(None, 1)[1] for ln in out.splitlines() if ln.startswith("start_time")]
        ends = [ln.split(None, 1)[1] for ln in out.splitlines() if ln.startswith("end_time")]
        parse = lambda t: time.mktime(time.strptime(t.strip(), "%a %b %d %H:%M:%S %Y"))  # noqa: E731
        times[name] = (min(map(parse, starts)), max(map(parse, ends)))
    assert times["search"][1] <= times["best"][0] and times["best"][1] <= times["test"][0], times


def test_a_submit_limit_of_one_job_is_respected_and_an_array_counts_as_one_job(batch, tmp_path):
    cli = make_cli(tmp_path, counted=COUNTED)
    local_sge(LOCAL_SGE_MAX_U_JOBS="1")
    try:
        held = subprocess.run(["qsub", "-h", "-terse", "-o", "/dev/null", "-e", "/dev/null", "-b", "y", "true"],
                              capture_output=True, text=True, timeout=30)
        assert held.returncode == 0, held.stderr
        res = cli("sweep", "--bundle", USAGE_POINT, "--cluster", PROFILE, "--output_dir", "lim",
                  "--sweep", "seconds=1,2")
        assert res.returncode == 0, res.stdout + res.stderr
        assert "2 point(s) wait" in res.stdout and "max_u_jobs=1" in res.stdout, res.stdout
        assert "refused" not in res.stdout + res.stderr
        subprocess.run(["qdel", held.stdout.strip()], capture_output=True, timeout=30)
        waited = cli("status", str(cli.cwd / "lim"), *WAIT)  # the top-up sends both, as ONE array (one job)
        assert "COMPLETED 2" in waited.stdout, waited.stdout + explain(cli.cwd / "lim")
        assert len({p["job_id"].split("_")[0] for p in _record(cli.cwd / "lim")["points"]}) == 1
    finally:
        local_sge()

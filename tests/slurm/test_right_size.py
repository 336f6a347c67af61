"""Right-sizing on the real local SLURM: what each point used, retries that change the request, and a
TIMEOUT retry that continues from the checkpoint its trainer timed to the limit.

The bundle is tests/slurm/data/usage_point: a point burns one CPU, sleeps, holds memory or trains slowly.
The memory kill needs a cluster that enforces --mem (the 2-node cluster of scripts/local-slurm.sh, with
task/cgroup or JobAcctGatherParams=OverMemoryKill): it is skipped, saying so, on one that does not.
"""

from __future__ import annotations

import csv
import json
import os
import re
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "report"))  # the report tests' headless Chromium
from report_helpers import Chromium, find_chromium  # noqa: E402

BUNDLE = ROOT / "tests" / "slurm" / "data" / "usage_point"
WAIT = ["--wait", "--interval", "2", "--timeout", "420"]


@pytest.fixture(scope="module")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> Chromium:
    """Headless Chromium (tests/report's); skipped without one, a failure when CI=true."""
    binary = find_chromium()
    if binary is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI=true but no Chromium found", pytrace=False)
        pytest.skip("no Chromium found (apt-get install chromium)")
    return Chromium(binary, tmp_path_factory.mktemp("chromium-profile"))


def status_json(cli, path: Path) -> tuple[list[dict], dict | None]:
    out = cli("status", str(path), "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    return [x for x in lines if "point" in x], next((x["right_size"] for x in lines if "right_size" in x), None)


def sweep(cli, out: str, *args: str) -> Path:
    res = cli("sweep", "--bundle", str(BUNDLE), "--cluster", "testcluster", "--output_dir", out, *args)
    assert res.returncode == 0, res.stdout + res.stderr
    return cli.cwd / out


def test_a_busy_and_a_sleeping_point_show_cpu_efficiency_near_1_and_near_0_and_a_suggestion(
        cli, slurm_cluster, chromium, tmp_path: Path) -> None:
    sw = sweep(cli, "cpu", "--zip", "--sweep", "mode=burn,sleep", "--sweep", "seconds=45,45")
    waited = cli("status", str(sw), *WAIT)
    assert waited.returncode == 0, waited.stdout + slurm_cluster.explain(sw)
    cli.reset()
    rows, right = status_json(cli, sw)
    assert cli.calls()["sacct"] == 1  # states and usage: one call
    busy, sleeping = rows
    assert busy["cpu_efficiency"] > 0.75, busy  # the imports take ~10 s of CPU in both
    assert sleeping["cpu_efficiency"] < 0.3, sleeping
    for r in rows:
        assert r["cpus"] == 1 and r["time_limit_s"] == 600 and 45 <= r["elapsed_s"] < 300
        assert r["mem_request_mb"] > 0 and r["max_rss_mb"] > 100  # the job's python with torch loaded
    assert right["settings"]["time"] == "00:05:00" and "longest point" in right["line"]
    assert "mem_gb" in right["settings"] and "asked 1 CPU" in right["line"]

    text = cli("status", str(sw)).stdout
    assert "right-size: asked 1 CPU, used at most" in text and f"--right-size {sw}" in text
    collected = cli("collect", str(sw), "--quiet")
    assert "right-size: " in collected.stdout
    table = list(csv.DictReader((sw / "results.csv").open()))
    assert float(table[0]["cpu_efficiency"]) > 0.75 and float(table[1]["cpu_efficiency"]) < 0.3
    assert {"elapsed_s", "time_limit_s", "max_rss_mb", "mem_request_mb", "gpu_util"} <= set(table[0])

    report = cli("report", str(sw))
    assert report.returncode == 0, report.stderr
    dom = chromium.dom(sw / "report.html")
    assert "<h2>Right-size</h2>" in dom and "longest point" in dom and "time 00:05:00" in dom
    assert "states from sacct" in dom and "usage" in dom
    chromium.screenshot(sw / "report.html", tmp_path / "report.png")

    # the next sweep asks for it: --right-size DIR (dry run: the job script it would submit)
    dry = cli("sweep", "--bundle", str(BUNDLE), "--cluster", "testcluster", "--sweep", "seconds=1,2",
              "--right-size", str(sw), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "#SBATCH --time=5" in dry.stdout and re.search(r"#SBATCH --mem=\d+GB", dry.stdout), dry.stdout
    assert f"--right-size {sw}: " in dry.stdout


def _enforces_memory(cluster) -> bool:
    config = cluster.run("scontrol", "show", "config").stdout
    return "task/cgroup" in config or "OverMemoryKill" in config


def test_a_point_over_its_memory_is_killed_and_completes_on_its_retry_with_twice_the_memory(cli, slurm_cluster) -> None:
    if not _enforces_memory(slurm_cluster):
        pytest.skip("this local cluster does not enforce --mem (no task/cgroup, no OverMemoryKill): "
                    "start it with the current scripts/local-slurm.sh")
    # ~0.6 GB of python and torch plus 0.7 GB held: over 1 GB, under 2 GB
    sw = sweep(cli, "oom", "--slurm", "mem_gb=1", "--sweep", "alloc_mb=700", "--hold_s", "15",
               "--retry", "OUT_OF_MEMORY:mem*2")
    first = json.loads((sw / "sweep.yaml").read_text())["points"][0]["job_id"]
    waited = cli("status", str(sw), *WAIT)  # each poll's top-up sends the killed point again
    point = json.loads((sw / "sweep.yaml").read_text())["points"][0]
    why = waited.stdout + slurm_cluster.explain(sw, point.get("jobs", []))
    assert waited.returncode == 0, why
    assert point["retries"] == 1 and point["request"] == {"mem_gb": 2, "mem": None}, point
    (attempt,) = point["history"]
    assert attempt["cause"] == "OUT_OF_MEMORY" and attempt["job_id"] == first
    assert attempt["rule"] == "OUT_OF_MEMORY:mem*2"
    states = slurm_cluster.run("sacct", "-n", "-P", "-j", ",".join(point["jobs"]), "-o", "JobID,State,ReqMem")
    by_job = {line.split("|")[0]: line.split("|")[1:] for line in states.stdout.split()}
    assert by_job[f"{first}.0"][0] == "OUT_OF_MEMORY", states.stdout  # SLURM 22.05: the step (the job: FAILED)
    assert by_job[point["job_id"]] == ["COMPLETED", "2G"], states.stdout


def test_a_timeout_retry_continues_from_its_checkpoint_with_twice_the_time(cli, slurm_cluster) -> None:
    # the shortest limit SLURM keeps is one minute, and it checks limits every ~30 s: the point trains
    # (5 s epochs, a checkpoint each) until it has run a minute, then its limit is cut to one minute
    cli.write_profile("norequeue", "extends: testcluster\nsbatch: {no-requeue: true}\n")
    res = cli("sweep", "--bundle", str(BUNDLE), "--cluster", "norequeue", "--output_dir", "late",
              "--sweep", "mode=train", "--max_epochs", "30", "--n_items", "10", "--item_s", "0.5",
              "--retry", "TIMEOUT:time*2")
    assert res.returncode == 0, res.stdout + res.stderr
    sw = cli.cwd / "late"
    first = json.loads((sw / "sweep.yaml").read_text())["points"][0]["job_id"]
    checkpoints = sw / "points" / "0000" / "checkpoints"
    deadline = time.monotonic() + 240
    while not (list(checkpoints.glob("ckpt_*.pt")) and _elapsed_s(slurm_cluster, first) >= 65):
        assert time.monotonic() < deadline, slurm_cluster.explain(sw, [first])
        time.sleep(1)
    cut = slurm_cluster.run("scontrol", "update", f"JobId={first}", "TimeLimit=1")
    assert cut.returncode == 0, cut.stderr
    waited = cli("status", str(sw), *WAIT)  # a poll's top-up sends it again, with 2 x 10 min
    point = json.loads((sw / "sweep.yaml").read_text())["points"][0]
    assert waited.returncode == 0, waited.stdout + slurm_cluster.explain(sw, point.get("jobs", []))
    (attempt,) = point["history"]
    assert attempt["cause"] == "TIMEOUT" and attempt["job_id"] == first and point["request"] == {"time": 20}, point
    run = sw / "points" / "0000"
    log = (run / "log.txt").read_text()
    resumed = re.search(r"resuming from (\S+ckpt_(\d+)\.pt)", log)
    assert resumed and int(resumed.group(2)) >= 10, log[-3000:]  # at least the first epoch was not redone
    summary = json.loads((run / "summary.json").read_text())
    assert summary["epochs"] == 30 and summary["resumed_from"] == resumed.group(1), summary
    limits = slurm_cluster.run("sacct", "-X", "-n", "-P", "-j", ",".join(point["jobs"]), "-o", "State,Timelimit")
    assert limits.stdout.split() == ["TIMEOUT|00:01:00", "COMPLETED|00:20:00"], limits.stdout


def _elapsed_s(cluster, job: str) -> float:
    """How long the job has run (squeue's %M), 0 before it starts."""
    text = cluster.run("squeue", "-h", "-j", job, "-o", "%M").stdout.strip()
    parts = [int(x) for x in re.split(r"[:-]", text) if x.isdigit()] if text else []
    seconds = 0
    for p in parts:
        seconds = seconds * 60 + p
    return float(seconds)

"""Right-sizing on the real local SLURM: what each point used, and a retry that changes the request.

(The TIMEOUT retry with time*2 is driven in-process against the in-memory cluster, tests/sweep/
test_logic_in_memory.py; a real TIMEOUT is in tests/slurm/test_causes.py and a resume from a checkpoint after
a requeue in test_preemption.py and test_node_failure.py: docs/testing.md lists what moved.)

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
    # the imports take ~10 s of CPU in both; the busy point shares 2 cores with the other test worker's jobs
    # (0.62 measured with six busy processes on the VM), so "near 1" is read as well above the sleeping one
    assert busy["cpu_efficiency"] > 0.5 and busy["cpu_efficiency"] > sleeping["cpu_efficiency"] + 0.3, busy
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
    # the table holds the figures status printed (the same bounds: the busy point shares 2 cores under -n 2)
    eff = [float(r["cpu_efficiency"]) for r in table]
    assert eff[0] > 0.5 and eff[0] > eff[1] + 0.3 and eff[1] < 0.3, eff
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
    assert "#SBATCH --time=00:05:00" in dry.stdout and re.search(r"#SBATCH --mem=\d+GB", dry.stdout), dry.stdout
    assert f"--right-size {sw}: " in dry.stdout


def _enforces_memory(cluster) -> bool:
    config = cluster.run("scontrol", "show", "config").stdout
    return "task/cgroup" in config or "OverMemoryKill" in config


def test_a_point_over_its_memory_is_killed_and_completes_on_its_retry_with_twice_the_memory(cli, slurm_cluster) -> None:
    if not _enforces_memory(slurm_cluster):
        pytest.skip("this local cluster does not enforce --mem (no task/cgroup, no OverMemoryKill): "
                    "start it with the current scripts/local-slurm.sh")
    # ~0.4 GB of python and torch (0.47 before MLflow, pyplot and Optuna were deferred: 700 MB held then sufficed)
    # plus 1.0 GB held: over 1 GB, under 2 GB
    sw = sweep(cli, "oom", "--slurm", "mem_gb=1", "--sweep", "alloc_mb=1000", "--hold_s", "15",
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

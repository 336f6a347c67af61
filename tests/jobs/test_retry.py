"""Retries that change the request: the rules, the next request, which failed points go again, and a real
sweep here (profile local) whose point runs out of memory once and completes on its retry."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpc_runner.errors import UserError
from hpc_runner.jobs.causes import Cause
from hpc_runner.jobs.retry import changed_request, decide, merge_exclude, parse_rule, parse_rules, rules_of
from hpc_runner.jobs.states import PointState
from hpc_runner.jobs.usage import PointUsage

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "tests" / "slurm" / "data" / "usage_point"


def test_rules_are_cause_colon_change_and_bad_ones_are_refused_with_what_is_accepted() -> None:
    assert parse_rules(["OUT_OF_MEMORY:mem*2", "timeout:time*1.5", "NODE_FAIL:exclude"]) == {
        "OUT_OF_MEMORY": "mem*2", "TIMEOUT": "time*1.5", "NODE_FAIL": "exclude"}
    assert parse_rule("ERROR:same").change == "same" and parse_rule("TIMEOUT:cpus*2").factor == 2
    for bad in ("OOM:mem*2", "OUT_OF_MEMORY", "OUT_OF_MEMORY:mem+2", "TIMEOUT:time*0.5", "TIMEOUT:time*100"):
        with pytest.raises(UserError) as err:
            parse_rule(bad)
        assert "OUT_OF_MEMORY" in err.value.paragraph() and "mem*F" in err.value.paragraph()
    with pytest.raises(UserError, match="two changes"):
        parse_rules(["TIMEOUT:time*2", "TIMEOUT:time*3"])
    assert set(rules_of({"TIMEOUT": "time*2", "BOGUS": "x"})) == {"TIMEOUT"}  # a hand-broken rule is left out


def test_memory_doubles_from_the_profile_else_from_what_sacct_says_was_asked() -> None:
    rule = parse_rule("OUT_OF_MEMORY:mem*2")
    assert changed_request(rule, {"mem_gb": 1}, {}).request == {"mem_gb": 2, "mem": None}
    assert changed_request(rule, {"mem": "16G"}, {}).request == {"mem_gb": 32, "mem": None}
    assert changed_request(rule, {"mem_gb": 1}, {"mem_gb": 2, "mem": None}).request["mem_gb"] == 4  # 2nd retry
    assert changed_request(rule, {}, {}, PointUsage(mem_request_mb=3000)).request["mem_gb"] == 6
    assert changed_request(rule, {"mem_gb": 0.25}, {}).request["mem_gb"] == 0.5
    same = changed_request(rule, {}, {})
    assert not same.changed and "no memory request known" in same.note


def test_time_grows_from_the_longer_of_the_profile_and_the_limit_the_job_had() -> None:
    rule = parse_rule("TIMEOUT:time*2")
    assert changed_request(rule, {"time": "01:00:00"}, {}).request == {"time": 120}
    assert changed_request(rule, {"time": 10}, {}, PointUsage(time_limit_s=60 * 30)).request == {"time": 60}
    assert changed_request(parse_rule("TIMEOUT:cpus*2"), {"cpus_per_task": 3}, {}).request == {"cpus_per_task": 6}


def test_a_failed_node_is_added_to_the_exclude_list_once() -> None:
    rule = parse_rule("NODE_FAIL:exclude")
    assert changed_request(rule, {}, {}, node="n1").request == {"exclude": "n1"}
    assert changed_request(rule, {"exclude": "n9"}, {"exclude": "n9,n1"}, node="n1").request == {"exclude": "n9,n1"}
    assert merge_exclude("n1,n2", "n3") == "n1,n2,n3"
    unknown = changed_request(rule, {}, {}, node=None)
    assert not unknown.changed and "not known" in unknown.note


def failed(index: int, job: str, kind: str, tmp_path: Path) -> PointState:
    st = PointState(index, tmp_path / f"{index}", {}, job, "FAILED" if kind == "ERROR" else kind, "sacct")
    st.cause = Cause(kind)
    return st


def test_only_failed_points_with_a_rule_and_still_their_failed_job_go_again_within_the_bound(tmp_path: Path) -> None:
    points = [{"index": i, "submit": "submitted", "job_id": f"9_{i}"} for i in range(5)]
    points[3]["retries"] = 3  # at the bound
    points[4]["job_id"] = "10_0"  # another top-up sent it again since
    states = [failed(0, "9_0", "NODE_FAIL", tmp_path), failed(1, "9_1", "ERROR", tmp_path),
              PointState(2, tmp_path, {}, "9_2", "COMPLETED", "sacct"), failed(3, "9_3", "NODE_FAIL", tmp_path),
              failed(4, "9_4", "NODE_FAIL", tmp_path)]
    rules = rules_of({"NODE_FAIL": "exclude", "OUT_OF_MEMORY": "mem*2"})
    plan = decide(points, states, rules, {"exclude": None}, bound=3,
                  usage_of=lambda st: PointUsage(node=f"node{st.index}"))
    assert [(d.index, d.request, d.node) for d in plan.retry] == [(0, {"exclude": "node0"}, "node0")]
    assert plan.exhausted == [(3, "NODE_FAIL")]
    entry = plan.retry[0].history("2026-01-01T00:00:00")
    assert entry["cause"] == "NODE_FAIL" and entry["node"] == "node0" and entry["next_request"] == {"exclude": "node0"}
    assert entry["rule"] == "NODE_FAIL:exclude" and entry["job_id"] == "9_0"


@pytest.mark.slow  # whole CLI runs or several processes: the full suite runs it
def test_a_point_that_runs_out_of_memory_is_retried_by_the_top_up_with_twice_the_memory(tmp_path: Path) -> None:
    """A real sweep on this machine (profile local): point 1 raises MemoryError on its first attempt, the
    task's top-up retries it by the rule, with mem_gb doubled in its request, and it completes."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HPCR_", "SLURM_"))}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    res = subprocess.run(
        [sys.executable, "-m", "hpc_runner", "sweep", "--bundle", str(BUNDLE), "--cluster", "local",
         "--slurm", "mem_gb=1", "--output_dir", "sw", "--zip", "--sweep", "fail_once=none,MemoryError",
         "--sweep", "seed=0,1", "--retry", "OUT_OF_MEMORY:mem*2", "--retry", "TIMEOUT:time*2"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    out = res.stdout + res.stderr
    assert "point 1 ended OUT_OF_MEMORY (job local): retry OUT_OF_MEMORY:mem*2: mem_gb 1 -> 2" in out, out
    record = json.loads((tmp_path / "sw" / "sweep.yaml").read_text())
    assert record["retry"] == {"OUT_OF_MEMORY": "mem*2", "TIMEOUT": "time*2"}
    p0, p1 = record["points"]
    assert "request" not in p0 and p1["retries"] == 1 and p1["request"] == {"mem_gb": 2, "mem": None}
    assert [(h["cause"], h["next_request"]) for h in p1["history"]] == [("OUT_OF_MEMORY", {"mem_gb": 2})]
    status = subprocess.run([sys.executable, "-m", "hpc_runner", "status", "sw", "--json"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    rows = [json.loads(line) for line in status.stdout.splitlines()]
    assert [r["state"] for r in rows if "point" in r] == ["COMPLETED", "COMPLETED"], status.stdout + status.stderr
    arrays = [a for s in record["submissions"] for a in s["arrays"]]
    assert arrays[-1]["request"] == {"mem": None, "mem_gb": 2}  # its own array, with its own request

"""The governor's node exclusions: a point that failed twice on a node avoids it, through the ledger, and the
points that avoid the same nodes are submitted together with sbatch --exclude."""

from __future__ import annotations

import json
from pathlib import Path

from hpc_runner.jobs import ledger as sr
from hpc_runner.jobs.governor import exclude_failing_nodes, failed_nodes, group_tasks_by_exclusion
from hpc_runner.jobs.states import PointState
from hpc_runner.scheduler.executor import Attempt
from hpc_runner.scheduler.profiles import ClusterProfile
from hpc_runner.scheduler.slurm.accounting import parse_attempts
from hpc_runner.scheduler.slurm.executor import slurm_parameters

# sacct -X -D --parsable2 of a job whose node was set DOWN under it, then requeued (SLURM 22.05, local cluster)
SACCT_REQUEUED = """JobID|State|Elapsed|ExitCode|NodeList
297|NODE_FAIL|00:00:03|0:0|vm1
297|PENDING|00:00:00|0:0|None assigned
298_0|COMPLETED|00:00:05|0:0|vm2
298_[1-3%2]|PENDING|00:00:00|0:0|None assigned
299|COMPLETED|00:00:14|0:0|vm[1-2]
299.batch|COMPLETED|00:00:14|0:0|vm1
"""


def _sweep(folder: Path, n: int = 3) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    data = {"kind": sr.KIND, "version": 1, "submissions": []}
    sr.write_new(sr.SweepRecord(folder, data, sr.new_points([{"a": i} for i in range(n)], n)))
    return folder


def _failed(index: int, job: str, state: str, node: str | None, history: list[dict]) -> PointState:
    return PointState(index, Path("."), {}, job, state, "sacct", node=node, history=history)


def test_sacct_attempts_are_read_per_job_oldest_first_without_steps_or_pending_ranges():
    attempts = parse_attempts(SACCT_REQUEUED)
    assert attempts == {"297": [Attempt("NODE_FAIL", "vm1"), Attempt("PENDING", None)],
                        "298_0": [Attempt("COMPLETED", "vm2")], "299": [Attempt("COMPLETED", "vm[1-2]")]}
    assert parse_attempts("JobID|State\n1|COMPLETED\n") == {}  # an answer without NodeList says nothing


def test_only_node_failures_on_one_node_count():
    attempts = [{"state": "NODE_FAIL", "node": "vm1"}, {"state": "FAILED", "node": "vm1"},
                {"state": "BOOT_FAIL", "node": "vm2"}, {"state": "NODE_FAIL", "node": "vm[1-2]"},
                {"state": "NODE_FAIL", "node": None}]
    assert failed_nodes(attempts) == ["vm1", "vm2"]  # a multi-node job cannot say which node failed


def test_a_point_excludes_a_node_once_it_failed_there_twice_across_its_jobs(tmp_path: Path):
    sweep = _sweep(tmp_path / "s")
    with sr.locked(sweep) as led:
        for i, job in enumerate(("10_0", "10_1", "10_2")):
            led.submit(i, job)
    lines: list[str] = []
    states = [
        _failed(0, "10_0", "NODE_FAIL", "vm1", [{"state": "NODE_FAIL", "node": "vm1"}]),  # requeued, failed again
        _failed(1, "10_1", "NODE_FAIL", "vm1", []),  # once: not yet
        _failed(2, "10_2", "FAILED", "vm1", [{"state": "NODE_FAIL", "node": "vm2"}]),  # its own error: not the node
    ]
    with sr.locked(sweep) as led:
        assert exclude_failing_nodes(led, states, lines.append) == {0: ["vm1"]}
        assert exclude_failing_nodes(led, states, lines.append) == {}  # asked again: nothing new, nothing counted twice
    points = json.loads((sweep / sr.SWEEP_FILE).read_text())["points"]
    assert points[0]["exclude"] == ["vm1"] and points[0]["node_failures"] == {"10_0": ["vm1", "vm1"]}
    assert "exclude" not in points[1] and points[1]["node_failures"] == {"10_1": ["vm1"]}
    assert "exclude" not in points[2] and points[2]["node_failures"] == {"10_2": ["vm2"]}
    assert lines == ["hpc-runner: point 0 failed 2 times on node vm1; its next jobs exclude it"]

    with sr.locked(sweep) as led:  # point 1's next job fails on vm1 too: two failures over two jobs
        led.retry(1)
        led.submit(1, "11_0")
        assert exclude_failing_nodes(led, [_failed(1, "11_0", "NODE_FAIL", "vm1", [])], lines.append) == {1: ["vm1"]}
    assert json.loads((sweep / sr.SWEEP_FILE).read_text())["points"][1]["exclude"] == ["vm1"]


def test_points_avoiding_the_same_nodes_share_tasks_and_the_others_come_first(tmp_path: Path):
    sweep = _sweep(tmp_path / "s", n=6)
    with sr.locked(sweep) as led:
        led.exclude_node(1, "vm1")
        led.exclude_node(4, "vm1")
        led.exclude_node(5, "vm2")
        record = led.record
    assert group_tasks_by_exclusion(record, range(6), 2) == [[0, 2], [3], [1, 4], [5]]


def test_a_requests_exclusion_is_added_to_the_profiles_own():
    profile = ClusterProfile("p", [], {"executor": "slurm", "time": 10, "exclude": "vm9"})
    params = slurm_parameters(profile, job_name="j", exclude="vm1,vm2")
    assert params["exclude"] == "vm9,vm1,vm2"
    assert "exclude" not in slurm_parameters(ClusterProfile("p", [], {"time": 10}), job_name="j")

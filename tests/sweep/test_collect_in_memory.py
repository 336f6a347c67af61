"""`collect` of a sweep: the table is the same whether the summaries are read while the scheduler answers
(SLURM: sacct waits on slurmdbd) or after it (the in-memory cluster, local runs)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hpc_runner.cli.targets import open_target
from hpc_runner.cli.targets.points_collect import collect_points
from hpc_runner.jobs import ledger as sr
from hpc_runner.scheduler.memory.executor import MemoryExecutor
from tests.sweep.test_logic_in_memory import new_sweep


def _collect(path: Path, out: Path) -> str:
    out.mkdir()
    collect_points(argparse.Namespace(out=str(out), quiet=True), open_target(path))
    return (out / sr.RESULTS_CSV).read_text() + (out / sr.RESULTS_MD).read_text()


def test_summaries_read_while_the_scheduler_answers_give_the_same_table(make_cluster, tmp_path, monkeypatch,
                                                                         capsys) -> None:
    cluster = make_cluster()
    path = new_sweep(tmp_path, 4)
    record = sr.SweepRecord.load(path)
    for p in record.points:
        run_dir = record.point_dir(p)
        run_dir.mkdir(parents=True, exist_ok=True)
        if p["index"] != 2:  # one point has no summary yet
            summary = {"metric_name": "dice", "final_metric": 0.5 + p["index"] / 10, "epochs": 2, "steps": 8,
                       "final_loss": 0.25, "wall_s": 3.5, "per_epoch": [{"loss": 1.0}] * 2}
            (run_dir / "summary.json").write_text(json.dumps(summary))
        cluster.finish(p["job_id"])
    after = _collect(path, tmp_path / "after")
    monkeypatch.setattr(MemoryExecutor, "answers_wait", True)  # as SLURM's: summaries read in the meantime
    meanwhile = _collect(path, tmp_path / "meanwhile")
    assert meanwhile == after
    assert "dice" in after.splitlines()[0] and ",0.6," in after and after.count("COMPLETED") == 8
    (record.point_dir(record.points[1]) / "summary.json").write_text(json.dumps({"final_metric": 0.9}))
    assert _collect(path, tmp_path / "changed") != after  # the comparison sees a summary that changed

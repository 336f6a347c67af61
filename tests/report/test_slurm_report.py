"""The example sweep on the real local SLURM: watched live to the end, reported, and one point re-run exactly here."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from report_helpers import BUNDLE, assert_png, hpc_runner, tiny_overrides

from hpc_runner.report.build import build_report
from hpc_runner.report.watch import watch_status
from hpc_runner.scheduler.job_state import FROM_ACCOUNTING, FROM_QUEUE

pytestmark = [pytest.mark.slow, pytest.mark.slurm]


def test_slurm_sweep_watch_report_and_exact_rerun(tmp_path: Path, dataset_dir: Path, slurm_cluster) -> None:
    import torch

    out = hpc_runner("sweep", "--bundle", str(BUNDLE), "--cluster", "slurm", "--output_dir", "sw",
                     "--sweep", "learning_rate=0.001,0.01", "--sweep", "network_def::channels=[4,8,16,32],[8,16,32,64]",
                     *tiny_overrides(dataset_dir), cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    sweep = tmp_path / "sw"
    stream = io.StringIO()
    watched = watch_status(sweep, 1.0, stream=stream, max_polls=400)
    why = f"{stream.getvalue()[-3000:]}\n{slurm_cluster.explain(sweep, [s.job_id or '' for s in watched.states])}"
    assert watched.finished, why
    assert [s.state for s in watched.states] == ["COMPLETED"] * 4, why
    # where each state was read, in neutral words (scheduler/job_state.py): sacct is the accounting, squeue the queue
    assert {s.source for s in watched.states} <= {FROM_ACCOUNTING, FROM_QUEUE, "run.yaml"}
    assert "4/4" in stream.getvalue()

    report = build_report(sweep)
    for png in report.pngs:
        assert_png(png)
    assert "heatmap.png" in [p.name for p in report.pngs]
    text = report.html.read_text(encoding="utf-8")
    assert text.count('<td class="state-COMPLETED">COMPLETED</td>') == 4

    # months later: point 2, run by SLURM, re-run here from its run dir gives the same weights
    point = sweep / "points" / "0002"
    again = hpc_runner("rerun", str(point), "--output_dir", str(tmp_path / "p2-again"), cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    a = torch.load(point / "model.pt", map_location="cpu")
    b = torch.load(tmp_path / "p2-again" / "model.pt", map_location="cpu")
    assert all(torch.equal(a[k], b[k]) for k in a)

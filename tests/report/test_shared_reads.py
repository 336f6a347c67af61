"""Bytes read from shared storage per point (issue 46): `status` (text and --json) and `collect` show each point's,
from its run dir's data_io.json, and the sweep's report the sum; on a real 4-point local sweep."""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import pytest
from report_helpers import hpc_runner

from hpc_runner.data.staging import shared_bytes_of
from hpc_runner.report.build import build_report

pytestmark = pytest.mark.slow


def _points(sweep: Path) -> list[Path]:
    return sorted(p for p in (sweep / "points").iterdir() if p.is_dir())


def test_each_point_records_its_measured_shared_reads(local_sweep: Path) -> None:
    for point in _points(local_sweep):
        io = json.loads((point / "data_io.json").read_text())
        assert io["measured"] and io["shared_bytes"] > 0 and io["tasks"][-1]["loads"] > 0


def test_status_shows_each_points_shared_reads_in_text_and_json(local_sweep: Path) -> None:
    expected = {i: shared_bytes_of(p) for i, p in enumerate(_points(local_sweep))}
    out = hpc_runner("status", str(local_sweep), "--json", cwd=local_sweep.parent)
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith('{"point"')]
    assert {r["point"]: r["shared_bytes"] for r in rows} == expected
    text = hpc_runner("status", str(local_sweep), cwd=local_sweep.parent)
    assert text.returncode == 0, text.stderr
    total = sum(expected.values())
    assert f"read from shared storage: {total / 1e6:.1f} MB over 4 point(s)" in text.stdout
    header = next(line for line in text.stdout.splitlines() if line.lstrip().startswith("point"))
    assert "shared MB" in header
    for i, b in expected.items():
        lines = text.stdout.splitlines()
        assert any(line.split()[:1] == [str(i)] and f"{b / 1e6:.1f}" in line.split() for line in lines)


def test_collect_has_the_per_point_shared_mb_column(local_sweep: Path, tmp_path: Path) -> None:
    from hpc_runner.cli.targets import open_target
    from hpc_runner.cli.targets.points_collect import collect_points
    from hpc_runner.jobs import ledger as sr

    collect_points(argparse.Namespace(out=str(tmp_path), quiet=True), open_target(local_sweep))
    rows = list(csv.DictReader((tmp_path / sr.RESULTS_CSV).open()))
    points = _points(local_sweep)
    assert [float(r["shared_mb"]) for r in rows] == [round(shared_bytes_of(p) / 1e6, 1) for p in points]
    assert "shared_mb" in (tmp_path / sr.RESULTS_MD).read_text()


def test_the_sweep_report_shows_the_sum_of_the_points_shared_reads(local_sweep: Path) -> None:
    total = sum(shared_bytes_of(p) for p in _points(local_sweep))
    text = build_report(local_sweep).html.read_text(encoding="utf-8")
    assert f"Read from shared storage: {total / 1e6:.1f} MB over 4 point(s)" in text

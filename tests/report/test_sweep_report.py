"""The report of a real 4-point sweep dir (run with the `local` profile): plots, table, links, Chromium."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from report_helpers import assert_png, hpc_runner

from hpc_runner.report.build import build_report

pytestmark = pytest.mark.slow

PLOTS = ["loss_overlay.png", "metric_vs_params.png", "heatmap.png", "states.png", "time_split.png", "usage.png"]


def _result_rows(dom: str) -> list[str]:
    body = dom[dom.index('<table id="results"') :]
    body = body[body.index("<tbody>") : body.index("</tbody>")]
    return re.findall(r"<tr>(.*?)</tr>", body, re.S)


def _point(row: str) -> int:
    return int(re.match(r"<td[^>]*>(\d+)</td>", row).group(1))


def test_sweep_report_plots_table_and_links(local_sweep: Path) -> None:
    report = build_report(local_sweep)
    assert report.kind == "sweep" and [p.name for p in report.pngs] == PLOTS
    for png in report.pngs:
        assert_png(png)
    text = report.html.read_text(encoding="utf-8")
    assert text.count("data:image/png;base64,") == len(PLOTS)
    rows = _result_rows(text)
    assert [_point(r) for r in rows] == [0, 1, 2, 3]
    for i, row in enumerate(rows):
        link = re.search(r'<a href="([^"]+)">points/000\d</a>', row).group(1)
        assert link == f"points/{i:04d}/" and (local_sweep / link / "summary.json").is_file()
        assert "COMPLETED" in row
    overrides = re.findall(r'<td class="overrides">(.*?)</td>', text)
    assert html.unescape(overrides[0]) == "--learning_rate 0.001 --batch_size 1"
    assert html.unescape(overrides[3]) == "--learning_rate 0.01 --batch_size 2"
    assert '<a href="sweep.yaml">sweep.yaml</a>' in text and '<a href="base/config.yaml">' in text


def test_cli_report_runs_writes_each_points_report(local_sweep: Path, tmp_path: Path) -> None:
    out = hpc_runner("report", str(local_sweep), "--runs", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    for i in range(4):
        assert_png(local_sweep / "points" / f"{i:04d}" / "plots" / "timeline.png")
    text = (local_sweep / "report.html").read_text(encoding="utf-8")
    assert '<a href="points/0002/report.html">report</a>' in text


def test_chromium_renders_and_sorts_the_sweep_page(local_sweep: Path, chromium, tmp_path: Path) -> None:
    page = build_report(local_sweep).html
    assert_png(chromium.screenshot(page, tmp_path / "sweep.png"), (1200, 900))
    dice = {i: json.loads((local_sweep / "points" / f"{i:04d}" / "summary.json").read_text())["final_metric"]
            for i in range(4)}
    by_dice = [_point(r) for r in _result_rows(chromium.dom(page, "#sort=-val_dice"))]
    assert by_dice == sorted(dice, key=lambda i: -dice[i])
    # ties keep their order (the sort is stable): batch_size 1 (points 0, 2) before batch_size 2 (1, 3)
    assert [_point(r) for r in _result_rows(chromium.dom(page, "#sort=batch_size"))] == [0, 2, 1, 3]

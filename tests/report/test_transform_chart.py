"""The report's per-transform chart: a real run's transforms drawn as bars that Chromium renders."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from report_helpers import assert_png

from hpc_runner.pages import page
from hpc_runner.pages.rundata import load_run
from hpc_runner.pages.transforms import CHART_FILE, STAGE_COLORS, transforms_html, write_transforms_chart
from hpc_runner.report.build import build_report

ROWS = [
    {"name": "Spacingd", "calls": 160, "total_s": 12.5, "mean_ms": 78.1, "stage": "every epoch",
     "kind": "deterministic", "threads": ["hpc-runner-data-worker (3 threads)"]},
    {"name": "LoadImaged", "calls": 16, "total_s": 3.2, "mean_ms": 200.0, "stage": "cached", "kind": "deterministic",
     "threads": ["Thread-1 (worker)"]},
    {"name": "RandFlipd <&>", "calls": 160, "total_s": 0.4, "mean_ms": 2.5, "stage": "every epoch", "kind": "random",
     "threads": ["hpc-runner-data-worker (3 threads)"]},
]


def _run_dir(tmp_path: Path, rows: list[dict]) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"status": "completed", "transforms": rows}))
    return run


def test_section_has_the_chart_the_slowest_and_an_escaped_table(tmp_path: Path) -> None:
    run = _run_dir(tmp_path, ROWS)
    data = load_run(run)
    html = transforms_html(data, write_transforms_chart(data, run / "plots"))
    assert_png(run / "plots" / CHART_FILE, (900, 200))
    assert html.count("data:image/png;base64,") == 1
    assert "Slowest: Spacingd (every epoch, 12.5 s, 78% of transform time)" in html
    assert "RandFlipd &lt;&amp;&gt;" in html and "<&>" not in html
    cells = re.findall(r"<tr><td>(.*?)</td>", html)
    assert cells == ["Spacingd", "LoadImaged", "RandFlipd &lt;&amp;&gt;"]


def test_a_run_without_timed_transforms_gets_one_line_and_no_chart(tmp_path: Path) -> None:
    run = _run_dir(tmp_path, [])
    data = load_run(run)
    assert write_transforms_chart(data, run / "plots") is None
    assert "No transform timed" in transforms_html(data, None)
    assert not (run / "plots").exists()


def _colour_pixels(png: Path, rgb_hex: str, tolerance: int = 12) -> int:
    from PIL import Image

    want = tuple(int(rgb_hex[i : i + 2], 16) for i in (1, 3, 5))
    with Image.open(png) as img:
        pixels = img.convert("RGB").getdata()
        return sum(1 for p in pixels if all(abs(a - b) <= tolerance for a, b in zip(p, want)))


@pytest.mark.slow
def test_chromium_renders_the_chart_of_a_real_run(report_run: Path, chromium, tmp_path: Path) -> None:
    run = Path(shutil.copytree(report_run, tmp_path / "copy"))
    report = build_report(run)
    text = report.html.read_text(encoding="utf-8")
    assert "<h3>Transforms</h3>" in text and "RandFlipd" in text and "LoadImaged" in text
    # the section alone on a page, so the screenshot shows it whatever the page above it holds
    section = text[text.index("<h3>Transforms</h3>") : text.index("<h2>Overrides</h2>")]
    alone = tmp_path / "transforms.html"
    alone.write_text(page.document("transforms", [section]), encoding="utf-8")
    shot = chromium.screenshot(alone, tmp_path / "shot.png", size="1200,700")
    assert_png(shot, (1200, 700))
    # both stages' bar colours are on screen: the image decoded and drew bars, not an empty frame
    for stage, colour in STAGE_COLORS.items():
        assert _colour_pixels(shot, colour) > 300, f"no {stage} bar ({colour}) in {shot}"
    dom = chromium.dom(report.html)
    assert dom.count('alt="transforms"') == 1 and 'id="transforms"' in dom

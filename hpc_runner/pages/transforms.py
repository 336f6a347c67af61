"""The per-transform part of a run's report: a bar chart and a table of summary.json's ``transforms``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hpc_runner.pages import page
from hpc_runner.pages.figures import new_figure, save_png
from hpc_runner.pages.page import Cell, value_cell
from hpc_runner.pages.rundata import RunData, as_float

CHART_FILE = "transforms.png"
MAX_BARS = 15
STAGE_COLORS = {"cached": "#4c72b0", "every epoch": "#dd8452"}
OTHER_COLOR = "0.6"


def transform_rows(run: RunData) -> list[dict[str, Any]]:
    """Return summary.json's per-transform rows that have a name and a total time, slowest first."""
    rows = run.summary.get("transforms")
    if not isinstance(rows, list):
        return []
    good = [r for r in rows if isinstance(r, dict) and r.get("name") and as_float(r.get("total_s")) is not None]
    return sorted(good, key=lambda r: -float(r["total_s"]))


def plot_transforms(rows: list[dict[str, Any]], path: Path, title: str = "") -> bytes:
    """Write a horizontal bar per transform (total seconds over the run, coloured by stage) as a PNG."""
    shown = rows[:MAX_BARS]
    fig = new_figure(11, max(2.6, 0.42 * len(shown) + 1.4))
    ax = fig.subplots()
    labels = [f"{r['name']} ({r.get('kind') or '?'})" for r in shown][::-1]
    totals = [float(r["total_s"]) for r in shown][::-1]
    colors = [STAGE_COLORS.get(str(r.get("stage")), OTHER_COLOR) for r in shown][::-1]
    bars = ax.barh(range(len(shown)), totals, color=colors)
    ax.set_yticks(range(len(shown)), labels)
    longest = max(totals) if totals else 0.0
    for bar, r in zip(bars, shown[::-1]):
        text = f" {float(r['total_s']):.3g} s = {r.get('calls', 0)} x {float(r.get('mean_ms') or 0):.3g} ms"
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, text, va="center", fontsize="small")
    ax.set_xlim(0, longest * 1.35 if longest > 0 else 1)
    ax.set_xlabel("seconds over the whole run (all threads)")
    from matplotlib.patches import Patch

    handles = [Patch(color=color, label=stage) for stage, color in STAGE_COLORS.items()]
    ax.legend(handles=handles, loc="lower right", fontsize="small", title="stage")
    ax.grid(axis="x", alpha=0.3)
    more = f" (the {MAX_BARS} slowest of {len(rows)})" if len(rows) > MAX_BARS else ""
    ax.set_title(f"time per transform{more}: cached = once per item, every epoch = each time an item is drawn",
                 fontsize="medium")
    if title:
        fig.suptitle(title)
    return save_png(fig, path)


def _table(rows: list[dict[str, Any]]) -> str:
    body = [
        [Cell(r["name"]), Cell(r.get("stage")), Cell(r.get("kind")), value_cell(r.get("calls")),
         value_cell(as_float(r.get("total_s"))), value_cell(as_float(r.get("mean_ms"))),
         Cell(", ".join(str(t) for t in r.get("threads") or []))]
        for r in rows
    ]
    return page.table(["transform", "stage", "kind", "calls", "total s", "mean ms", "threads"], body, "transforms")


def write_transforms_chart(run: RunData, folder: Path) -> tuple[Path, bytes, str] | None:
    """Write plots/transforms.png; return (path, PNG, caption), or None for a run without timed transforms."""
    rows = transform_rows(run)
    if not rows:
        return None
    path = folder / CHART_FILE
    caption = "time per transform over the run; the advice above says what to change"
    return path, plot_transforms(rows, path, f"{run.name} - {run.path.name}"), caption


def transforms_html(run: RunData, chart: tuple[Path, bytes, str] | None) -> str:
    """Return the report's per-transform section: the slowest named, the chart written before, a sortable table.

    A run without timed transforms gets one line.
    """
    rows = transform_rows(run)
    head = "<h3>Transforms</h3>"
    if not rows:
        return head + "<p>No transform timed (the data pipeline has no MONAI Compose run in this process).</p>"
    everything = sum(float(r["total_s"]) for r in rows)
    slowest = "; ".join(
        f"{r['name']} ({r.get('stage')}, {float(r['total_s']):.3g} s, "
        f"{float(r['total_s']) / everything:.0%} of transform time)" if everything else r["name"]
        for r in rows[:3]
    )
    figure = page.image(chart[1], "transforms", chart[2]) if chart is not None else ""
    return head + f"<p>Slowest: {page.esc(slowest)}.</p>" + figure + _table(rows)

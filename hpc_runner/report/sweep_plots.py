"""The plots of a sweep: loss curves overlaid, final metric against each swept id, a heatmap for two ids,
the points' states, and where each point's time went."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

from hpc_runner.jobs.states import FAILED_STATES, NOT_SUBMITTED, counts
from hpc_runner.jobs.usage import usages
from hpc_runner.pages.figures import binned, new_figure, no_data, save_png
from hpc_runner.pages.run_plots import COMPUTE_COLOR, WAIT_COLOR
from hpc_runner.pages.rundata import as_float
from hpc_runner.report.status_table import states_source
from hpc_runner.report.sweepdata import SweepData
from hpc_runner.sweep.spec import format_cell

MAX_LEGEND = 12
MAX_PARAM_PANELS = 6
STATE_COLORS = {"COMPLETED": "#55a868", "RUNNING": "#4c72b0", "PENDING": "#8172b3", "UNKNOWN": "0.6"}
FAILED_COLOR, OTHER_COLOR = "#c44e52", "0.5"


def cell(value: Any) -> str:
    """Return a swept value as typed on the command line."""
    return format_cell(value)


def is_number(value: Any) -> bool:
    """True for an int or float that is not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def short_ids(ids: list[str]) -> dict[str, str]:
    """Return each id's last ``::`` part, or the whole id where last parts collide."""
    last = {i: i.split("::")[-1].split("#")[-1] for i in ids}
    seen = Counter(last.values())
    return {i: (s if seen[s] == 1 else i) for i, s in last.items()}


MIN_DIGITS = 3  # significant digits a swept float is shown with, at least


def label_digits(values: list[Any]) -> int:
    """Return the fewest significant digits (3 at least) that print the distinct floats among ``values``
    apart: ``0.02655009721467717`` and ``0.1`` need 3 (``0.0266``, ``0.1``), not 17."""
    floats = {float(v) for v in values if isinstance(v, float)}
    for digits in range(MIN_DIGITS, 18):
        if len({f"{v:.{digits}g}" for v in floats}) == len(floats):
            return digits
    return 17


def short_cell(value: Any, digits: int) -> str:
    """Return a swept value as a label: a float to ``digits`` significant digits, anything else as typed."""
    return f"{value:.{digits}g}" if isinstance(value, float) else cell(value)


def param_digits(sweep: SweepData) -> dict[str, int]:
    """Return, per swept id, the digits its values need to be told apart (``label_digits``)."""
    values = [sweep.effective(st) for st in sweep.states]
    return {p: label_digits([v.get(p) for v in values]) for p in sweep.param_ids}


def point_label(sweep: SweepData, state: Any, digits: dict[str, int] | None = None) -> str:
    """Return ``3: lr=0.001, seed=1`` for a point (floats to the digits that tell the sweep's values apart)."""
    names = short_ids(sweep.param_ids)
    digits = digits if digits is not None else param_digits(sweep)
    values = sweep.effective(state)
    text = ", ".join(f"{names[p]}={short_cell(values.get(p), digits.get(p, 17))}" for p in sweep.param_ids)
    return f"{state.index}: {text}" if text else str(state.index)


def _metric_name(sweep: SweepData) -> str:
    for run in sweep.runs.values():
        if run.metric_name:
            return run.metric_name
    return "metric"


def final_metrics(sweep: SweepData) -> dict[int, float]:
    """Return each finished point's final metric from its summary.json (points still running left out)."""
    out = {}
    for index, run in sweep.runs.items():
        value = as_float(run.summary.get("final_metric"))
        if value is not None and math.isfinite(value):
            out[index] = value
    return out


def plot_loss_overlay(sweep: SweepData, path: Path) -> bytes:
    """Write every point's training loss against step, overlaid, as a PNG."""
    fig = new_figure(11, 5)
    ax = fig.subplots()
    curves = [(st, sweep.runs[st.index].losses()) for st in sweep.states if st.index in sweep.runs]
    curves = [(st, xy) for st, xy in curves if xy[0]]
    if curves:
        from matplotlib import colormaps

        cmap = colormaps["viridis"]
        digits = param_digits(sweep)
        for n, (st, (xs, ys)) in enumerate(curves):
            bx, by = binned(xs, ys, 300)
            color = cmap(n / max(len(curves) - 1, 1) * 0.9)
            ax.plot(bx, by, color=color, linewidth=1.2, alpha=0.85, label=point_label(sweep, st, digits))
        if len(curves) <= MAX_LEGEND:
            ax.legend(fontsize="small", loc="upper right")
        ax.set_xlabel("step")
        ax.set_ylabel("training loss (per iteration)")
        ax.grid(alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
    else:
        no_data(ax, "no point has logged an iteration yet")
    ax.set_title(f"training loss of {len(curves)} of {len(sweep.states)} points")
    fig.suptitle(f"sweep {sweep.path.name} ({sweep.bundle})")
    return save_png(fig, path)


def spans_decades(xs: list[float]) -> bool:
    """True when positive values span more than a decade (max / min > 10): a log axis shows them evenly."""
    return bool(xs) and all(x > 0 for x in xs) and max(xs) / min(xs) > 10


def _axis_values(values: list[Any]) -> tuple[bool, list[str]]:
    """Return (numeric axis?, category labels in first-seen order)."""
    numeric = bool(values) and all(is_number(v) for v in values)
    digits = label_digits(values)
    return numeric, list(dict.fromkeys(short_cell(v, digits) for v in values))


def plot_metric_vs_params(sweep: SweepData, path: Path) -> bytes:
    """Write the final metric against each swept id (one panel per id, mean over the other ids as a line)."""
    params = sweep.param_ids[:MAX_PARAM_PANELS]
    metrics = final_metrics(sweep)
    name = _metric_name(sweep)
    fig = new_figure(max(5.0, 4.2 * max(len(params), 1)), 4.2)
    axes = fig.subplots(1, max(len(params), 1), squeeze=False)[0]
    by_index = {st.index: sweep.effective(st) for st in sweep.states}
    for ax, param in zip(axes, params):
        pts = [(by_index[i].get(param), v) for i, v in metrics.items()]
        if not pts:
            no_data(ax, f"no final {name} yet")
            ax.set_title(param)
            continue
        numeric, labels = _axis_values([p for p, _ in pts])
        if numeric:
            xs = [float(p) for p, _ in pts]
            groups: dict[float, list[float]] = {}
            for x, (_, y) in zip(xs, pts):
                groups.setdefault(x, []).append(y)
            ax.scatter(xs, [y for _, y in pts], color="C0", zorder=3)
            keys = sorted(groups)
            ax.plot(keys, [sum(groups[k]) / len(groups[k]) for k in keys], color="C0", alpha=0.5)
            if spans_decades(xs):
                ax.set_xscale("log")
            elif all(isinstance(p, int) for p, _ in pts):
                ax.xaxis.get_major_locator().set_params(integer=True)
        else:
            pos = {label: i for i, label in enumerate(labels)}
            digits = label_digits([p for p, _ in pts])
            xs = [pos[short_cell(p, digits)] for p, _ in pts]
            ax.scatter(xs, [y for _, y in pts], color="C0", zorder=3)
            means = [[y for x, (_, y) in zip(xs, pts) if x == i] for i in range(len(labels))]
            ax.plot(range(len(labels)), [sum(m) / len(m) if m else math.nan for m in means], color="C0", alpha=0.5)
            ax.set_xticks(range(len(labels)), labels, rotation=30 if len(labels) > 4 else 0, fontsize="small")
            ax.set_xlim(-0.5, len(labels) - 0.5)
        ax.set_xlabel(param)
        ax.set_ylabel(f"final {name}")
        ax.grid(alpha=0.3)
        ax.set_title(f"final {name} vs {param}")
    if not params:
        no_data(axes[0], "no swept ids")
    extra = f" (first {MAX_PARAM_PANELS} of {len(sweep.param_ids)} ids)" if len(sweep.param_ids) > len(params) else ""
    fig.suptitle(f"sweep {sweep.path.name}: {len(metrics)} of {len(sweep.states)} points have a final {name}{extra}")
    return save_png(fig, path)


def plot_heatmap(sweep: SweepData, path: Path) -> bytes:
    """Write the mean final metric over the grid of the first two swept ids as an annotated heatmap."""
    import numpy as np

    p0, p1 = sweep.param_ids[:2]
    metrics = final_metrics(sweep)
    name = _metric_name(sweep)
    by_index = {st.index: sweep.effective(st) for st in sweep.states}
    rows = _ordered([by_index[st.index].get(p0) for st in sweep.states])
    cols = _ordered([by_index[st.index].get(p1) for st in sweep.states])
    sums = np.zeros((len(rows), len(cols)))
    counts = np.zeros((len(rows), len(cols)))
    d0 = label_digits([by_index[st.index].get(p0) for st in sweep.states])
    d1 = label_digits([by_index[st.index].get(p1) for st in sweep.states])
    for i, value in metrics.items():
        r, c = rows.index(short_cell(by_index[i].get(p0), d0)), cols.index(short_cell(by_index[i].get(p1), d1))
        sums[r, c] += value
        counts[r, c] += 1
    grid = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    fig = new_figure(max(5.0, 1.1 * len(cols) + 3), max(3.5, 0.6 * len(rows) + 2))
    ax = fig.subplots()
    from matplotlib import colormaps

    image = ax.imshow(np.ma.masked_invalid(grid), cmap=colormaps["viridis"].with_extremes(bad="0.85"), aspect="auto")
    finite = grid[np.isfinite(grid)]
    middle = (finite.min() + finite.max()) / 2 if finite.size else 0.0
    for r in range(len(rows)):
        for c in range(len(cols)):
            v = grid[r, c]
            text, color = ("n/a", "0.3") if not np.isfinite(v) else (f"{v:.3g}", "white" if v < middle else "black")
            ax.text(c, r, text, ha="center", va="center", color=color, fontsize="small")
    ax.set_xticks(range(len(cols)), cols, rotation=30 if len(cols) > 4 else 0)
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xlabel(p1)
    ax.set_ylabel(p0)
    fig.colorbar(image, ax=ax, label=f"final {name}" + (" (mean)" if counts.max() > 1 else ""))
    ax.set_title(f"final {name}: {p0} x {p1}")
    return save_png(fig, path)


def _ordered(values: list[Any]) -> list[str]:
    """Return the distinct values as labels: numbers sorted, anything else in sweep order."""
    digits = label_digits(values)
    distinct = list({short_cell(v, digits): v for v in values}.items())
    if all(is_number(v) for _, v in distinct):
        distinct.sort(key=lambda kv: kv[1])
    return [label for label, _ in distinct]


def plot_states(sweep: SweepData, path: Path) -> bytes:
    """Write the number of points in each state as a bar chart."""
    c = counts(sweep.states)
    states = sorted(c, key=lambda s: (-c[s], s))
    colors = [
        STATE_COLORS.get(s) or (FAILED_COLOR if s in FAILED_STATES or s == NOT_SUBMITTED else OTHER_COLOR)
        for s in states
    ]
    fig = new_figure(7, max(2.2, 0.45 * len(states) + 1.2))
    ax = fig.subplots()
    bars = ax.barh(states, [c[s] for s in states], color=colors)
    ax.bar_label(bars, padding=3)
    ax.invert_yaxis()
    ax.set_xlabel("points")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_xlim(0, max(c.values(), default=1) * 1.15 + 0.5)

    source = states_source(sweep.answer).split(" (")[0].split(",")[0]  # sacct, squeue or the run records
    ax.set_title(f"{len(sweep.states)} points: {c.get('COMPLETED', 0)} completed (states from {source})")
    return save_png(fig, path)


def plot_time_split(sweep: SweepData, path: Path) -> bytes:
    """Write each point's wall time split into computing, waiting for data and the rest (validation, saving)."""
    rows = []
    for st in sweep.states:
        run = sweep.runs.get(st.index)
        report = run.bottleneck() if run else None
        if not report:
            continue
        compute, wait = float(report.get("compute_s") or 0), float(report.get("data_wait_s") or 0)
        wall = float(run.summary.get("wall_s") or 0)
        rows.append((st.index, compute, wait, max(wall - compute - wait, 0.0)))
    fig = new_figure(11, 4)
    ax = fig.subplots()
    if rows:
        xs = [r[0] for r in rows]
        compute = [r[1] for r in rows]
        wait = [r[2] for r in rows]
        ax.bar(xs, compute, color=COMPUTE_COLOR, label="compute (steps)")
        ax.bar(xs, wait, bottom=compute, color=WAIT_COLOR, label="waiting for data")
        ax.bar(xs, [r[3] for r in rows], bottom=[a + b for a, b in zip(compute, wait)], color="0.75",
               label="other (first batch, validation, checkpoints)")
        ax.set_ylim(0, max(r[1] + r[2] + r[3] for r in rows) * 1.3 or 1.0)  # room for the legend
        ax.set_xlabel("point")
        ax.set_ylabel("seconds")
        ax.legend(fontsize="small", loc="upper right")
        ax.grid(axis="y", alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
        total_c, total_w = sum(compute), sum(wait)
        share = total_w / (total_c + total_w) if total_c + total_w > 0 else 0.0
        ax.set_title(f"where the time went: {share:.1%} of step time waiting for data, over {len(rows)} points")
    else:
        no_data(ax, "no point has timing yet")
        ax.set_title("where the time went")
    return save_png(fig, path)


ASKED_COLOR, USED_COLOR = "#c9d6e8", "#4c72b0"


def plot_usage(sweep: SweepData, path: Path) -> bytes:
    """Write, per point, what its job asked for (light bar) against what it used (dark bar): CPUs (used: the
    average number kept busy), memory (peak) and time (elapsed), from the one sacct call of the report."""
    used = usages(sweep.states, sweep.answer)
    panels = [
        ("CPUs", "cpus", "cpus_used", 1.0, "CPUs (asked; used on average)"),
        ("memory", "mem_request_mb", "max_rss_mb", 1 / 1024, "GB (asked; peak)"),
        ("time", "time_limit_s", "elapsed_s", 1 / 60, "minutes (limit; elapsed)"),
    ]
    fig = new_figure(11, 7.5)
    axes = fig.subplots(3, 1, sharex=True)
    indices = [st.index for st in sweep.states]
    any_data = False
    for ax, (name, asked_key, used_key, scale, unit) in zip(axes, panels):
        asked = [getattr(used[i], asked_key) for i in indices]
        spent = [getattr(used[i], used_key) for i in indices]
        if not any(v is not None for v in asked + spent):
            no_data(ax, f"no {name} figures (no scheduler record: local runs, or sacct did not answer)")
            ax.set_ylabel(unit)
            continue
        any_data = True
        ax.bar(indices, [(v or 0) * scale for v in asked], color=ASKED_COLOR, width=0.8, label="asked")
        ax.bar(indices, [(v or 0) * scale for v in spent], color=USED_COLOR, width=0.5, label="used")
        ratios = [s / a for s, a in zip(spent, asked) if s is not None and a]
        share = f": {max(ratios):.0%} of the request at most" if ratios else ""
        ax.set_title(f"{name}{share}", fontsize="medium", loc="left")
        ax.set_ylabel(unit)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize="small", loc="upper right")
    axes[-1].set_xlabel("point")
    if any_data:  # a panel without data set empty (fixed) ticks on the shared axis: whole point numbers again
        from matplotlib.ticker import MaxNLocator

        axes[-1].xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.suptitle("requested against used, per point" + ("" if any_data else " (nothing recorded yet)"))
    return save_png(fig, path)

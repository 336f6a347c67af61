"""The plots of one run: loss and metric curves, and the per-iteration data-wait/compute timeline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hpc_runner.pages.figures import binned, new_figure, no_data, save_png
from hpc_runner.pages.rundata import RunData, as_float

MAX_BARS = 400
COMPUTE_COLOR, WAIT_COLOR = "#4c72b0", "#dd8452"


def _title(run: RunData) -> str:
    return f"{run.name} - {run.path.name} ({run.status})"


def plot_curves(run: RunData, path: Path) -> bytes:
    """Write the loss curve (per iteration and per epoch) and the validation metric curve as a PNG."""
    fig = new_figure(11, 4)
    ax_loss, ax_metric = fig.subplots(1, 2)
    steps, losses = run.losses()
    if steps:
        bx, by = binned(steps, losses)
        label = "iteration loss" if len(bx) == len(steps) else f"iteration loss (mean of {-(-len(steps) // len(bx))})"
        ax_loss.plot(bx, by, color="0.55", linewidth=0.8, label=label)
        ep = [(int(r["step"]), as_float(r.get("loss"))) for r in run.epochs if "step" in r]
        ep = [(s, v) for s, v in ep if v is not None]
        if ep:
            ax_loss.plot([s for s, _ in ep], [v for _, v in ep], "o-", color="C0", label="epoch mean loss")
        ax_loss.set_xlabel("step")
        ax_loss.set_ylabel("loss")
        ax_loss.legend(loc="upper right", fontsize="small")
        ax_loss.grid(alpha=0.3)
        ax_loss.xaxis.get_major_locator().set_params(integer=True)
    else:
        no_data(ax_loss, "no iterations logged yet")
    ax_loss.set_title("training loss")
    epochs, values = run.metric_series()
    name = run.metric_name or "metric"
    if epochs:
        ax_metric.plot(epochs, values, "o-", color="C2")
        best = (min if run.summary.get("metric_mode") == "min" else max)(values)  # the trainer's own "best"
        ax_metric.axhline(best, color="C2", alpha=0.3, linestyle="--")
        ax_metric.set_xlabel("epoch")
        ax_metric.set_ylabel(name)
        ax_metric.grid(alpha=0.3)
        ax_metric.set_title(f"{name}: final {values[-1]:.4g}, best {best:.4g} (epoch {epochs[values.index(best)]})")
        ax_metric.xaxis.get_major_locator().set_params(integer=True)
    else:
        no_data(ax_metric, "no validation logged")
        ax_metric.set_title(name)
    fig.suptitle(_title(run))
    return save_png(fig, path)


def _bars(values: list[float], max_bars: int) -> tuple[list[float], list[float], float]:
    """Return (bin centre in steps, mean value, bin width) for at most ``max_bars`` bars."""
    steps = list(range(1, len(values) + 1))
    xs, ys = binned(steps, values, max_bars)
    width = len(values) / len(xs) if xs else 1.0
    return xs, ys, width * 0.9


def plot_timeline(run: RunData, path: Path) -> bytes:
    """Write per-iteration data-wait against compute time as stacked bars, titled with the bottleneck verdict."""
    fig = new_figure(11, 4)
    ax = fig.subplots()
    data_s, compute_s = run.step_times()
    report = run.bottleneck()
    if data_s:
        xc, yc, width = _bars(compute_s, MAX_BARS)
        _, yd, _ = _bars(data_s, MAX_BARS)
        ax.bar(xc, yc, width=width, color=COMPUTE_COLOR, label="compute")
        ax.bar(xc, yd, width=width, bottom=yc, color=WAIT_COLOR, label="waiting for data")
        for rec in run.epochs[:-1]:
            if "step" in rec:
                ax.axvline(int(rec["step"]) + 0.5, color="0.6", linestyle=":", linewidth=0.8)
        per = "" if len(xc) == len(data_s) else f" (mean of {round(len(data_s) / len(xc))} steps per bar)"
        ax.set_xlabel("step (dotted: epoch ends)")
        ax.set_ylabel(f"seconds per step{per}")
        ax.legend(loc="upper right", fontsize="small")
        ax.grid(axis="y", alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
    else:
        no_data(ax, "no iterations logged yet")
    verdict = (report or {}).get("verdict") or "no timing yet"
    title = f"where the time went: {verdict}"
    if report:
        title += (
            f"\ndata wait {report.get('wait_fraction', 0):.1%} of step time: "
            f"{report.get('data_wait_s', 0):.2f} s waiting{_split_text(report)}, "
            f"{report.get('compute_s', 0):.2f} s computing; "
            f"first batch {1000 * (report.get('first_batch_s') or 0):.0f} ms (pipeline fill, not counted)"
        )
    ax.set_title(title, fontsize="medium")
    fig.suptitle(_title(run))
    return save_png(fig, path)


def _split_text(report: dict[str, Any]) -> str:
    """`` (0.12 s reading, 0.30 s transforming)`` when the report splits the data wait, else empty."""
    read, rest = report.get("data_read_s"), report.get("data_transform_s")
    if isinstance(read, (int, float)) and isinstance(rest, (int, float)):
        return f" ({read:.2f} s reading, {rest:.2f} s transforming)"
    return ""

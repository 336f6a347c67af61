"""Matplotlib without pyplot: a Figure on the Agg canvas, saved as PNG bytes (no GUI, no global backend)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hpc_runner.errors import UserError
from hpc_runner.records.atomic import write_bytes_atomic

DPI = 100


def new_figure(width: float = 10.0, height: float = 4.0) -> Any:
    """Return a matplotlib Figure attached to an Agg canvas (matplotlib imported here, not at CLI import)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise UserError(
            "the report needs matplotlib, which is not installed",
            hint="pip install 'hpc-bundle-runner[report]' (or pip install matplotlib)",
        ) from None
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def png_bytes(fig: Any) -> bytes:
    """Render the figure as PNG."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def save_png(fig: Any, path: Path) -> bytes:
    """Write the figure to ``path`` atomically and return the PNG bytes (for embedding)."""
    data = png_bytes(fig)
    write_bytes_atomic(path, data)
    return data


def binned(xs: Sequence[float], ys: Sequence[float], max_points: int = 500) -> tuple[list[float], list[float]]:
    """Return at most ``max_points`` (x, mean y) pairs: long runs are averaged in equal bins."""
    n = len(xs)
    if n <= max_points:
        return list(xs), list(ys)
    size = -(-n // max_points)
    out_x, out_y = [], []
    for i in range(0, n, size):
        chunk = ys[i : i + size]
        out_x.append(xs[i + len(chunk) // 2])
        out_y.append(sum(chunk) / len(chunk))
    return out_x, out_y


def no_data(ax: Any, text: str) -> None:
    """Write ``text`` in the middle of an empty axes."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])

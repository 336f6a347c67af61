"""An mkdocs hook: benchmark tables rendered from the benches' result files at each build, never typed by hand.

A page writes ``<!-- bench-table: NAME [NAME ...] -->`` on a line of its own; the build replaces it with one table
of every figure in ``bench/results/NAME.json`` (written by the bench itself: bench/results.py). A figure whose
measured source paths changed in a commit after the one it was measured on is shown as stale with its date; a
missed goal as missed; a NAME without a result file as never measured. tests/test_bench_tables.py checks that
every number in a rendered table comes from a result file and that no page types a benchmark table by hand.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
MARKER = re.compile(r"^<!-- bench-table: *([\w\- ]+?) *-->[ \t]*$", re.MULTILINE)
HEADER = ("figure", "value", "anchor, same run", "ratio", "goal", "met?", "measured", "commit", "machine")
NEVER = "never measured"


def load(name: str, results: Path = RESULTS) -> dict[str, Any] | None:
    """The result file of bench ``name``; None when it was never measured."""
    path = results / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None  # noqa: TID251  (our own files, bench/results.py)


@functools.lru_cache(maxsize=256)
def changed_since(commit: str, paths: tuple[str, ...], root: Path = ROOT) -> bool | None:
    """Whether a commit after ``commit`` touched ``paths`` (None: the commit is not in this checkout)."""
    if not commit:
        return None
    if not paths:
        return False
    try:
        known = subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=root, capture_output=True,
                               timeout=30)
        if known.returncode != 0:
            return None
        log = subprocess.run(["git", "log", "--format=%H", f"{commit}..HEAD", "--", *paths], cwd=root,
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return bool(log.stdout.strip()) if log.returncode == 0 else None


def number(x: float | int) -> str:
    """A figure as the docs print it: thousands separated, at most 6 significant digits, no exponent."""
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, int) or float(x).is_integer():
        return f"{int(x):,}"
    return f"{x:,.6g}" if abs(x) >= 1e-4 else f"{x:.2e}"


def quantity(value: Any, unit: str) -> str:
    """A value (a number, or a list of runs: two as a range, more one by one) with its unit."""
    if value is None:
        return "-"
    if isinstance(value, list):
        text = f"{number(min(value))}-{number(max(value))}" if len(value) == 2 else " / ".join(map(number, value))
    else:
        text = number(value)
    if not unit:
        return text
    return f"{text}{unit}" if unit in ("x", "%") else f"{text} {unit}"


def ratio(fig: dict[str, Any]) -> str:
    """The figure against its anchor: value/anchor, or anchor/value for a speed-up ("faster")."""
    faster = " faster" if fig.get("ratio_of") == "anchor/value" else ""
    if fig.get("ratios"):
        return " / ".join(times(r) for r in fig["ratios"]) + faster
    value, anchor = fig.get("value"), fig.get("anchor_value")
    if not isinstance(value, (int, float)) or not isinstance(anchor, (int, float)) or not value or not anchor:
        return "-"
    return times(anchor / value if faster else value / anchor) + faster


def times(r: float) -> str:
    """A ratio: two decimals from 0.1x to 10x, else three significant digits."""
    return f"{r:.2f}x" if 0.1 <= r < 10 else f"{r:.3g}x"


def verdict(fig: dict[str, Any]) -> str:
    """Met, missed (in bold) or '-' for a figure without a goal."""
    met = fig.get("goal_met")
    return "-" if met is None else ("met" if met else "**missed**")


def freshness(result: dict[str, Any], root: Path = ROOT) -> str:
    """The date, or 'stale (measured DATE)' when the measured paths changed after the result's commit."""
    date = result.get("date") or "?"
    changed = changed_since(result.get("commit") or "", tuple(result.get("measured_paths") or ()), root)
    if changed is None:
        return f"stale? (measured {date}; its commit is not in this checkout)"
    return f"**stale** (measured {date})" if changed else date


def machine(info: dict[str, Any] | None) -> str:
    """CPU count, GPU and load average in a few words."""
    info = info or {}
    parts = []
    if info.get("cpus"):
        parts.append(f"{info['cpus']} CPUs")
    parts.append(info.get("gpu") or "no GPU")
    if info.get("load"):
        parts.append(f"load {number(info['load'][0])}")
    return ", ".join(parts)


def commit(result: dict[str, Any]) -> str:
    """The short commit, noting uncommitted changes to the measured paths."""
    short = (result.get("commit") or "?")[:7]
    return f"`{short}` + uncommitted changes" if result.get("uncommitted_changes") else f"`{short}`"


def cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def table(names: list[str], results: Path = RESULTS, root: Path = ROOT) -> str:
    """One Markdown table of every figure of the named result files, then each file's command."""
    rows, notes = [], []
    for name in names:
        result = load(name, results)
        if result is None:
            rows.append([f"`{name}`", NEVER, "-", "-", "-", "-", NEVER, "-", "-"])
            notes.append(f"- `{name}`: {NEVER} (no `bench/results/{name}.json`)")
            continue
        when, rev, where = freshness(result, root), commit(result), machine(result.get("machine"))
        for fig in result.get("figures", []):
            name_cell = fig["name"] + (f"; {fig['note']}" if fig.get("note") else "")
            anchor = "-"
            if fig.get("anchor_name"):
                anchor = f"{fig['anchor_name']}: {quantity(fig.get('anchor_value'), fig.get('unit', ''))}"
            rows.append([name_cell, quantity(fig.get("value"), fig.get("unit", "")), anchor, ratio(fig),
                         fig.get("goal") or "-", verdict(fig), when, rev, where])
        note = f"; {result['note']}" if result.get("note") else ""
        notes.append(f"- `{name}`: `{result.get('command', '?')}`{note}")
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join([*lines, "", *notes])


def render(markdown: str, results: Path = RESULTS, root: Path = ROOT) -> str:
    """The page with every bench-table marker replaced by its table."""
    return MARKER.sub(lambda m: table(m.group(1).split(), results, root), markdown)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """mkdocs: render the page's benchmark tables."""
    return render(markdown)

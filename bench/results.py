"""What a benchmark measured, written to ``bench/results/<bench>.json``: the docs' benchmark tables are rendered
from these files at build time (docs/hooks/bench_tables.py), never typed by hand.

A file holds each figure with its unit, the anchor measured in the same run, the goal and whether it was met,
the command, the commit, the date, the machine (CPU count, GPU name, load average) and the source paths the
bench measures: a figure whose paths changed in a commit after its own is shown as stale.

``HPCR_BENCH_RESULTS=DIR`` writes the files elsewhere (``off``: not at all); a ``--quick`` smoke run writes none,
and neither does a bench a test runs (under pytest) unless ``HPCR_BENCH_RESULTS`` names a folder.
``HPCR_BENCH_COMMIT=SHA`` names the commit when the bench runs in a clean copy of it (``git archive SHA``) rather
than in a checkout, as while the working tree is being edited.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
FORMAT = 1


@dataclasses.dataclass
class Figure:
    """One measured figure; ``anchor_value`` is the peer or baseline measured in the same run (None: none).

    A value may be a list: the figure of each of several runs (shown as their range); ``ratios`` then gives each
    run's ratio where the runs' anchors are not kept one by one. ``goal_met`` None: the figure has no goal.
    """

    name: str
    value: float | list[float] | None
    unit: str
    anchor_name: str | None = None
    anchor_value: float | list[float] | None = None
    goal: str | None = None
    goal_met: bool | None = None
    note: str | None = None
    ratio_of: str = "value/anchor"  # or "anchor/value": a speed-up, where a smaller value is better
    ratios: list[float] | None = None


def _git(*args: str) -> str:
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def _gpu_name() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    names = [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []
    return ", ".join(names) or None


def machine() -> dict[str, Any]:
    """The machine the figures were measured on: CPU count, GPU name (None: none) and the load average."""
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {"cpus": os.cpu_count(), "gpu": _gpu_name(), "load": load}


def command_line(argv: Sequence[str] | None = None) -> str:
    """The command that ran the bench, as typed from the repository root."""
    argv = list(sys.argv if argv is None else argv)
    script = Path(argv[0]).resolve() if argv else None
    if script is not None and script.is_relative_to(ROOT):
        argv[0] = str(script.relative_to(ROOT))
    return "python " + shlex.join(argv)


def results_dir() -> Path | None:
    """Where result files go: ``$HPCR_BENCH_RESULTS`` or bench/results; None when set to ``off``."""
    env = os.environ.get("HPCR_BENCH_RESULTS")
    if env == "off" or (env is None and "PYTEST_CURRENT_TEST" in os.environ):
        return None  # a test that runs a bench writes no result file into the checkout (git status stays clean)
    return Path(env) if env else RESULTS


def write_result(bench: str, figures: Sequence[Figure], command: str | None = None,
                 measured_paths: Sequence[str] = (), *, date: str | None = None, commit: str | None = None,
                 machine_info: dict[str, Any] | None = None, note: str | None = None,
                 quick: bool = False) -> Path | None:
    """Write ``bench/results/<bench>.json``; return its path (None: a smoke run, or results turned off).

    ``date``, ``commit`` and ``machine_info`` default to now, ``git rev-parse HEAD`` and this machine; they are
    given only for a figure carried from an earlier run (bench/carried.py).
    """
    folder = results_dir()
    if quick or folder is None:
        return None
    dirty = None
    if commit is None and os.environ.get("HPCR_BENCH_COMMIT"):  # a clean copy of that commit (git archive)
        commit, dirty = os.environ["HPCR_BENCH_COMMIT"], False
    head = commit or _git("rev-parse", "HEAD")
    if dirty is None and measured_paths and not date:
        dirty = bool(_git("status", "--porcelain", "--", *measured_paths))
    data = {
        "format": FORMAT,
        "bench": bench,
        "command": command or command_line(),
        "commit": head,
        "uncommitted_changes": dirty,
        "date": date or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "machine": machine_info if machine_info is not None else machine(),
        "measured_paths": list(measured_paths),
        "note": note,
        "figures": [dataclasses.asdict(f) for f in figures],
    }
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{bench}.json"
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    print(f"# result file: {path}")
    return path

"""How long earlier runs of a bundle's entry took, from their run dirs, and the dry run's note on a time limit
far longer than that.

A job that asks for 24 hours waits behind the jobs that ask for less (backfill starts short jobs in the gaps),
so a request far above what the same bundle and entry needed before is noted in the dry run, with a time to
ask for instead: the longest earlier run x2 (at least the stop-signal margin more), rounded up to a round
limit, as right_size.py suggests after a sweep. The runs are the completed ones under ``runs/<bundle>/``
(single runs, and the points of sweeps: ``sweep-*/points/NNNN``), each one's ``ended`` less its ``started`` in
run.yaml; the newest ``MAX_RECORDS`` are read.
"""

from __future__ import annotations

import datetime as _dt
import re
from pathlib import Path
from typing import Any

from hpc_runner.errors import ClusterError, UserError
from hpc_runner.jobs.time_limits import TIME_HEADROOM, human_s, round_limit_minutes, slurm_time
from hpc_runner.records.read import read_yaml_record
from hpc_runner.scheduler.job_env import stop_margin_s

MAX_RECORDS = 200  # run.yaml files read at most, newest folders first
RATIO = 10  # a time limit more than RATIO x the longest earlier run is noted ...
FLOOR_MINUTES = 60  # ... when it is also longer than this


def _elapsed_s(record: dict[str, Any]) -> float | None:
    try:
        started = _dt.datetime.fromisoformat(str(record.get("started")))
        ended = _dt.datetime.fromisoformat(str(record.get("ended")))
        seconds = (ended - started).total_seconds()
    except (TypeError, ValueError):  # a naive time against an aware one, or no time at all
        return None
    return seconds if seconds > 0 else None


def _run_yamls(folder: Path) -> list[Path]:
    """The run.yaml files of the runs and sweep points under ``folder`` (runs/<bundle>), newest first."""
    try:
        children = sorted((c for c in folder.iterdir() if c.is_dir()), key=lambda c: c.name, reverse=True)
    except OSError:
        return []
    out: list[Path] = []
    for child in children:
        if len(out) >= MAX_RECORDS:
            break
        points = child / "points"
        if points.is_dir():
            try:
                out.extend(sorted((p / "run.yaml" for p in points.iterdir()), reverse=True)[: MAX_RECORDS - len(out)])
            except OSError:
                continue
        else:
            out.append(child / "run.yaml")
    return out


def longest_earlier_s(bundle_name: str, entry: str | None, root: Path = Path("runs")) -> float | None:
    """The longest completed earlier run of ``bundle_name``'s ``entry`` under ``root``, in seconds (None: none)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", bundle_name) or "bundle"  # as records.rundir.default_run_dir names it
    longest: float | None = None
    for path in _run_yamls(root / safe):
        try:
            record = read_yaml_record(path, "run record")
        except (UserError, OSError):
            continue
        if not record or record.get("status") != "completed":
            continue
        bundle = record.get("bundle")
        if not isinstance(bundle, dict) or bundle.get("name") != bundle_name:
            continue
        if entry is not None and record.get("entry") != entry:
            continue
        seconds = _elapsed_s(record)
        if seconds is not None and (longest is None or seconds > longest):
            longest = seconds
    return longest


def time_note(profile: Any, bundle_name: str, entry: str | None, root: Path = Path("runs")) -> str | None:
    """The dry run's one line when ``profile``'s time limit is more than ``RATIO`` x the longest earlier run of
    the bundle's ``entry`` (and more than an hour); None otherwise, or when no earlier run is known."""

    try:
        minutes = profile.time_minutes()
    except ClusterError:
        return None
    if minutes <= FLOOR_MINUTES:
        return None
    longest = longest_earlier_s(bundle_name, entry, root)
    if not longest or minutes * 60 <= RATIO * longest:
        return None
    margin = stop_margin_s(profile.get("signal_delay_s"))
    want = slurm_time(round_limit_minutes(max(longest * TIME_HEADROOM, longest + margin) / 60))
    asked = profile.get("time")
    asked = asked if isinstance(asked, str) else slurm_time(minutes)
    return (f"# note: time {asked} is {minutes * 60 / longest:.0f}x the longest earlier run of this bundle "
            f"({human_s(longest)}); a shorter time starts sooner (--scheduler-option time={want})")

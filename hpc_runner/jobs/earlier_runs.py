"""How long earlier runs of a bundle's entry took, from their run dirs, and the dry run's note on a time limit
far longer than that.

A job that asks for 24 hours waits behind the jobs that ask for less (backfill starts short jobs in the gaps),
so a request far above what the same bundle and entry needed before is noted in the dry run, with a time to
ask for instead: the longest earlier run x2 (at least the stop-signal margin more), rounded up to a round
limit, as right_size.py suggests after a sweep. The runs are the completed ones where this submission's runs
go (the folder holding its run dir or sweep dir: ``--output_dir``'s parent) and under ``runs/<bundle>/``
(single runs, and the points of sweeps: ``sweep-*/points/NNNN``), each one's ``ended`` less its ``started`` in
run.yaml; in each folder the newest ``MAX_RECORDS`` are read (of its first ``MAX_LISTED`` entries), and a
run.yaml that cannot be read (damaged, hostile, not a file) is skipped. With none to compare with, a time over
an hour is noted as not compared: a new user's first dry run of a 1-minute training asks for the profile's
24 hours and is told so.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hpc_runner.errors import ClusterError, UserError
from hpc_runner.jobs.time_limits import TIME_HEADROOM, human_s, round_limit_minutes, slurm_time
from hpc_runner.records.read import read_yaml_record
from hpc_runner.scheduler.job_env import stop_margin_s

MAX_RECORDS = 200  # run.yaml files read at most per folder looked in (two at most), newest folders first
MAX_LISTED = 10_000  # entries of one folder looked at (--output_dir's parent may be a crowded scratch folder)
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


def _subfolders(folder: Path) -> list[Path]:
    """The folders among the first ``MAX_LISTED`` entries of ``folder``, newest (largest name) first."""
    names: list[str] = []
    try:
        with os.scandir(folder) as entries:
            for entry in itertools.islice(entries, MAX_LISTED):
                try:
                    if entry.is_dir():
                        names.append(entry.name)
                except OSError:
                    continue
    except OSError:  # absent, not a folder, or not ours to read
        return []
    return [folder / name for name in sorted(names, reverse=True)]


def _run_yamls(folder: Path) -> list[Path]:
    """The run.yaml files of the runs and sweep points under ``folder`` (runs/<bundle>), newest first."""
    out: list[Path] = []
    for child in _subfolders(folder):
        if len(out) >= MAX_RECORDS:
            break
        points = _subfolders(child / "points")
        if points:
            out.extend(p / "run.yaml" for p in points[: MAX_RECORDS - len(out)])
        else:
            out.append(child / "run.yaml")
    return out


def bundle_folder(bundle_name: str, root: Path = Path("runs")) -> Path:
    """``runs/<bundle>``, the bundle's name made safe as records.rundir.default_run_dir names it."""
    return root / (re.sub(r"[^A-Za-z0-9_.-]", "_", bundle_name) or "bundle")


def earlier_folders(bundle_name: str, near: Path | None = None, root: Path = Path("runs")) -> list[Path]:
    """Where earlier runs are looked for: the folder holding ``near`` (the run dir or sweep dir being submitted),
    then ``runs/<bundle>``; one folder once."""
    folders = ([near.parent] if near is not None else []) + [bundle_folder(bundle_name, root)]
    out: list[Path] = []
    seen: set[str] = set()
    for folder in folders:
        key = os.path.realpath(folder)
        if key not in seen:
            seen.add(key)
            out.append(folder)
    return out


def longest_earlier_s(bundle_name: str, entry: str | None, root: Path = Path("runs"),
                      folders: Sequence[Path] | None = None) -> float | None:
    """The longest completed earlier run of ``bundle_name``'s ``entry`` under ``folders`` (default
    ``root/<bundle>``), in seconds (None: none)."""
    longest: float | None = None
    for folder in folders if folders is not None else [bundle_folder(bundle_name, root)]:
        for path in _run_yamls(folder):
            seconds = _completed_s(path, bundle_name, entry)
            if seconds is not None and (longest is None or seconds > longest):
                longest = seconds
    return longest


def _completed_s(path: Path, bundle_name: str, entry: str | None) -> float | None:
    """How long the run of ``path`` (its run.yaml) took, when it is a completed run of the bundle's entry."""
    try:
        record = read_yaml_record(path, "run record")
    except (UserError, OSError):  # damaged, hostile (a device, a pipe, too big) or unreadable: not a run to use
        return None
    if not record or record.get("status") != "completed":
        return None
    bundle = record.get("bundle")
    if not isinstance(bundle, dict) or bundle.get("name") != bundle_name:
        return None
    if entry is not None and record.get("entry") != entry:
        return None
    return _elapsed_s(record)


def time_note(profile: Any, bundle_name: str, entry: str | None, root: Path = Path("runs"),
              near: Path | None = None) -> str | None:
    """The dry run's one line when ``profile``'s time limit is more than an hour and either ``RATIO`` x the
    longest earlier run of the bundle's ``entry`` or not comparable with any (none has completed where this
    submission's runs go, next to ``near``, or under ``root/<bundle>``); None otherwise."""

    try:
        minutes = profile.time_minutes()
    except ClusterError:
        return None
    if minutes <= FLOOR_MINUTES:
        return None
    asked = profile.get("time")
    asked = asked if isinstance(asked, str) else slurm_time(minutes)
    folders = earlier_folders(bundle_name, near, root)
    longest = longest_earlier_s(bundle_name, entry, root, folders)
    if not longest:
        where = " or ".join(str(f) for f in folders)
        return (f"# note: time {asked} (profile {profile.name}) is not compared with an earlier run: none of "
                f"{bundle_name}'s entry {entry or 'run'} has completed under {where}; once one has, this note "
                "suggests a time (after a sweep, `status` and `collect` do: `--right-size`)")
    if minutes * 60 <= RATIO * longest:
        return None
    margin = stop_margin_s(profile.get("signal_delay_s"))
    want = slurm_time(round_limit_minutes(max(longest * TIME_HEADROOM, longest + margin) / 60))
    return (f"# note: time {asked} is {minutes * 60 / longest:.0f}x the longest earlier run of this bundle "
            f"({human_s(longest)}); a shorter time starts sooner (--scheduler-option time={want})")

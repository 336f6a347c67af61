"""What the next submission should ask for, from what a finished sweep's points used (jobs/usage.py).

From the jobs of the completed points (a packed task's job counted once), with headroom:

- CPUs: the most CPUs a job kept busy on average (TotalCPU / Elapsed), x1.25, rounded up (at least 1);
- memory: the highest peak (MaxRSS), x1.25, rounded up to a whole GB (at least 1);
- time: the longest job, x2 and at least the stop-signal margin more, rounded up to a round limit
  (5, 10, 15, 20, 30, 45 min, 1, 1.5, 2, 3, 4, 6, 8, 12, 16, 24 h, then whole days).

A figure SLURM did not record is not suggested. A value is suggested only when it differs from what was
asked; points that failed for memory or time make the suggestion at least twice what they had. The
suggestion is printed by ``status`` and ``collect`` and shown in ``report.html``; ``sweep --right-size DIR``
and ``resume --right-size DIR`` apply it (as ``--slurm`` settings that explicit ``--slurm``/``--cpus``
options still override).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hpc_runner.errors import UserError
from hpc_runner.jobs.retry import mem_gb_of
from hpc_runner.jobs.states import ENDED_WELL, WAITING
from hpc_runner.jobs.targets import load_target
from hpc_runner.jobs.time_limits import TIME_HEADROOM, human_s, round_limit_minutes, slurm_time
from hpc_runner.jobs.usage import PointUsage, usages
from hpc_runner.scheduler.job_env import stop_margin_s
from hpc_runner.scheduler.profiles import check_settings

CPU_HEADROOM = 1.25
MEM_HEADROOM = 1.25
def _gb(mb: float) -> str:
    return f"{mb / 1024:.2g} GB" if mb < 10 * 1024 else f"{mb / 1024:.0f} GB"


@dataclass
class Suggestion:
    """The next request: profile settings that change, one phrase per resource, and what it is based on."""

    settings: dict[str, Any] = field(default_factory=dict)
    parts: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    jobs: int = 0  # distinct jobs of completed points it is based on

    @property
    def changes(self) -> bool:
        """True when some setting should change."""
        return bool(self.settings)

    def line(self) -> str:
        """Return the suggestion as one line (``asked 8 CPUs, used at most 1.3: --cpus 2; ...``)."""
        if not self.jobs:
            return "; ".join(self.notes) or "no completed point to learn from yet"
        return "; ".join(self.parts + self.notes) if self.parts or self.notes else "nothing recorded to go by"

    def options(self) -> list[str]:
        """Return the settings as command-line options (``--cpus 2 --scheduler-option mem_gb=4 ...``)."""
        out = []
        for key, value in self.settings.items():
            if value is None:
                continue
            out.append(f"--cpus {value}" if key == "cpus_per_task" else f"--scheduler-option {key}={value}")
        return out

    def to_json(self) -> dict[str, Any]:
        """Return what ``status --json`` prints under ``right_size``."""
        return {"settings": {k: v for k, v in self.settings.items() if v is not None}, "line": self.line(),
                "options": self.options(), "based_on_jobs": self.jobs}


def _distinct_jobs(usages: Sequence[PointUsage]) -> list[PointUsage]:
    seen: dict[str, PointUsage] = {}
    for u in usages:
        seen.setdefault(u.job_id or f"#{id(u)}", u)
    return list(seen.values())


def suggest(completed: Sequence[PointUsage], failed: Sequence[tuple[str | None, PointUsage]] = (),
            settings: Mapping[str, Any] | None = None) -> Suggestion:
    """Return the suggestion from the usage of completed points (and the failed points' causes and usage).

    ``settings``: the profile the sweep was submitted with (for what was asked when sacct does not say it,
    and the stop-signal delay the time limit must leave room for).
    """
    settings = settings or {}
    jobs = _distinct_jobs(completed)
    s = Suggestion(jobs=len(jobs))
    oom = [u for cause, u in failed if cause == "OUT_OF_MEMORY"]
    timeouts = [u for cause, u in failed if cause == "TIMEOUT"]
    if not jobs:
        s.notes.append("no completed point to learn from yet")
        return s
    _cpus(s, jobs, settings)
    _memory(s, jobs, oom, settings)
    _time(s, jobs, timeouts, settings)
    _gpus(s, jobs)
    return s


def _cpus(s: Suggestion, jobs: list[PointUsage], settings: Mapping[str, Any]) -> None:
    used = [u.cpus_used for u in jobs if u.cpus_used is not None]
    asked = max((u.cpus for u in jobs if u.cpus), default=None) or settings.get("cpus_per_task")
    if not used or not asked:
        return
    peak = max(used)
    want = max(1, math.ceil(peak * CPU_HEADROOM - 1e-9))
    if want < asked:
        s.settings["cpus_per_task"] = want
        s.parts.append(f"asked {asked} CPU{'s' if asked != 1 else ''}, used at most {peak:.2g}: --cpus {want}")
    else:
        s.parts.append(f"asked {asked} CPU{'s' if asked != 1 else ''}, used at most {peak:.2g}: keep")


def _memory(s: Suggestion, jobs: list[PointUsage], oom: list[PointUsage], settings: Mapping[str, Any]) -> None:
    peaks = [u.max_rss_mb for u in jobs if u.max_rss_mb]
    asked_mb = max((u.mem_request_mb for u in jobs if u.mem_request_mb), default=None)
    if asked_mb is None and mem_gb_of(settings):
        asked_mb = mem_gb_of(settings) * 1024
    if not peaks:
        s.notes.append("peak memory not recorded (sacct samples it every JobAcctGatherFrequency seconds)")
        return
    peak = max(peaks)
    want = max(1, math.ceil(peak * MEM_HEADROOM / 1024 - 1e-9))
    floor = max((math.ceil(2 * u.mem_request_mb / 1024) for u in oom if u.mem_request_mb), default=0)
    want = max(want, floor)
    of = f" of {_gb(asked_mb)}" if asked_mb else ""
    if asked_mb is None or abs(want * 1024 - asked_mb) > 0.5 * 1024:
        s.settings.update(mem_gb=want, mem=None)
        killed = f" ({len(oom)} point(s) ran out of memory)" if floor else ""
        s.parts.append(f"peak memory {_gb(peak)}{of}{killed}: mem_gb {want}")
    else:
        s.parts.append(f"peak memory {_gb(peak)}{of}: keep")


def _time(s: Suggestion, jobs: list[PointUsage], timeouts: list[PointUsage], settings: Mapping[str, Any]) -> None:
    elapsed = [u.elapsed_s for u in jobs if u.elapsed_s]
    limits = [u.time_limit_s for u in jobs if u.time_limit_s]
    if not elapsed:
        return
    longest = max(elapsed)
    asked_s = max(limits) if limits else None
    margin = stop_margin_s(settings.get("signal_delay_s"))
    want = round_limit_minutes(max(longest * TIME_HEADROOM, longest + margin) / 60)
    floor = max((math.ceil(2 * u.time_limit_s / 60) for u in timeouts if u.time_limit_s), default=0)
    if floor:
        want = max(want, round_limit_minutes(floor))
    of = f" of {human_s(asked_s)}" if asked_s else ""
    if asked_s is None or abs(want * 60 - asked_s) >= 60:
        s.settings["time"] = slurm_time(want)
        late = f" ({len(timeouts)} point(s) ran out of time)" if floor else ""
        s.parts.append(f"longest point {human_s(longest)}{of}{late}: time {slurm_time(want)}")
    else:
        s.parts.append(f"longest point {human_s(longest)}{of}: keep")


def _gpus(s: Suggestion, jobs: list[PointUsage]) -> None:
    util = [u.gpu_util for u in jobs if u.gpu_util is not None]
    mem = [u.gpu_mem_mb for u in jobs if u.gpu_mem_mb]
    if util:
        text = f"GPUs busy {sum(util) / len(util):.0f}% on average"
        if mem:
            text += f", GPU memory peak {_gb(max(mem))}"
        s.notes.append(text)


def from_states(states: Sequence[Any], usage: Mapping[int, PointUsage],
                settings: Mapping[str, Any] | None = None) -> Suggestion:
    """Return the suggestion of a sweep from its points' states (jobs/states.py) and usage (by index)."""
    completed = [usage[s.index] for s in states if s.state in ENDED_WELL and s.index in usage]
    failed = [(s.cause_kind, usage[s.index]) for s in states if s.failed and s.index in usage]
    return suggest(completed, failed, settings)


def finished(states: Sequence[Any]) -> bool:
    """True when no point of the sweep may still run or wait (the end of a sweep: when a suggestion is shown)."""
    return bool(states) and not any(s.active or s.state == WAITING for s in states)


def suggested_for(target: Any, states: Sequence[Any]) -> bool:
    """Whether status, collect and report show a suggestion: a sweep (or run) that has ended, not a tune, and
    submitted to a scheduler (the local profile asks nothing of one, so there is nothing to right-size)."""
    if not finished(states) or not target.right_sizes:  # a tune: no one request to right-size
        return False
    try:
        return not target.executor().runs_here
    except Exception:  # an unreadable recorded profile: say what sacct's figures say
        return True


def for_target(target: Any, states: Sequence[Any], answer: Any, used: dict[int, Any] | None = None) -> Suggestion:
    """Return the suggestion for a loaded sweep or run (jobs/targets.py) from its states and the status call
    (``used``: each point's usage when the caller has it already, jobs/usage.py ``usages``)."""
    settings: dict[str, Any] = {}
    try:
        settings = dict(target.executor().profile.settings)
    except Exception:  # an unreadable recorded profile: suggest from sacct's figures alone
        settings = {}
    return from_states(states, used if used is not None else usages(list(states), answer), settings)


def suggested_settings(path: str) -> tuple[dict[str, Any], Suggestion]:
    """Return the settings ``--right-size DIR`` applies: the finished sweep's (or run's) suggestion.

    UserError when DIR has no completed point to learn from (one scheduler call, as ``status``).
    """
    target = load_target(path)
    states, answer = target.states()
    s = for_target(target, states, answer)
    if not s.jobs:
        raise UserError(f"--right-size {path}: no completed point to learn from",
                        where=str(path), expected="a sweep (or run) dir with completed points (hpc-runner status DIR)")
    return dict(s.settings), s


def apply_to_profile(profile: Any, path: str, explicit: Mapping[str, Any], log: Any = print) -> Suggestion:
    """``--right-size DIR``: put DIR's suggested settings on ``profile`` (in place), except those given
    explicitly (``explicit``: the ``--slurm``/``--cpus`` settings, which win); return the suggestion."""
    settings, suggestion = suggested_settings(path)
    mem_keys = {"mem", "mem_gb"}
    applied = {}
    for key, value in settings.items():
        if key in explicit or (key in mem_keys and mem_keys & set(explicit)):
            continue
        if value is None:
            profile.settings.pop(key, None)
        else:
            profile.settings[key] = value
            applied[key] = value
    check_settings(profile.settings, f"--right-size {path}")
    shown = ", ".join(f"{k}={v}" for k, v in applied.items()) or "nothing to change"
    log(f"hpc-runner: --right-size {path}: {shown} ({suggestion.line()})")
    return suggestion

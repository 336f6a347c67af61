"""Retries that change the request: ``--retry CAUSE:CHANGE`` rules, and which failed points they send again.

A rule names a failure cause (jobs/causes.py) and what the next attempt asks for::

    OUT_OF_MEMORY:mem*2      twice the memory of the attempt that failed (mem_gb; sacct's ReqMem when the
                             profile names none)
    TIMEOUT:time*2           twice its time limit; the point's run dir is kept, so it continues from its
                             newest checkpoint
    NODE_FAIL:exclude        the same request, with the node it failed on excluded (sacct's NodeList)
    CAUSE:cpus*F             F times the CPUs (cpus_per_task)
    CAUSE:same               the same request again

The rules are recorded in sweep.yaml (``retry``) and applied by the sweep's one top-up step
(jobs/governor.py's ``top_up``: every task that ends, ``status``, ``status --watch``, ``resume``): a
point whose job ended with a cause that has a rule takes the ledger's ``retry`` transition with its
changed request, at most ``max_retries`` times (the ledger's bound, default 3, shared with ``resume``),
and the governor submits it with that request (one array per distinct request). Each attempt is
recorded on the point (``history``: when, the job, its cause, its node, the rule, the next request).

Everything here decides, from given states and records: nothing calls the scheduler or writes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hpc_runner.errors import UserError
from hpc_runner.jobs.causes import CAUSES
from hpc_runner.jobs.ledger import MAX_RETRIES
from hpc_runner.scheduler.profiles import parse_time_minutes
from hpc_runner.scheduler.units import parse_size_bytes

CHANGES = ("mem*F", "time*F", "cpus*F", "exclude", "same")
_CHANGE = re.compile(r"^(?:(mem|time|cpus)\s*\*\s*([0-9]+(?:\.[0-9]+)?)|(exclude)|(same))\Z")
MAX_FACTOR = 16.0


@dataclass(frozen=True)
class RetryRule:
    """One ``--retry CAUSE:CHANGE``."""

    cause: str
    change: str  # "mem", "time", "cpus", "exclude" or "same"
    factor: float = 1.0

    @property
    def text(self) -> str:
        """Return the rule as it is written (``OUT_OF_MEMORY:mem*2``)."""
        return f"{self.cause}:{self.spelling}"

    @property
    def spelling(self) -> str:
        """Return the change as written (``mem*2``)."""
        return f"{self.change}*{self.factor:g}" if self.change in ("mem", "time", "cpus") else self.change


def parse_rule(text: str) -> RetryRule:
    """Return the rule ``CAUSE:CHANGE``; UserError naming what is accepted otherwise."""
    cause, sep, change = str(text).partition(":")
    cause, change = cause.strip().upper(), change.strip().lower()
    expected = (f"CAUSE:CHANGE with CAUSE one of {', '.join(CAUSES)} and CHANGE one of {', '.join(CHANGES)} "
                "(F a number above 1, at most 16), e.g. --retry OUT_OF_MEMORY:mem*2")
    if not sep or cause not in CAUSES:
        raise UserError(f"--retry {text!r} names no failure cause", expected=expected)
    m = _CHANGE.match(change)
    if m is None:
        raise UserError(f"--retry {text!r}: {change!r} is not a change", expected=expected)
    if m.group(1):
        factor = float(m.group(2))
        if not 1.0 < factor <= MAX_FACTOR:
            raise UserError(f"--retry {text!r}: the factor {m.group(2)} does not grow the request", expected=expected)
        return RetryRule(cause, m.group(1), factor)
    return RetryRule(cause, m.group(3) or m.group(4))


def parse_rules(texts: Iterable[str] | None) -> dict[str, str]:
    """Return ``--retry`` options as sweep.yaml records them (cause -> change); one rule per cause."""
    out: dict[str, str] = {}
    for t in texts or []:
        rule = parse_rule(t)
        if rule.cause in out and out[rule.cause] != rule.spelling:
            raise UserError(f"--retry gives {rule.cause} two changes ({out[rule.cause]} and {rule.spelling})",
                            expected="one --retry per cause")
        out[rule.cause] = rule.spelling
    return out


def rules_of(recorded: Mapping[str, Any] | None) -> dict[str, RetryRule]:
    """Return the rules sweep.yaml records (``retry: {CAUSE: CHANGE}``); a hand-broken one is left out."""
    out: dict[str, RetryRule] = {}
    for cause, change in (recorded or {}).items():
        try:
            out[str(cause)] = parse_rule(f"{cause}:{change}")
        except UserError:
            continue
    return out


# ---------------------------------------------------------------- the changed request


def mem_gb_of(settings: Mapping[str, Any]) -> float | None:
    """Return the memory a profile's settings ask for per node, in GB (``mem_gb``, else ``mem`` like 16G)."""
    if settings.get("mem") not in (None, ""):
        size = parse_size_bytes(str(settings["mem"]), default_unit="M")  # sbatch's --mem default unit
        return size / 1024**3 if size else None
    value = settings.get("mem_gb")
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else None


def _nice_gb(gb: float) -> float | int:
    """Round a memory size up to a whole GB (to 0.25 GB below 1 GB), as a profile writes it."""
    if gb < 1:
        return math.ceil(gb * 4) / 4
    return math.ceil(gb - 1e-9)


def merge_exclude(current: str | None, node: str) -> str:
    """Return ``current`` (an sbatch --exclude list) with ``node`` added once."""
    names = [n for n in (current or "").split(",") if n.strip()]
    if node not in names:
        names.append(node)
    return ",".join(names)


@dataclass
class Changed:
    """The request of the next attempt (profile settings that differ from the sweep's) and what was done."""

    request: dict[str, Any]
    note: str
    changed: bool = True


def changed_request(rule: RetryRule, settings: Mapping[str, Any], request: Mapping[str, Any],
                    used: Any = None, node: str | None = None) -> Changed:
    """Return the next attempt's request by ``rule``.

    ``settings``: the sweep's profile settings; ``request``: the point's own changes on top of them (earlier
    retries); ``used``: the failed attempt's jobs.usage.PointUsage (its ReqMem and Timelimit, when the
    settings name none); ``node``: the node it failed on.
    """
    current = {**settings, **request}
    out = dict(request)
    if rule.change == "mem":
        gb = mem_gb_of(current)
        if gb is None and used is not None and getattr(used, "mem_request_mb", None):
            gb = used.mem_request_mb / 1024
        if gb is None:
            return Changed(out, "no memory request known (neither the profile nor sacct): same request", False)
        new = _nice_gb(gb * rule.factor)
        out.update(mem_gb=new, mem=None)  # mem (a string) would win over mem_gb in the job script
        return Changed(out, f"mem_gb {gb:g} -> {new:g}")
    if rule.change == "time":
        try:
            minutes = parse_time_minutes(current.get("time", 60))
        except UserError:
            minutes = None
        if used is not None and getattr(used, "time_limit_s", None):
            minutes = max(minutes or 0, math.ceil(used.time_limit_s / 60))
        if not minutes:
            return Changed(out, "no time limit known: same request", False)
        new = math.ceil(minutes * rule.factor)
        out["time"] = new
        return Changed(out, f"time {minutes} -> {new} min")
    if rule.change == "cpus":
        cpus = current.get("cpus_per_task") or (getattr(used, "cpus", None) if used is not None else None) or 1
        new = max(int(cpus) + 1, math.ceil(int(cpus) * rule.factor))
        out["cpus_per_task"] = new
        return Changed(out, f"cpus_per_task {cpus} -> {new}")
    if rule.change == "exclude":
        if not node:
            return Changed(out, "the failed node is not known (sacct NodeList): same request, no node excluded",
                           False)
        out["exclude"] = merge_exclude(current.get("exclude"), node)
        return Changed(out, f"exclude {out['exclude']}")
    return Changed(out, "same request", False)


# ---------------------------------------------------------------- which points go again


@dataclass
class RetryDecision:
    """One failed point sent again: its index, the job that failed, why, and the next request."""

    index: int
    job_id: str | None
    cause: str
    rule: RetryRule
    request: dict[str, Any]
    note: str
    node: str | None = None

    def history(self, at: str) -> dict[str, Any]:
        """Return the entry the point's ``history`` records for this attempt."""
        entry = {"at": at, "job_id": self.job_id, "cause": self.cause, "rule": self.rule.text,
                 "next_request": {k: v for k, v in self.request.items() if v is not None}, "change": self.note}
        if self.node:
            entry["node"] = self.node
        return entry


@dataclass
class RetryPlan:
    """What the top-up step does with the failed points: retry some, leave the others (and why)."""

    retry: list[RetryDecision] = field(default_factory=list)
    exhausted: list[tuple[int, str]] = field(default_factory=list)  # (index, cause) past the bound


def decide(points: Sequence[Mapping[str, Any]], states: Sequence[Any], rules: Mapping[str, RetryRule],
           settings: Mapping[str, Any], bound: int, usage_of: Any = None) -> RetryPlan:
    """Return which failed points to retry and with what request.

    ``states``: jobs.states.PointState of the points (with their causes); ``usage_of(state)`` the failed
    attempt's PointUsage (its node, ReqMem, Timelimit). Only points their job failed (the ledger's
    ``submitted``, with a scheduler or local job id) whose cause has a rule; at most ``bound`` retries each.
    """
    plan = RetryPlan()
    for st in states:
        kind = getattr(st, "cause_kind", None)
        rule = rules.get(kind or "")
        if rule is None or not getattr(st, "failed", False) or not st.job_id:
            continue
        point = points[st.index]
        if point.get("submit") != "submitted" or point.get("job_id") != st.job_id:
            continue  # no longer that job's (another top-up sent it, or the ledger gave it up)
        if int(point.get("retries", 0)) >= bound:
            plan.exhausted.append((st.index, kind))
            continue
        used = usage_of(st) if usage_of is not None else None
        node = getattr(used, "node", None) if used is not None else None
        changed = changed_request(rule, settings, point.get("request") or {}, used, node)
        plan.retry.append(RetryDecision(st.index, st.job_id, kind, rule, changed.request, changed.note, node))
    return plan


def pending_retries(record: Any, states: Sequence[Any]) -> set[int]:
    """Return the failed points of a sweep that its rules send again at the next top-up (``status --wait`` and
    ``--watch`` wait for them: a point its own task just saw fail is not final yet)."""
    if record is None:
        return set()
    rules = rules_of(record.data.get("retry"))
    if not rules:
        return set()

    plan = decide(record.points, states, rules, {}, record.limit("max_retries", MAX_RETRIES))
    return {d.index for d in plan.retry}

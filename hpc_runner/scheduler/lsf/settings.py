"""What an LSF profile asks for, in LSF's own words, each value checked where it is read.

``queue`` (``-q``), ``slots`` (``-n``), ``mem`` (written twice, as IBM's docs advise: ``-R "rusage[mem=...]"``
reserves it for scheduling, ``-M`` is the limit whose breach is ``TERM_MEMLIMIT``; both with an explicit unit,
so the site's ``LSF_UNIT_FOR_LIMITS`` cannot scale them), ``run_limit`` (``-W [hours:]minutes``), ``gpus``
(``-gpu "num=N"``), ``project`` (``-P``), ``one_host`` (``-R "span[hosts=1]"``) and ``requeue_exit``
(``-Q "99"``: a job that exits with it is requeued). A misspelled key is refused with the list of valid ones.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hpc_runner.control_chars import find_control_character
from hpc_runner.errors import ClusterError
from hpc_runner.records.numbers import outside_int
from hpc_runner.scheduler.units import parse_size_bytes

_NAME = re.compile(r"[A-Za-z0-9_.+-]{1,64}")
MAX_COUNT = 1 << 20
REQUEUE_EXIT = 99  # the exit value that asks LSF to requeue (written -Q "99"; Grid Engine's is 99 too)


@dataclass(frozen=True)
class LsfSettings:
    """An LSF profile's requests, checked (``from_mapping``) and ready for the job script."""

    queue: str | None = None
    slots: int = 1  # -n
    mem_bytes: int | None = None  # rusage[mem=] and -M
    run_limit_s: int | None = None  # -W, whole minutes
    gpus: int = 0  # -gpu "num=N"
    project: str | None = None  # -P
    one_host: bool = True  # -R "span[hosts=1]"
    requeue_exit: int | None = REQUEUE_EXIT  # -Q

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], where: str | None = None) -> LsfSettings:
        """Return the settings of a profile's ``lsf:`` mapping (``mem: 32G``, ``run_limit: "2:00"``);
        ClusterError naming the key for an unknown key or a value LSF would not take."""
        known = {"queue", "slots", "mem", "run_limit", "gpus", "project", "one_host", "requeue_exit"}
        unknown = sorted(str(k) for k in values if k not in known)
        if unknown:
            raise ClusterError(f"unknown LSF setting(s) {', '.join(unknown)}", where=where,
                               expected=f"one of {', '.join(sorted(known))}")
        out: dict[str, Any] = {}
        for key in ("queue", "project"):
            if values.get(key) is not None:
                out[key] = _name(values[key], key, where)
        for key, low, high in (("slots", 1, MAX_COUNT), ("gpus", 0, 1024), ("requeue_exit", 1, 255)):
            if values.get(key) is not None:
                out[key] = _count(values[key], key, low, high, where)
        if values.get("mem") is not None:
            text = _text(values["mem"], "mem", where).strip()
            size = parse_size_bytes(re.sub(r"(?i)(?<=[kmgtp])b\Z", "", text))
            if size is None or not 1 <= size <= 1 << 60:
                raise ClusterError(f"mem {text[:60]!r} is not a size", where=where, expected="a size such as 32G")
            out["mem_bytes"] = int(size)
        if values.get("run_limit") is not None:
            out["run_limit_s"] = _run_limit(values["run_limit"], where)
        if values.get("one_host") is not None:
            if not isinstance(values["one_host"], bool):
                raise ClusterError("one_host must be true or false", where=where, expected="true or false")
            out["one_host"] = values["one_host"]
        return cls(**out)

    def __post_init__(self) -> None:
        for key in ("queue", "project"):
            if getattr(self, key) is not None:
                _name(getattr(self, key), key, None)
        for key, low, high in (("slots", 1, MAX_COUNT), ("gpus", 0, 1024)):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ClusterError(f"{key} {value!r} is out of range", expected=f"{low} to {high}")
        if self.requeue_exit is not None and not 1 <= self.requeue_exit <= 255:
            raise ClusterError(f"requeue_exit {self.requeue_exit!r} is out of range", expected="1 to 255")


def _text(value: Any, key: str, where: str | None) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ClusterError(f"{key}: {value!r} is not a single value", where=where, expected="text or a number")
    text = str(value)
    if find_control_character(text):
        raise ClusterError(f"{key} {text[:60]!r} holds a control character", where=where, expected=f"{key} on one line")
    return text


def _name(value: Any, key: str, where: str | None) -> str:
    text = _text(value, key, where)
    if not _NAME.fullmatch(text):
        raise ClusterError(f"{key} {text[:60]!r} is not an LSF name", where=where,
                           expected="letters, digits and _ . + - (at most 64)")
    return text


def _count(value: Any, key: str, low: int, high: int, where: str | None) -> int:
    number = value if isinstance(value, int) and not isinstance(value, bool) else outside_int(_text(value, key, where))
    if number is None or not low <= number <= high:
        raise ClusterError(f"{key} {value!r} is not a whole number from {low} to {high}", where=where,
                           expected=f"{key} written with the digits 0-9")
    return number


def _run_limit(value: Any, where: str | None) -> int:
    """bsub -W's ``[hours:]minutes`` (``120``, ``2:00``) in seconds."""
    text = _text(value, "run_limit", where).strip()
    hours, sep, minutes = text.rpartition(":")
    h = outside_int(hours) if sep else 0
    m = outside_int(minutes)
    seconds = None if h is None or m is None else (h * 60 + m) * 60
    if seconds is None or not 60 <= seconds <= 10 * 365 * 86400 or (sep and m >= 60):
        raise ClusterError(f"run_limit {text[:60]!r} is not [hours:]minutes", where=where,
                           expected="minutes (120) or hours:minutes (2:00), as bsub -W takes them")
    return seconds


def lsf_memory(size_bytes: int) -> str:
    """Return a size with its unit, as bsub takes it: ``32GB`` when whole GiB, else ``NMB`` (rounded up)."""
    if size_bytes % (1 << 30) == 0:
        return f"{size_bytes >> 30}GB"
    return f"{-(-size_bytes // (1 << 20))}MB"


def lsf_run_limit(seconds: int) -> str:
    """Return a run limit as bsub -W writes it, ``H:MM`` (whole minutes, rounded up)."""
    minutes = -(-int(seconds) // 60)
    return f"{minutes // 60}:{minutes % 60:02d}"



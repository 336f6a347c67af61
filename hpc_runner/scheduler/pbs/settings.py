"""What a PBS Professional / OpenPBS profile asks for, in PBS's own words, each value checked where it is read.

One chunk shape for every job (``-l select=<select>:ncpus=<ncpus>:ngpus=<ngpus>:mem=<mem>``), a ``walltime``,
a ``queue`` (``-q``), an ``account`` (``-A``, the accounting string) and a ``project`` (``-P``, PBS Pro's
project), a ``place`` (``-l place=scatter:excl``) and ``rerunnable`` (``-r y``: what ``qrerun`` needs). A
misspelled key is refused with the list of valid ones; a value outside the characters PBS accepts for its field
is refused before any script is written (qsub reads ``#PBS`` lines as option words, so a space or a quote in a
value would change the options).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hpc_runner.control_chars import find_control_character
from hpc_runner.errors import ClusterError
from hpc_runner.records.numbers import outside_int
from hpc_runner.scheduler.units import parse_duration_s, parse_size_bytes

_NAME = re.compile(r"[A-Za-z0-9_.+-]{1,64}")
# qsub(1B) -l place=arrangement[:sharing][:grouping]
_PLACE = re.compile(r"(free|pack|scatter|vscatter)(:(excl|exclhost|shared))?(:group=[A-Za-z0-9_.-]{1,64})?")
MAX_COUNT = 1 << 20


@dataclass(frozen=True)
class PbsSettings:
    """A PBS profile's requests, checked (``from_mapping``) and ready for the job script."""

    queue: str | None = None
    select: int = 1  # chunks
    ncpus: int = 1  # per chunk
    ngpus: int = 0  # per chunk
    mem_bytes: int | None = None  # per chunk; written in PBS's units (``32gb``)
    walltime_s: int | None = None  # written ``HH:MM:SS``
    account: str | None = None  # -A
    project: str | None = None  # -P
    place: str | None = None  # -l place=
    rerunnable: bool = True  # -r y

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], where: str | None = None) -> PbsSettings:
        """Return the settings of a profile's ``pbs:`` mapping (``mem: 32G``, ``walltime: "02:00:00"``);
        ClusterError naming the key for an unknown key or a value PBS would not take."""
        known = {"queue", "select", "ncpus", "ngpus", "mem", "walltime", "account", "project", "place",
                 "rerunnable"}
        unknown = sorted(str(k) for k in values if k not in known)
        if unknown:
            raise ClusterError(f"unknown PBS setting(s) {', '.join(unknown)}", where=where,
                               expected=f"one of {', '.join(sorted(known))}")
        out: dict[str, Any] = {}
        for key in ("queue", "account", "project"):
            if values.get(key) is not None:
                out[key] = _name(values[key], key, where)
        for key, low in (("select", 1), ("ncpus", 1), ("ngpus", 0)):
            if values.get(key) is not None:
                out[key] = _count(values[key], key, low, where)
        if values.get("mem") is not None:
            out["mem_bytes"] = _size(values["mem"], where)
        if values.get("walltime") is not None:
            out["walltime_s"] = _duration(values["walltime"], where)
        if values.get("place") is not None:
            text = _text(values["place"], "place", where)
            if not _PLACE.fullmatch(text):
                raise ClusterError(f"place {text[:60]!r} is not a PBS placement", where=where,
                                   expected="free, pack, scatter or vscatter, optionally :excl, :exclhost or :shared")
            out["place"] = text
        if values.get("rerunnable") is not None:
            if not isinstance(values["rerunnable"], bool):
                raise ClusterError("rerunnable must be true or false", where=where, expected="true or false")
            out["rerunnable"] = values["rerunnable"]
        return cls(**out)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in ("queue", "account", "project") and value is not None:
                _name(value, f.name, None)
        for name, low in (("select", 1), ("ncpus", 1), ("ngpus", 0)):
            if not isinstance(getattr(self, name), int) or not low <= getattr(self, name) <= MAX_COUNT:
                raise ClusterError(f"{name} {getattr(self, name)!r} is out of range", expected=f"{low} to {MAX_COUNT}")
        if self.place is not None and not _PLACE.fullmatch(str(self.place)):
            raise ClusterError(f"place {str(self.place)[:60]!r} is not a PBS placement")


def _text(value: Any, key: str, where: str | None) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ClusterError(f"{key}: {value!r} is not a single value", where=where, expected="text or a number")
    text = str(value)
    found = find_control_character(text)
    if found:
        raise ClusterError(f"{key} {text[:60]!r} holds a control character at position {found[0]}", where=where,
                           expected=f"{key} on one line")
    return text


def _name(value: Any, key: str, where: str | None) -> str:
    text = _text(value, key, where)
    if not _NAME.fullmatch(text):
        raise ClusterError(f"{key} {text[:60]!r} is not a PBS name", where=where,
                           expected="letters, digits and _ . + - (at most 64)")
    return text


def _count(value: Any, key: str, low: int, where: str | None) -> int:
    number = value if isinstance(value, int) and not isinstance(value, bool) else outside_int(_text(value, key, where))
    if number is None or not low <= number <= MAX_COUNT:
        raise ClusterError(f"{key} {value!r} is not a whole number from {low} to {MAX_COUNT}", where=where,
                           expected=f"{key} written with the digits 0-9")
    return number


def _size(value: Any, where: str | None) -> int:
    text = _text(value, "mem", where).strip()
    size = parse_size_bytes(re.sub(r"(?i)(?<=[kmgtp])b\Z", "", text))  # PBS writes 32gb, profiles 32G
    if size is None or not 1 <= size <= 1 << 60:
        raise ClusterError(f"mem {text[:60]!r} is not a size", where=where, expected="a size such as 32G or 32gb")
    return int(size)


def _duration(value: Any, where: str | None) -> int:
    seconds = parse_duration_s(_text(value, "walltime", where))
    if seconds is None or not 1 <= seconds <= 10 * 365 * 86400:
        raise ClusterError(f"walltime {value!r} is not a duration", where=where,
                           expected="HH:MM:SS, MM:SS or seconds")
    return int(seconds)


def pbs_size(size_bytes: int) -> str:
    """Return a size as PBS writes it: ``32gb`` when whole GiB, else ``NNNmb`` (rounded up), else ``NNNkb``."""
    for unit, factor in (("gb", 1 << 30), ("mb", 1 << 20)):
        if size_bytes % factor == 0:
            return f"{size_bytes // factor}{unit}"
    if size_bytes >= 1 << 20:
        return f"{-(-size_bytes // (1 << 20))}mb"
    return f"{-(-size_bytes // 1024)}kb"


def pbs_walltime(seconds: int) -> str:
    """Return a duration as PBS's ``walltime`` (``HH:MM:SS``, hours past 99 allowed)."""
    hours, rest = divmod(int(seconds), 3600)
    return f"{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"

"""What a PBS Professional / OpenPBS profile asks for, in PBS's own words, each value checked where it is read.

One chunk shape for every job (``-l select=<select>:ncpus=<ncpus>:ngpus=<ngpus>:mem=<mem>``), a ``walltime``,
a ``queue`` (``-q``), an ``account`` (``-A``, the accounting string) and a ``project`` (``-P``, PBS Pro's
project), a ``place`` (``-l place=scatter:excl``) and ``rerunnable`` (``-r y``: what ``qrerun`` needs). A
misspelled key is refused with the list of valid ones; a value outside the characters PBS accepts for its field
is refused before any script is written (qsub reads ``#PBS`` lines as option words, so a space or a quote in a
value would change the options).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hpc_runner.errors import ClusterError
from hpc_runner.scheduler.setting_values import (
    name_of,
    one_line,
    refuse_unknown,
    size_bytes,
    true_or_false,
    whole_number,
)
from hpc_runner.scheduler.units import parse_duration_s

# qsub(1B) -l place=arrangement[:sharing][:grouping]
_PLACE = re.compile(r"(free|pack|scatter|vscatter)(:(excl|exclhost|shared))?(:group=[A-Za-z0-9_.-]{1,64})?")
MAX_COUNT = 1 << 20
KEYS = ("queue", "select", "ncpus", "ngpus", "mem", "walltime", "account", "project", "place", "rerunnable")


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
        refuse_unknown(values, KEYS, "PBS", where)
        out: dict[str, Any] = {}
        for key in ("queue", "account", "project"):
            if values.get(key) is not None:
                out[key] = name_of(values[key], key, "PBS", where)
        for key, low in (("select", 1), ("ncpus", 1), ("ngpus", 0)):
            if values.get(key) is not None:
                out[key] = whole_number(values[key], key, low, MAX_COUNT, where)
        if values.get("mem") is not None:
            out["mem_bytes"] = size_bytes(values["mem"], "mem", where)
        if values.get("walltime") is not None:
            out["walltime_s"] = _duration(values["walltime"], where)
        if values.get("place") is not None:
            out["place"] = name_of(values["place"], "place", "PBS", where, _PLACE,
                                   "free, pack, scatter or vscatter, optionally :excl, :exclhost or :shared")
        if values.get("rerunnable") is not None:
            out["rerunnable"] = true_or_false(values["rerunnable"], "rerunnable", where)
        return cls(**out)

    def __post_init__(self) -> None:
        for key in ("queue", "account", "project"):
            if getattr(self, key) is not None:
                name_of(getattr(self, key), key, "PBS", None)
        for name, low in (("select", 1), ("ncpus", 1), ("ngpus", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_COUNT:
                raise ClusterError(f"{name} {value!r} is out of range", expected=f"{low} to {MAX_COUNT}")
        if self.place is not None and not _PLACE.fullmatch(str(self.place)):
            raise ClusterError(f"place {str(self.place)[:60]!r} is not a PBS placement")


def _duration(value: Any, where: str | None) -> int:
    seconds = parse_duration_s(one_line(value, "walltime", where))
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

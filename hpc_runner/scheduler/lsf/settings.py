"""What an LSF profile asks for, in LSF's own words, each value checked where it is read.

``queue`` (``-q``), ``slots`` (``-n``), ``mem`` (written twice, as IBM's docs advise: ``-R "rusage[mem=...]"``
reserves it for scheduling, ``-M`` is the limit whose breach is ``TERM_MEMLIMIT``; both with an explicit unit,
so the site's ``LSF_UNIT_FOR_LIMITS`` cannot scale them), ``run_limit`` (``-W [hours:]minutes``), ``gpus``
(``-gpu "num=N"``), ``project`` (``-P``), ``one_host`` (``-R "span[hosts=1]"``) and ``requeue_exit``
(``-Q "99"``: a job that exits with it is requeued). A misspelled key is refused with the list of valid ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hpc_runner.errors import ClusterError
from hpc_runner.records.numbers import outside_int
from hpc_runner.scheduler.setting_values import (
    name_of,
    one_line,
    refuse_unknown,
    size_bytes,
    true_or_false,
    whole_number,
)

MAX_COUNT = 1 << 20
KEYS = ("queue", "slots", "mem", "run_limit", "gpus", "project", "one_host", "requeue_exit")
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
        refuse_unknown(values, KEYS, "LSF", where)
        out: dict[str, Any] = {}
        for key in ("queue", "project"):
            if values.get(key) is not None:
                out[key] = name_of(values[key], key, "LSF", where)
        for key, low, high in (("slots", 1, MAX_COUNT), ("gpus", 0, 1024), ("requeue_exit", 1, 255)):
            if values.get(key) is not None:
                out[key] = whole_number(values[key], key, low, high, where)
        if values.get("mem") is not None:
            out["mem_bytes"] = size_bytes(values["mem"], "mem", where)
        if values.get("run_limit") is not None:
            out["run_limit_s"] = _run_limit(values["run_limit"], where)
        if values.get("one_host") is not None:
            out["one_host"] = true_or_false(values["one_host"], "one_host", where)
        return cls(**out)

    def __post_init__(self) -> None:
        for key in ("queue", "project"):
            if getattr(self, key) is not None:
                name_of(getattr(self, key), key, "LSF", None)
        for key, low, high in (("slots", 1, MAX_COUNT), ("gpus", 0, 1024)):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ClusterError(f"{key} {value!r} is out of range", expected=f"{low} to {high}")
        if self.requeue_exit is not None and not 1 <= self.requeue_exit <= 255:
            raise ClusterError(f"requeue_exit {self.requeue_exit!r} is out of range", expected="1 to 255")


def _run_limit(value: Any, where: str | None) -> int:
    """bsub -W's ``[hours:]minutes`` (``120``, ``2:00``) in seconds."""
    text = one_line(value, "run_limit", where).strip()
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



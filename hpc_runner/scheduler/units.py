"""Sizes and durations as schedulers write them (``620768K``, ``4G``; ``1-02:00:00``, ``00:30.789``), in numbers.

Neutral helpers: the scheduler's accounting reads its answers with them, and callers above the scheduler
(jobs/usage.py, jobs/retry.py) read a profile's ``mem`` or a recorded time limit with the same rules.
"""

from __future__ import annotations

import re

_SIZE_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5}


def parse_size_bytes(text: str | None, default_unit: str = "") -> float | None:
    """Return a SLURM size (``620768K``, ``4G``, ``23081M``, ``1234``) in bytes, None when empty or garbled.

    ``ReqMem`` of older SLURM ends in ``n`` (per node) or ``c`` (per CPU): the letter is dropped here.
    """
    t = (text or "").strip().rstrip("nc")
    m = re.fullmatch(r"([0-9]{1,18}(?:\.[0-9]{1,18})?)([KMGTP]?)", t, re.I)
    if m is None:
        return None
    return float(m.group(1)) * _SIZE_UNITS[(m.group(2) or default_unit).upper()]


def parse_duration_s(text: str | None) -> float | None:
    """Return a SLURM duration (``[D-][HH:]MM:SS[.mmm]``: Elapsed, TotalCPU, Timelimit) in seconds, None for
    ``UNLIMITED``, ``Partition_Limit``, empty or garbled text."""
    t = (text or "").strip()
    m = re.fullmatch(r"(?:([0-9]{1,9})-)?([0-9]{1,9}(?::[0-9]{1,9}){0,2})(\.[0-9]{1,9})?", t)
    if m is None:
        return None
    parts = [int(x) for x in m.group(2).split(":")]
    if m.group(1) is not None and len(parts) < 3:  # D-HH or D-HH:MM
        parts += [0] * (3 - len(parts))
    seconds = 0
    for p in parts:
        seconds = seconds * 60 + p
    return seconds + int(m.group(1) or 0) * 86400 + float(m.group(3) or 0)


def slurm_time(minutes: int) -> str:
    """Return a time limit as SLURM prints it, ``D-HH:MM:SS`` (1440 minutes: ``1-00:00:00``)."""
    days, rest = divmod(int(minutes), 1440)
    return f"{days}-{rest // 60:02d}:{rest % 60:02d}:00" if days else f"{rest // 60:02d}:{rest % 60:02d}:00"

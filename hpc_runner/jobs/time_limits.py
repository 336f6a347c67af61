"""Time limits for people and for job scripts: the round limits right-sizing suggests (sweep/right_size.py) and the
oversized-time note of a dry run (jobs/earlier_runs.py) share."""

from __future__ import annotations

import math

TIME_HEADROOM = 2.0
ROUND_MINUTES = (5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 240, 360, 480, 720, 960, 1440)


def round_limit_minutes(minutes: float) -> int:
    """Return the first round time limit (``ROUND_MINUTES``, then whole days) that is at least ``minutes``."""
    for m in ROUND_MINUTES:
        if minutes <= m:
            return m
    return math.ceil(minutes / 1440) * 1440


def slurm_time(minutes: int) -> str:
    """Return minutes as sbatch writes a time limit: ``HH:MM:SS``, or ``D-HH:MM:SS`` from a day on."""
    days, rest = divmod(int(minutes), 1440)
    text = f"{rest // 60:02d}:{rest % 60:02d}:00"
    return f"{days}-{text}" if days else text


def human_s(seconds: float) -> str:
    """Return a duration for people: ``45 s``, ``12 min``, ``4 h``, ``1.5 h``, ``2 d``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.3g} h"
    return f"{seconds / 86400:.3g} d"

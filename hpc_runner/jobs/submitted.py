"""What a submission did: job ids per point, arrays, sbatch calls, the texts shown (one record per call)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Submitted:
    """What a submission did: job ids per point index, arrays, sbatch calls, and the texts shown."""

    directory: Path
    job_ids: dict[int, str] = field(default_factory=dict)
    arrays: list[dict[str, Any]] = field(default_factory=list)
    scripts: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    dry_run: bool = False
    local_failures: int = 0
    ran_here: bool = False  # the executor ran the work in this process (no scheduler)
    logs: dict[int, dict[str, str]] = field(default_factory=dict)
    waiting: list[int] = field(default_factory=list)  # points that wait for a free submit slot
    limits: Any = None  # the SubmitLimits the governor read (scheduler/slurm/limits.py)
    pack: tuple[int, int] = (1, 1)  # points per task, points at once per task

    def to_json(self, profile: str) -> dict[str, Any]:
        """Return what a script reads (``--json``): the folder, each point's job id, the arrays, what waits."""
        return {
            "dir": str(self.directory.resolve()), "profile": profile, "dry_run": self.dry_run,
            "ran_here": self.ran_here, "failed_here": self.local_failures,
            "job_ids": {str(k): v for k, v in sorted(self.job_ids.items())},
            "arrays": [{"job_id": a.get("job_id"), "points": self._array_points(a)} for a in self.arrays],
            "waiting": list(self.waiting), "logs": {str(k): v for k, v in sorted(self.logs.items())},
            **({"scripts": list(self.scripts), "notes": list(self.notes)} if self.dry_run else {}),
        }

    def _array_points(self, array: dict[str, Any]) -> list[int]:
        """The point indexes of one array: its own list, else (the governor records a count) those whose job id
        is the array's (``123_4`` belongs to array ``123``)."""
        points = array.get("points")
        if isinstance(points, list):
            return [int(p) for p in points]
        array_id = str(array.get("job_id"))
        return [i for i, job in sorted(self.job_ids.items()) if str(job).split("_")[0] == array_id]

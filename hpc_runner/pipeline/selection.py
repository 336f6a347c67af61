"""Which point of a search is best: the rule, and what it reads.

A point can be chosen when it completed, its summary.json has a finite value of the metric, and its
run dir holds weights (model.pt or a checkpoint). Among those, ``mode: max`` takes the highest value,
``min`` the lowest; equal values go to the lowest point index (the order of the sweep file, or of the
trials), and the tie is said. A run stage is one point (its metric is optional). Nothing can be chosen
when no point qualifies: the decision then says, point by point, why not (state, cause, missing metric).

The metric is a key of each point's summary.json (``val_dice``: the final value of the trainer's
metric; ``best_metric``; ``final_loss``; ...); ``best_<metric_name>`` is the same as ``best_metric``,
as in ``hpc-runner collect``'s table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpc_runner.records.read import RecordError, read_json_record

MAX_LISTED = 8  # points named in a "nothing can be chosen" message


@dataclass
class Candidate:
    """One point of the search as the selection sees it."""

    index: int
    run_dir: Path
    params: dict[str, Any]
    state: str  # the point's state (COMPLETED, FAILED, ...)
    value: float | None = None
    cause: str | None = None  # why it failed (OUT_OF_MEMORY, ERROR: ...), for the message
    has_weights: bool = True
    summary: dict[str, Any] = field(default_factory=dict)  # its summary.json (completed points)

    @property
    def why_not(self) -> str | None:
        """Return why this point cannot be chosen (None: it can)."""
        if self.state != "COMPLETED":
            return f"{self.state}" + (f" ({self.cause})" if self.cause else "")
        if self.value is None:
            return "COMPLETED without the metric"
        if not self.has_weights:
            return "COMPLETED without weights (no model.pt or checkpoint)"
        return None


@dataclass
class Decision:
    """The choice (or why there is none), with every point considered."""

    metric: str | None
    mode: str
    chosen: Candidate | None
    why: str
    ties: list[int] = field(default_factory=list)
    candidates: list[Candidate] = field(default_factory=list)

    def to_record(self) -> dict[str, Any]:
        """Return what the pipeline record and choice.json keep of the decision."""
        c = self.chosen
        out: dict[str, Any] = {"metric": self.metric, "mode": self.mode, "why": self.why, "ties": self.ties,
                               "considered": [{"point": x.index, "state": x.state, "value": x.value,
                                               **({"not_chosen": x.why_not} if x.why_not else {})}
                                              for x in self.candidates]}
        if c is not None:
            out.update(point=c.index, run_dir=str(c.run_dir), params=c.params, value=c.value)
        return out


def metric_value(summary: dict[str, Any], metric: str | None) -> float | None:
    """Return the finite value of ``metric`` in a summary.json (``best_<name>`` means best_metric), else None."""
    if metric is None:
        return None
    value = summary.get(metric)
    name = summary.get("metric_name")
    if value is None and name and metric == f"best_{name}":
        value = summary.get("best_metric")
    if value is None and name and metric == f"final_{name}":
        value = summary.get("final_metric")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def read_summary(run_dir: Path) -> dict[str, Any]:
    """Return a run dir's summary.json (empty when absent or unreadable)."""
    try:  # bounded, a regular file only: a point's summary.json may be anything in a shared folder
        return read_json_record(Path(run_dir) / "summary.json", "run summary") or {}
    except RecordError:
        return {}


def has_weights(run_dir: Path) -> bool:
    """Return True when the run dir holds weights a consumer can load (model.pt or a checkpoint)."""
    run_dir = Path(run_dir)
    return (run_dir / "model.pt").is_file() or any((run_dir / "checkpoints").glob("ckpt_*.pt"))


def decide(candidates: list[Candidate], metric: str | None, mode: str = "max") -> Decision:
    """Return the best candidate by ``metric`` (``mode`` max|min; ties to the lowest index), or why none."""
    ok = [c for c in candidates if c.why_not is None or (metric is None and c.state == "COMPLETED" and c.has_weights)]
    if not ok:
        return Decision(metric, mode, None, _nothing(candidates, metric), candidates=candidates)
    if metric is None:  # one run: it is the choice when it completed with weights
        best = min(ok, key=lambda c: c.index)
        return Decision(metric, mode, best, f"point {best.index} completed (no metric to compare)",
                        candidates=candidates)
    sign = 1.0 if mode == "max" else -1.0
    top = max(sign * (c.value or 0.0) for c in ok)
    tied = sorted(c.index for c in ok if sign * (c.value or 0.0) == top)
    best = next(c for c in ok if c.index == tied[0])
    others = [c for c in ok if c.index != best.index]
    runner_up = max(others, key=lambda c: sign * (c.value or 0.0), default=None)
    why = f"{metric} {best.value:.6g} is the {mode} of {len(ok)} point(s) that completed"
    if runner_up is not None and runner_up.index not in tied:
        why += f" (next: point {runner_up.index}, {runner_up.value:.6g})"
    if len(tied) > 1:
        why += f"; points {', '.join(map(str, tied))} tie, the lowest index is taken"
    left_out = [c for c in candidates if c not in ok]
    if left_out:
        why += f"; {len(left_out)} point(s) could not be chosen: " + _listed(left_out)
    return Decision(metric, mode, best, why, tied if len(tied) > 1 else [], candidates)


def _listed(points: list[Candidate]) -> str:
    shown = [f"point {c.index} {c.why_not}" for c in points[:MAX_LISTED]]
    more = f" and {len(points) - MAX_LISTED} more" if len(points) > MAX_LISTED else ""
    return "; ".join(shown) + more


def _nothing(candidates: list[Candidate], metric: str | None) -> str:
    if not candidates:
        return "the stage has no points"
    what = f"with a value of {metric}" if metric else "with weights"
    return f"no point completed {what}: " + _listed(candidates)

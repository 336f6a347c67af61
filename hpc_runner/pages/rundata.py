"""What a report needs from one run dir: run.yaml, config.yaml, summary.json, metrics.jsonl, overrides.yaml."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpc_runner.pages.bottleneck import analyse
from hpc_runner.records.metrics_log import read_metrics
from hpc_runner.records.read import RecordError, read_json_record
from hpc_runner.records.rundir import CONFIG_FILE, METRICS_FILE, OVERRIDES_FILE, RUN_FILE, SUMMARY_FILE, RunDir

RECORD_KEYS = ("kind", "step", "epoch", "batch")


def as_float(value: Any) -> float | None:
    """Return ``value`` as a float ("nan"/"inf" strings from metrics.jsonl included), or None."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


@dataclass
class RunData:
    """One run dir, read: its record, resolved config, summary, metric records by kind and overrides."""

    path: Path
    record: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    iters: list[dict[str, Any]] = field(default_factory=list)
    vals: list[dict[str, Any]] = field(default_factory=list)
    epochs: list[dict[str, Any]] = field(default_factory=list)
    overrides: list[dict[str, Any]] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """Return the bundle name (or the folder name)."""
        return str((self.record.get("bundle") or {}).get("name") or self.path.name)

    @property
    def status(self) -> str:
        """Return run.yaml's status (``unknown`` without one)."""
        return str(self.record.get("status") or "unknown")

    @property
    def metric_name(self) -> str | None:
        """Return the validation metric's name: summary.json's, else the first value key of a val record."""
        if self.summary.get("metric_name"):
            return str(self.summary["metric_name"])
        for rec in self.vals:
            for key in rec:
                if key not in RECORD_KEYS:
                    return key
        return None

    def metric_series(self) -> tuple[list[int], list[float]]:
        """Return (epoch number from 1, value) of every validation."""
        name = self.metric_name
        xs, ys = [], []
        for rec in self.vals:
            value = as_float(rec.get(name)) if name else None
            if value is not None:
                xs.append(int(rec.get("epoch", 0)) + 1)
                ys.append(value)
        return xs, ys

    @property
    def final_metric(self) -> float | None:
        """Return summary.json's final metric, else the last validation seen (a run still going)."""
        value = as_float(self.summary.get("final_metric"))
        if value is not None:
            return value
        _, ys = self.metric_series()
        return ys[-1] if ys else None

    def bottleneck(self) -> dict[str, Any] | None:
        """Return summary.json's bottleneck report, or one computed from the iterations logged so far."""
        report = self.summary.get("bottleneck")
        if isinstance(report, dict) and report.get("verdict"):
            return report
        data_s, compute_s = self.step_times()
        if not data_s:
            return None

        return analyse(data_s, compute_s).to_dict()

    def step_times(self) -> tuple[list[float], list[float]]:
        """Return the per-iteration data-wait and compute seconds."""
        data_s = [as_float(r.get("data_s")) or 0.0 for r in self.iters]
        compute_s = [as_float(r.get("compute_s")) or 0.0 for r in self.iters]
        return data_s, compute_s

    def losses(self) -> tuple[list[int], list[float]]:
        """Return (step, loss) of every finite iteration loss."""
        xs, ys = [], []
        for rec in self.iters:
            loss = as_float(rec.get("loss"))
            if loss is not None and math.isfinite(loss):
                xs.append(int(rec.get("step", len(xs) + 1)))
                ys.append(loss)
        return xs, ys


def _read_json(path: Path) -> dict[str, Any]:
    try:  # bounded, a regular file only (a named pipe would block the report)
        return read_json_record(path, path.name) or {}
    except RecordError:
        return {}


def _read_yaml(rd: RunDir, name: str) -> Any:
    try:
        return rd.read_yaml(name)
    except Exception:  # a hand-edited or half-written YAML file must not stop a report
        return None


def load_run(path: str | Path) -> RunData:
    """Read a run dir; missing or half-written files give empty parts, never an error."""
    rd = RunDir(path)
    data = RunData(Path(path))
    record = _read_yaml(rd, RUN_FILE)
    data.record = record if isinstance(record, dict) else {}
    overrides = _read_yaml(rd, OVERRIDES_FILE)
    data.overrides = [o for o in overrides if isinstance(o, dict)] if isinstance(overrides, list) else []
    config = _read_yaml(rd, CONFIG_FILE)
    data.config = config if isinstance(config, dict) else {}
    data.summary = _read_json(rd.file(SUMMARY_FILE))
    buckets = {"iter": data.iters, "val": data.vals, "epoch": data.epochs}
    for rec in read_metrics(rd.file(METRICS_FILE)):
        bucket = buckets.get(rec.get("kind")) if isinstance(rec, dict) else None
        if bucket is not None:
            bucket.append(rec)
    return data

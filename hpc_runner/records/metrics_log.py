"""``metrics.jsonl``: one JSON object per line, appended and flushed as training goes."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hpc_runner.records.atomic import write_text_atomic
from hpc_runner.records.read import read_json_lines

METRICS_NAME = "metrics.jsonl"


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


class MetricsLog:
    """Append-only metrics file; a no-op when ``path`` is None (e.g. ranks other than 0).

    ``sinks`` (TensorBoard, MLflow: hpc_runner/tracking/sinks.py) get every record too. A sink that raises is
    dropped with one line of explanation: tracking must never stop training, and the file keeps everything.
    """

    def __init__(self, path: Path | None, sinks: Sequence[Any] = ()) -> None:
        self.path = path
        self._f = None
        self.sinks = list(sinks)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._f = open(path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 - closed in close()

    def write(self, record: dict[str, Any]) -> None:
        """Append one record as a line (and hand it to the sinks)."""
        if self._f is not None:
            self._f.write(json.dumps({k: _clean(v) for k, v in record.items()}) + "\n")
        for sink in list(self.sinks):
            try:
                sink.write(record)
            except Exception as exc:
                self._drop(sink, exc)

    def _drop(self, sink: Any, exc: BaseException) -> None:
        self.sinks.remove(sink)
        print(f"hpc-runner: {type(sink).__name__} stopped logging ({type(exc).__name__}: {exc}); "
              f"{METRICS_NAME} keeps every record", file=sys.stderr, flush=True)

    def close(self) -> None:
        """Flush and close the file and the sinks."""
        if self._f is not None:
            self._f.close()
            self._f = None
        for sink in self.sinks:
            try:
                sink.close()
            except Exception as exc:
                print(f"hpc-runner: closing {type(sink).__name__} failed ({type(exc).__name__}: {exc})",
                      file=sys.stderr, flush=True)
        self.sinks = []


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Read metrics.jsonl: a last line cut short by a crash is dropped quietly, damaged lines are named."""
    import warnings

    lines = read_json_lines(path, "metrics file")
    if lines.damaged:
        warnings.warn(lines.describe(path), stacklevel=2)
    return lines.records


def truncate_after_step(path: Path, step: int) -> None:
    """Drop records after ``step`` (work redone after a resume), rewriting the file atomically."""
    records = read_metrics(path)
    kept = [r for r in records if r.get("step", 0) <= step]
    if len(kept) != len(records):
        write_text_atomic(path, "".join(json.dumps(r) + "\n" for r in kept))

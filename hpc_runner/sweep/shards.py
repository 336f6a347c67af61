"""Sharded inference/evaluation: N array tasks, each the bundle with ``shard_index=i, num_shards=N``.

A sharded submission is a sweep over ``shard_index`` (so ``status``, ``resume``, ``cancel`` and
``collect`` work unchanged); the shards share one ``predictions_dir`` in the sweep dir, and
``collect`` merges each shard's per-case table (``cases.csv`` in its run dir) into one.
"""

from __future__ import annotations

import csv
import io
import math
import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpc_runner.config.bundle_config import BundleConfig, apply_overrides, config_value
from hpc_runner.config.overrides import Override
from hpc_runner.errors import UserError
from hpc_runner.records.atomic import write_text_atomic
from hpc_runner.records.read import read_record_text

SHARD_IDS = ("shard_index", "num_shards")
PREDICTIONS_ID = "predictions_dir"
PREDICTIONS_FOLDER = "predictions"
CASES_CSV = "cases.csv"  # a shard's per-case table in its run dir (written by hpc_runner.inference)
CASES_MD = "cases.md"
NOT_METRICS = ("case", "shard", "file", "size", "sha256")  # the other columns of cases.csv are metrics
SOURCE = "submit --shards"


def check_shardable(cfg: BundleConfig, shards: int) -> None:
    """Raise UserError unless the config has the ids a shard is told its part by and ``shards`` >= 1."""
    if shards < 1:
        raise UserError(f"--shards {shards} is not a number of shards", expected="--shards N with N >= 1")
    missing = [i for i in SHARD_IDS if config_value(cfg, i, _MISSING) is _MISSING]
    if missing:
        files = ", ".join(str(f) for f in cfg.config_files)
        raise UserError(
            f"--shards needs the ids {' and '.join(SHARD_IDS)} in the config, and it has no {', '.join(missing)}",
            where=files,
            expected="a config whose datalist takes its part from @shard_index and @num_shards "
            "(hpc_runner.inference.inference_datalist does; see bundles/synthetic_seg/configs/inference.yaml)",
        )


_MISSING = object()


def shard_overrides(cfg: BundleConfig, shards: int, sweep_dir: Path) -> dict[str, Any]:
    """Set ``num_shards`` (and a shared ``predictions_dir`` when the config has one) on the base config."""
    values: dict[str, Any] = {"num_shards": shards}
    if config_value(cfg, PREDICTIONS_ID, _MISSING) is not _MISSING:
        # every shard writes into one folder: the user gets one set of outputs, not N
        values[PREDICTIONS_ID] = str((sweep_dir / PREDICTIONS_FOLDER).resolve())
    apply_overrides(cfg, [Override(k, v, "hpc-runner", SOURCE) for k, v in values.items()], os.environ)
    return values


@dataclass
class MergedCases:
    """Every shard's cases in one table, and what is missing or repeated."""

    columns: list[str]
    rows: list[dict[str, str]]
    missing: list[tuple[int, Path]] = field(default_factory=list)  # (shard, run dir) without cases.csv
    repeated: list[tuple[str, list[int]]] = field(default_factory=list)  # (case, shards that have it)

    def means(self) -> dict[str, float]:
        """Return the mean of every numeric metric column over the cases that have a value."""
        out: dict[str, float] = {}
        for col in self.columns:
            values = [_number(r.get(col)) for r in self.rows]
            numbers = [v for v in values if v is not None]
            if col not in NOT_METRICS and numbers:
                out[col] = statistics.fmean(numbers)
        return out


def _number(text: str | None) -> float | None:
    try:
        value = float(text) if text not in (None, "") else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


def merge_cases(run_dirs: list[tuple[int, Path]]) -> MergedCases:
    """Merge ``cases.csv`` of each (shard, run dir) into one table sorted by case."""
    columns: list[str] = ["case", "shard"]
    rows: list[dict[str, str]] = []
    seen: dict[str, list[int]] = {}
    missing = []
    for shard, run_dir in run_dirs:
        path = run_dir / CASES_CSV
        text = read_record_text(path, "cases table") if path.is_file() else None
        if text is None:
            missing.append((shard, run_dir))
            continue
        for row in csv.DictReader(io.StringIO(text, newline="")):
            for col in row:
                if col not in columns:
                    columns.append(col)
            seen.setdefault(row.get("case", ""), []).append(shard)
            rows.append({**row, "shard": str(shard)})
    rows.sort(key=lambda r: (r.get("case", ""), int(r["shard"])))
    repeated = [(case, shards) for case, shards in sorted(seen.items()) if len(shards) > 1]
    return MergedCases(columns, rows, missing, repeated)


def write_cases(merged: MergedCases, out_dir: Path) -> tuple[Path, Path]:
    """Write the merged table as cases.csv and cases.md (atomically) into ``out_dir``."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, merged.columns, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    writer.writerows(merged.rows)
    csv_path = write_text_atomic(out_dir / CASES_CSV, buf.getvalue())
    lines = ["| " + " | ".join(merged.columns) + " |", "|" + "|".join("---" for _ in merged.columns) + "|"]
    lines += ["| " + " | ".join(_cell(r.get(c)) for c in merged.columns) + " |" for r in merged.rows]
    means = merged.means()
    if means:
        lines += ["", "mean over cases: " + ", ".join(f"{k} {v:.4g}" for k, v in means.items())]
    md_path = write_text_atomic(out_dir / CASES_MD, "\n".join(lines) + "\n")
    return csv_path, md_path


def _cell(value: str | None) -> str:
    number = _number(value)
    if number is not None and value and any(ch in value for ch in ".eE"):
        return f"{number:.4g}"
    return (value or "").replace("|", "\\|")

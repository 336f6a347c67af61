"""Collect a sweep's results into one table: results.csv and results.md (one row per point).

A point's figures come from the sweep's results file (jobs/results.py: one line per point that ended, appended
by its job) when it has a line of the point's current hand-off, else from the point's own summary.json and
data_io.json: at 10,000 points one read instead of 20,000 (and run.yaml's 10,000, jobs/states.py)."""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from hpc_runner.data.staging import shared_bytes_of
from hpc_runner.jobs import ledger as sr
from hpc_runner.jobs.results import SUMMARY_KEYS
from hpc_runner.jobs.states import DONE, PointState, failure_text
from hpc_runner.jobs.targets import Target
from hpc_runner.jobs.usage import point_usage
from hpc_runner.records.atomic import write_text_atomic
from hpc_runner.records.read import RecordError, read_json_record
from hpc_runner.records.rundir import SUMMARY_FILE
from hpc_runner.sweep.spec import format_cell

TEXT_COLUMNS = ("state", "cause", "job_id", "error", "resumed_with")  # left-aligned in results.md
SUMMARY_COLUMNS = tuple(k for k in SUMMARY_KEYS if k != "metric_name")  # epochs, steps, final_loss, ... wall_s


def _summary(run_dir: Path | str) -> dict[str, Any]:
    try:  # bounded, a regular file only: a point's summary.json may be anything in a shared sweep folder
        return read_json_record(os.path.join(run_dir, SUMMARY_FILE), "run summary") or {}  # a string, as usage.py
    except RecordError:
        return {}


def read_summaries(run_dirs: Iterable[Path | str]) -> dict[str, dict[str, Any]]:
    """Return each run dir's summary.json ({} where it has none), keyed by the run dir as a string: read while
    the scheduler answers the states' query (cli/targets/points_collect.py)."""
    out = {}
    for d in run_dirs:
        summary = _summary(d)
        out[str(d)] = {k: summary[k] for k in SUMMARY_KEYS if k in summary}  # not the per-epoch lists, 10,000 times
    return out


def summaries_of(target: Target) -> dict[str, dict[str, Any]]:
    """Return the summaries ``read_summaries`` reads of the points the sweep's results file has no line of (those
    it has, ``result_rows`` takes from their lines): what collect reads while the scheduler answers."""
    return read_summaries(target.run_dir(p) for p in target.points if target.results.of(p) is None)


# what each point's job used (jobs/usage.py), when the scheduler's answer is given
USAGE_COLUMNS = ("elapsed_s", "time_limit_s", "cpus", "cpu_efficiency", "max_rss_mb", "mem_request_mb", "gpu_util",
                 "gpu_mem_mb")


def result_rows(target: Target, states: list[PointState], answer: Any = None,
                used: dict[int, Any] | None = None,
                summaries: Mapping[str, dict[str, Any]] | None = None) -> tuple[list[str], list[dict[str, Any]]]:
    """Return the column names and one row per point (params, state, metrics, wall time, job id; with the
    scheduler's ``answer``, what its job used: elapsed against the limit, CPU efficiency, memory; ``used``:
    each point's usage when the caller has it already; ``summaries``: the run dirs' summaries, read already)."""
    params = target.param_ids
    rows: list[dict[str, Any]] = []
    metric_names: list[str] = []
    any_extra = any(s.extra for s in states)
    points = {p["index"]: p for p in target.points}
    for st in states:
        point = points.get(st.index)
        ended = target.results.of(point) if point is not None else None  # its line in the results file
        key = str(st.run_dir)
        if ended is not None:
            summary = ended.summary()
        else:
            summary = summaries[key] if summaries is not None and key in summaries else _summary(st.run_dir)
        name = summary.get("metric_name")
        if name and name not in metric_names:
            metric_names.append(name)
        row: dict[str, Any] = {"point": st.index}
        effective = {**st.params, **st.extra}
        row.update({p: effective.get(p) for p in params})
        if any_extra:
            row["resumed_with"] = " ".join(f"{k}={format_cell(v)}" for k, v in st.extra.items())
        row["state"] = st.state
        row["cause"] = st.cause_kind
        for col in SUMMARY_COLUMNS:
            value = summary.get(col)
            if col in ("final_metric", "best_metric") and name:
                row[col.replace("metric", name).replace("final_", "")] = value
            else:
                row[col] = value
        row["elapsed"] = st.elapsed
        if ended is not None:  # what data_io.json said when the point ended
            shared: int | None = ended.shared_bytes
        elif st.run_dir:
            shared = shared_bytes_of(Path(st.run_dir))  # data_io.json (data/staging.py)
        else:
            shared = None
        if shared is not None:
            row["shared_mb"] = round(shared / 1e6, 1)
        if answer is not None:
            usage = (used[st.index] if used is not None and st.index in used else point_usage(st, answer)).to_json()
            row.update({c: usage.get(c) for c in USAGE_COLUMNS})
        row["job_id"] = st.job_id
        row["requeues"] = st.requeues
        row["run_dir"] = str(st.run_dir)
        row["error"] = (failure_text(st, target.job_logs) or None) if st.state != DONE and st.failed else None
        rows.append(row)
    columns = ["point", *params, *(["resumed_with"] if any_extra else []), "state", "cause"]
    for col in SUMMARY_COLUMNS:
        if col in ("final_metric", "best_metric"):
            names = metric_names or ["metric"]
            columns += [col.replace("metric", n).replace("final_", "") for n in names]
        else:
            columns.append(col)
    shared_mb = ["shared_mb"] if any("shared_mb" in r for r in rows) else []  # MB read from shared storage
    columns += ["elapsed", *shared_mb, *(USAGE_COLUMNS if answer is not None else ()),
                "job_id", "requeues", "run_dir", "error"]
    for row in rows:
        for c in columns:
            row.setdefault(c, None)
    return columns, rows


_PLAIN = (str, int, float)  # exact types: bool is an int but is written as true/false


def _csv_value(value: Any) -> Any:
    """A cell as csv.writer takes it: str, int and float as they are (it writes them as str() does)."""
    if value is None:
        return ""
    if type(value) in _PLAIN:
        return value
    if isinstance(value, dict | list | bool):
        return format_cell(value)
    return str(value)


def _md_value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    if type(value) is int:
        return str(value)
    text = format_cell(value) if isinstance(value, dict | list | bool) else str(value)
    return text.replace("|", "\\|").replace("\n", " ") if "|" in text or "\n" in text else text


def write_results(
    target: Target, columns: list[str], rows: list[dict[str, Any]], out_dir: Path | None = None
) -> tuple[Path, Path]:
    """Write results.csv and results.md atomically into ``out_dir`` (default: the sweep dir)."""
    out_dir = Path(out_dir) if out_dir else target.path
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_csv_value(row[c]) for c in columns])
    csv_path = write_text_atomic(out_dir / sr.RESULTS_CSV, buf.getvalue())
    md_columns = [c for c in columns if c != "run_dir"]
    lines = [
        "| " + " | ".join(md_columns) + " |",
        "|"
        + "|".join("---" if c in TEXT_COLUMNS else "---:" for c in md_columns)
        + "|",
    ]
    lines += ["| " + " | ".join(_md_value(row[c]) for c in md_columns) + " |" for row in rows]
    md_path = write_text_atomic(out_dir / sr.RESULTS_MD, "\n".join(lines) + "\n")
    return csv_path, md_path

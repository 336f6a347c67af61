"""The chain of a pipeline in one page: the stages, the search table, the chosen point, its test metrics, the
predictions and the exported file (``collect DIR`` writes pipeline.md and pipeline.json, ``report DIR``
report.html with each stage's own report linked).

Each search stage's results.csv/results.md, each sharded stage's merged cases.csv/cases.md are written
into the stage's folder, as ``collect`` does for them alone.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from hpc_runner.pipeline import record as pr
from hpc_runner.pipeline.model import StageView
from hpc_runner.pipeline.view import render, view
from hpc_runner.records.atomic import write_text_atomic
from hpc_runner.records.json_out import dumps_json
from hpc_runner.records.read import read_record_text
from hpc_runner.sweep.collect import result_rows, write_results
from hpc_runner.sweep.shards import PREDICTIONS_FOLDER, merge_cases, write_cases

SUMMARY_MD = "pipeline.md"
SUMMARY_JSON = "pipeline.json"
REPORT_HTML = "report.html"
MAX_ROWS = 50


def chain(directory: str | Path) -> tuple[pr.PipelineRecord, list[StageView], dict[str, Any]]:
    """Return the record, the stage views and the chain: per stage what it gave (tables written into its folder)."""
    record, views = view(directory)
    out: dict[str, Any] = {"pipeline": str(record.path), "stages": []}
    for v in views:
        entry: dict[str, Any] = {**v.to_json(), **v.kind.chain_entry(record, v)}
        out["stages"].append(entry)
    return record, views, out


def search_table(v: StageView) -> dict[str, Any]:
    """Write a search stage's results.csv and results.md into its folder (as ``collect``); return where they are."""
    columns, rows = result_rows(v.target, v.points)
    csv_path, md_path = write_results(v.target, columns, rows)
    return {"results_csv": str(csv_path), "results_md": str(md_path)}


def predictions(v: StageView) -> dict[str, Any]:
    """Return a sharded stage's predictions, and its shards' cases merged (cases.csv written into its folder)."""
    shards = [(int(p.params.get("shard_index", p.index)), p.run_dir) for p in v.points]
    merged = merge_cases(shards)
    out: dict[str, Any] = {"predictions": str(v.folder / PREDICTIONS_FOLDER)}
    folder = v.folder / PREDICTIONS_FOLDER
    out["files"] = sorted(str(p.relative_to(folder)) for p in folder.glob("*.nii*")) if folder.is_dir() else []
    if merged.rows or merged.missing:
        csv_path, _ = write_cases(merged, v.folder)
        out.update(cases_csv=str(csv_path), cases=len(merged.rows),
                   shards_without_cases=[s for s, _ in merged.missing], means=merged.means())
    return out


def markdown(record: pr.PipelineRecord, views: list[StageView], data: dict[str, Any]) -> str:
    """Return pipeline.md: the stage table, then what each stage gave."""
    lines = [f"# pipeline {record.path}", "", "```", render(record, views), "```", ""]
    for entry in data["stages"]:
        lines.append(f"## {entry['stage']} ({entry['kind']}): {entry['state']}")
        if entry.get("results_md"):
            table = (read_record_text(Path(entry["results_md"]), "results table") or "").splitlines()
            lines += table[: MAX_ROWS + 2]
            if len(table) > MAX_ROWS + 2:
                lines.append(f"... {len(table) - MAX_ROWS - 2} more rows in {entry['results_md']}")
        chosen = entry.get("chosen")
        if chosen:
            params = " ".join(f"{k}={v}" for k, v in (chosen.get("params") or {}).items()) or "-"
            lines += [f"- chosen: point {chosen.get('point')} of {chosen.get('from')} ({params})",
                      f"- {chosen.get('metric') or 'completion'} ({chosen.get('mode')}): {chosen.get('value')}",
                      f"- why: {chosen.get('why')}", f"- run dir: {chosen.get('run_dir')}"]
        if entry.get("results"):
            lines.append(f"- results: {entry['results']} ({entry['summary']})")
        if entry.get("predictions"):
            lines.append(f"- predictions: {entry['predictions']} ({len(entry.get('files') or [])} file(s))")
            if entry.get("cases_csv"):
                means = ", ".join(f"{k} {v:.4g}" for k, v in (entry.get("means") or {}).items())
                lines.append(f"- cases: {entry['cases']} in {entry['cases_csv']}"
                             + (f"; mean {means}" if means else ""))
        if "exported" in entry:
            lines.append(f"- exported: {entry['exported'] or 'not yet'}")
        if entry.get("cause"):
            lines.append(f"- cause: {entry['cause'].get('kind')}: {entry['cause'].get('message')}")
        if entry.get("detail") and not (chosen or entry.get("results")):
            lines.append(f"- {entry['detail']}")
        lines.append("")
    return "\n".join(lines)


def write_chain(directory: str | Path, out_dir: str | Path | None = None) -> tuple[str, Path, Path]:
    """Write pipeline.md and pipeline.json (atomically); return the Markdown and both paths."""
    record, views, data = chain(directory)
    text = markdown(record, views, data)
    folder = Path(out_dir) if out_dir else record.path
    md = write_text_atomic(folder / SUMMARY_MD, text)
    js = write_text_atomic(folder / SUMMARY_JSON, dumps_json(data, indent=2, default=str) + "\n")
    return text, md, js


def write_report(directory: str | Path) -> tuple[Path, list[Path]]:
    """Write each search and run stage's own report, then DIR/report.html: the chain with links to them."""
    record, views, data = chain(directory)
    linked: dict[str, Path] = {}
    for v in views:
        page = v.kind.report(v)  # a search, run or sharded stage's own report (its folder's)
        if page is not None:
            linked[v.name] = page
    body = [f"<h1>pipeline {html.escape(str(record.path))}</h1>", "<pre>" + html.escape(render(record, views))
            + "</pre>"]
    md = markdown(record, views, data).split("\n", 2)[2]
    for name, page in linked.items():
        rel = page.resolve().relative_to(record.path.resolve()) if page.resolve().is_relative_to(
            record.path.resolve()) else page.resolve()
        body.append(f'<p><a href="{html.escape(str(rel))}">{html.escape(name)}: its own report</a></p>')
    body.append("<pre>" + html.escape(md) + "</pre>")
    page = ("<!doctype html><html><head><meta charset='utf-8'><title>pipeline</title></head><body>"
            + "\n".join(body) + "</body></html>\n")
    out = write_text_atomic(record.path / REPORT_HTML, page)
    return out, list(linked.values())

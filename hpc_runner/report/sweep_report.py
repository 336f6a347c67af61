"""The report of a sweep dir: plots/*.png and report.html (plots, the sortable results table, links)."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

from hpc_runner.data.staging import shared_bytes_of
from hpc_runner.jobs.states import cause_counts, counts
from hpc_runner.pages import page
from hpc_runner.pages.page import Cell, value_cell
from hpc_runner.pages.run_report import PLOTS_DIR, REPORT_FILE, Report, report_run
from hpc_runner.records.atomic import write_text_atomic
from hpc_runner.report import sweep_plots as sp
from hpc_runner.report.status_table import scheduler_note, states_source
from hpc_runner.report.sweep_plots import cell
from hpc_runner.report.sweepdata import SweepData, load_sweep
from hpc_runner.sweep.right_size import for_target, suggested_for
from hpc_runner.tune.summary import render, summarize, trial_table

HIDDEN_COLUMNS = ("run_dir",)


def write_sweep_plots(sweep: SweepData, folder: Path) -> list[tuple[Path, bytes, str]]:
    """Write the sweep's PNGs into ``folder``; return (path, PNG bytes, caption) of each."""
    jobs = [
        ("loss_overlay.png", sp.plot_loss_overlay, "training loss of every point, overlaid"),
        ("metric_vs_params.png", sp.plot_metric_vs_params, "final metric against each swept id (line: mean)"),
    ]
    if len(sweep.param_ids) == 2:
        jobs.append(("heatmap.png", sp.plot_heatmap, "final metric over the grid of the two swept ids"))
    jobs += [
        ("states.png", sp.plot_states, "how many points are in each state"),
        ("time_split.png", sp.plot_time_split, "each point's time: computing, waiting for data, the rest"),
        ("usage.png", sp.plot_usage, "what each point's job asked for against what it used: CPUs, memory, time"),
    ]
    if len(sweep.param_ids) != 2:
        (folder / "heatmap.png").unlink(missing_ok=True)  # left by an earlier report, it would mislead
    return [(folder / name, plot(sweep, folder / name), caption) for name, plot, caption in jobs]


def point_overrides(sweep: SweepData, state: Any) -> str:
    """Return the point's overrides as command-line options (``--optimizer::lr 0.001 --seed 1``)."""
    return " ".join(f"--{k} {shlex.quote(cell(v))}" for k, v in sweep.effective(state).items())


def _state_class(state: Any) -> str:
    return "state-COMPLETED" if state.state == "COMPLETED" else ("state-failed" if state.failed else "")


def results_table(sweep: SweepData) -> str:
    """Return the sortable results table: collect's columns, a link to each run dir and the point's overrides."""
    columns = [c for c in sweep.columns if c not in HIDDEN_COLUMNS]
    by_index = {st.index: st for st in sweep.states}
    rows = []
    for row in sweep.rows:
        st = by_index[row["point"]]
        links = [page.link(st.run_dir, sweep.path, os.path.relpath(st.run_dir, sweep.path))]
        if (st.run_dir / REPORT_FILE).is_file():
            links.append(page.link(st.run_dir / REPORT_FILE, sweep.path, "report"))
        cells = [value_cell(row.get(c)) for c in columns]
        cells[columns.index("state")].cls = _state_class(st)
        cells.insert(1, Cell(raw_html=" ".join(links), sort=str(st.run_dir)))
        cells.append(Cell(point_overrides(sweep, st), cls="overrides"))
        rows.append(cells)
    names = [columns[0], "run dir", *columns[1:], "overrides"]
    return '<div class="scroll">' + page.table(names, rows, "results") + "</div>"


def sweep_page(sweep: SweepData, plots: list[tuple[Path, bytes, str]]) -> str:
    """Return the HTML page of a sweep."""
    data = sweep.target.record.data
    title = f"sweep {sweep.path.name} of {sweep.bundle}"
    c = counts(sweep.states)
    count_text = ", ".join(f"{state} {n}" for state, n in sorted(c.items(), key=lambda kv: (-kv[1], kv[0])))

    profile = (data.get("cluster") or {}).get("profile", "?")
    parts = [
        f"<h1>{page.esc(title)}</h1>",
        f'<p class="meta">{page.esc(sweep.path.resolve())}</p>',
        f'<p class="meta">{len(sweep.states)} points over {page.esc(", ".join(sweep.param_ids) or "no ids")}; '
        f"created {page.esc(_when(data.get('created')))}; profile {page.esc(profile)}.</p>",
        f'<p class="meta">{page.esc(count_text)} (states from {page.esc(states_source(sweep.answer))}).</p>',
    ]
    causes = cause_counts(sweep.states)
    if causes:
        ordered = sorted(causes.items(), key=lambda kv: (-kv[1], kv[0]))
        parts.append(f'<p class="warn">Failed points by cause: {page.esc(", ".join(f"{k} {n}" for k, n in ordered))}'
                     "; the results table's cause and error columns say which and why.</p>")
    note = scheduler_note(sweep.answer)
    if note:
        parts.append(f'<p class="note">{page.esc(note[0].upper() + note[1:])}.</p>')
    parts += right_size_section(sweep)
    parts += shared_reads_section(sweep)
    files = [sweep.target.record.file, sweep.target.record.base_dir / "config.yaml"]
    files += [sweep.path / name for name in ("results.csv", "results.md")]
    links = [page.link(f, sweep.path, os.path.relpath(f, sweep.path)) for f in files if f.is_file()]
    parts.append("<p>Files: " + " &middot; ".join(links) + "</p>")
    if data.get("tune"):
        parts += tune_section(sweep.path)
    parts.append("<h2>Plots</h2>")
    parts += [page.image(png, path.stem, caption) for path, png, caption in plots]
    parts.append("<h2>Results</h2><p>Click a column header to sort by it (click again to reverse).</p>")
    parts.append(results_table(sweep))
    d = shlex.quote(str(sweep.path))
    parts.append(
        "<h2>Commands</h2><pre>"
        + page.esc(
            f"hpc-runner status {d} --all     # states, errors of failed points\n"
            f"hpc-runner collect {d}          # results.csv and results.md\n"
            f"hpc-runner resume {d}           # resubmit failed and missing points\n"
            f"hpc-runner resume {d} --cause TIMEOUT --scheduler-option time=...  # only the timed-out ones, longer\n"
            f"hpc-runner rerun {d}/points/NNNN  # run one point again, exactly, in a new dir"
        )
        + "</pre>"
    )
    return page.document(title, parts)


def shared_reads_section(sweep: SweepData) -> list[str]:
    """The bytes the sweep's points read from shared storage (data_io.json of each point: data/staging.py), summed."""
    each = [b for st in sweep.states if st.run_dir.is_dir() and (b := shared_bytes_of(st.run_dir)) is not None]
    if not each:
        return []
    total = sum(each)
    return [f'<p class="meta" id="shared-reads">Read from shared storage: {total / 1e6:.1f} MB over {len(each)} '
            f"point(s) ({total / len(each) / 1e6:.1f} MB a point; the results table's shared_mb column has each; "
            "--stage reads it once per node: docs/data-on-the-cluster.md).</p>"]


def _when(at: Any) -> str:
    """``2026-11-25T21:26:57+00:00`` -> ``2026-11-25 21:26:57`` (the offset is the reader's own)."""
    return str(at or "?").split("+")[0].replace("T", " ")


def right_size_section(sweep: SweepData) -> list[str]:
    """At the end of a sweep: what the next submission should ask for (sweep/right_size.py)."""
    if not suggested_for(sweep.target, sweep.states):
        return []
    s = for_target(sweep.target, sweep.states, sweep.answer)
    out = ['<h2>Right-size</h2>', f'<p class="right-size">{page.esc(s.line())}</p>']
    if s.changes:
        again = f"hpc-runner sweep ... --right-size {shlex.quote(str(sweep.path))}"
        out.append(f"<pre>{page.esc(again)}\n# or: {page.esc(' '.join(s.options()))}</pre>")
    return out


def tune_section(path: Path) -> list[str]:
    """The trials of a tune dir: counts, best so far, pruning per rung, importances and one row per trial."""
    summary = summarize(path)
    rows = [line.strip("|").split("|") for line in trial_table(summary).splitlines()]
    head, body = rows[0], rows[2:]
    table = ("<table><tr>" + "".join(f"<th>{page.esc(h.strip())}</th>" for h in head) + "</tr>"
             + "".join("<tr>" + "".join(f"<td>{page.esc(c.strip())}</td>" for c in r) + "</tr>" for r in body)
             + "</table>")
    return ["<h2>Tune</h2>", f"<pre>{page.esc(render(summary))}</pre>", table]


def report_sweep(path: str | Path, each_run: bool = False) -> Report:
    """Write the plots and report.html of the sweep dir ``path`` (and each point's own report if ``each_run``)."""
    sweep = load_sweep(path)
    pngs: list[Path] = []
    if each_run:
        for run in sweep.runs.values():
            pngs += report_run(run.path).pngs
    plots = write_sweep_plots(sweep, sweep.path / PLOTS_DIR)
    html_path = write_text_atomic(sweep.path / REPORT_FILE, sweep_page(sweep, plots))
    return Report(html_path, [p for p, _, _ in plots] + pngs, "sweep")

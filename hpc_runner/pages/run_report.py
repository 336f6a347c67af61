"""The report of one run dir: plots/*.png and report.html (summary, plots, overrides, environment, files)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpc_runner.pages import page
from hpc_runner.pages.rundata import RunData, load_run
from hpc_runner.records.atomic import write_text_atomic
from hpc_runner.records.rundir import (
    CONFIG_FILE,
    ERROR_FILE,
    LOG_FILE,
    METRICS_FILE,
    OVERRIDES_FILE,
    RUN_FILE,
    SUMMARY_FILE,
)
from hpc_runner.scheduler.job_env import job_summary

REPORT_FILE = "report.html"
PLOTS_DIR = "plots"
FILES = (CONFIG_FILE, OVERRIDES_FILE, RUN_FILE, LOG_FILE, METRICS_FILE, SUMMARY_FILE, ERROR_FILE, "model.pt")


@dataclass
class Report:
    """What a report wrote."""

    html: Path
    pngs: list[Path] = field(default_factory=list)
    kind: str = "run"


def write_run_plots(run: RunData, folder: Path) -> list[tuple[Path, bytes, str]]:
    """Write the run's PNGs into ``folder``; return (path, PNG bytes, caption) of each."""
    from hpc_runner.pages.run_plots import plot_curves, plot_timeline

    out = []
    path = folder / "loss.png"
    out.append((path, plot_curves(run, path), "training loss per iteration and per epoch; validation metric"))
    path = folder / "timeline.png"
    caption = "per iteration: time waiting for the next batch (orange) against computing the step (blue)"
    out.append((path, plot_timeline(run, path), caption))
    return out


def _summary_items(run: RunData) -> list[tuple[str, Any]]:
    s, r = run.summary, run.record
    items: list[tuple[str, Any]] = [("status", run.status), ("entry", r.get("entry"))]
    for key in ("created", "started", "ended"):
        items.append((key, r.get(key)))
    host = r.get("host") or {}
    items.append(("host", host.get("hostname")))
    items += [(k, s.get(k)) for k in ("epochs", "steps", "wall_s", "steps_per_s", "final_loss")]
    if run.metric_name:
        items += [(f"final {run.metric_name}", run.final_metric), (f"best {run.metric_name}", s.get("best_metric")),
                  ("best epoch", s.get("best_epoch"))]
    if s.get("resumed_from"):
        items.append(("resumed from", s.get("resumed_from")))
    return [(k, v) for k, v in items if v is not None]


def _bottleneck_html(run: RunData) -> str:
    report = run.bottleneck()
    if not report:
        return "<p>No iteration timed yet.</p>"
    text = (
        f"{report.get('verdict')}: waiting for data {report.get('wait_fraction', 0):.1%} of step time "
        f"({report.get('data_wait_s', 0):.2f} s waiting, {report.get('compute_s', 0):.2f} s computing over "
        f"{report.get('iterations')} iterations; first batch {1000 * (report.get('first_batch_s') or 0):.0f} ms)."
    )
    advice = "".join(f"<li>{page.esc(a)}</li>" for a in report.get("advice") or [])
    return f"<p>{page.esc(text)}</p>" + (f"<ul>{advice}</ul>" if advice else "")


def _error_html(run: RunData) -> str:
    err = run.record.get("error")
    if not isinstance(err, dict) or not (err.get("type") or err.get("message")):
        return ""
    at = f" (at id '{err['id']}')" if err.get("id") else ""
    tb = run.path / ERROR_FILE
    more = f" Traceback: {page.link(tb, run.path, ERROR_FILE)}." if tb.is_file() else ""
    return (
        f'<h2>Error</h2><p class="warn">{page.esc(err.get("type", "Error"))}: '
        f"{page.esc(err.get('message', ''))}{page.esc(at)}.{more}</p>"
    )


def _overrides_html(run: RunData) -> str:
    if not run.overrides:
        return "<p>No overrides.</p>"
    from hpc_runner.pages.page import Cell, value_cell

    rows = [
        [Cell(o.get("id")), value_cell(o.get("value")), Cell(o.get("source")), Cell(o.get("origin")),
         Cell(o.get("replaced"))]
        for o in run.overrides
    ]
    return page.table(["id", "value", "source", "origin", "replaced"], rows, "overrides")


def _environment_html(run: RunData) -> str:
    r = run.record
    versions = r.get("versions") or {}
    git = r.get("git") or {}
    parts = [page.key_values(sorted(versions.items()), "versions")] if versions else []
    if git:
        parts.append(page.key_values([(f"git {k}", v) for k, v in git.items()], "git"))
    job = job_summary(r.get("slurm") or {})  # the job's ids, nodes and CPUs, as the scheduler named them
    if job:
        parts.append(page.key_values(job, "slurm"))
    return "\n".join(parts) or "<p>Not recorded (the run has not started).</p>"


def run_page(run: RunData, plots: list[tuple[Path, bytes, str]]) -> str:
    """Return the HTML page of a run."""
    base = run.path
    title = f"{run.name} run {run.path.name}"
    parts = [f"<h1>{page.esc(title)}</h1>", f'<p class="meta">{page.esc(run.path.resolve())}</p>']
    rerun_of = run.record.get("rerun_of")
    if rerun_of:
        src = Path(str(rerun_of))
        parts.append(f'<p class="meta">Re-run of {page.link(src, base, src)}.</p>')
    parts.append("<h2>Summary</h2>" + page.key_values(_summary_items(run), "summary"))
    parts.append(_error_html(run))
    parts.append("<h2>Where the time went</h2>" + _bottleneck_html(run))
    from hpc_runner.pages.transforms import transforms_html  # per-transform chart and table (issue 12)

    parts.append(transforms_html(run))
    parts.append("<h2>Plots</h2>")
    parts += [page.image(png, path.stem, caption) for path, png, caption in plots]
    parts.append("<h2>Overrides</h2>" + _overrides_html(run))
    parts.append("<h2>Environment</h2>" + _environment_html(run))
    files = [page.link(base / f, base, f) for f in FILES if (base / f).is_file()]
    parts.append("<h2>Files</h2><p>" + " &middot; ".join(files) + "</p>")
    command = f"hpc-runner rerun {shlex.quote(str(run.path))}"
    parts.append(f"<h2>Run it again</h2><p>Exactly, into a new run dir: <code>{page.esc(command)}</code></p>")
    return page.document(title, parts)


def report_run(path: str | Path) -> Report:
    """Write the plots and report.html of the run dir ``path``."""
    run = load_run(path)
    plots = write_run_plots(run, run.path / PLOTS_DIR)
    html_path = write_text_atomic(run.path / REPORT_FILE, run_page(run, plots))
    return Report(html_path, [p for p, _, _ in plots], "run")

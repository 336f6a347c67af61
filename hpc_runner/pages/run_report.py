"""The report of one run dir: plots/*.png and report.html (summary, plots, overrides, environment, files)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpc_runner.pages import page
from hpc_runner.pages.bottleneck import wait_split
from hpc_runner.pages.hyperparams import key_hyperparams
from hpc_runner.pages.page import Cell, value_cell
from hpc_runner.pages.run_plots import plot_curves, plot_timeline
from hpc_runner.pages.rundata import RunData, load_run
from hpc_runner.pages.transforms import CHART_FILE as TRANSFORMS_FILE
from hpc_runner.pages.transforms import transform_rows, transforms_html, write_transforms_chart
from hpc_runner.pages.val_sample import CHART_FILE as SAMPLE_FILE
from hpc_runner.pages.val_sample import write_val_sample_chart
from hpc_runner.records.atomic import write_text_atomic
from hpc_runner.records.rundir import (
    CONFIG_FILE,
    ERROR_FILE,
    LOG_FILE,
    METRICS_FILE,
    OVERRIDES_FILE,
    RUN_FILE,
    SUMMARY_FILE,
    VAL_SAMPLE_FILE,
)
from hpc_runner.scheduler.job_env import recorded_job

REPORT_FILE = "report.html"
PLOTS_DIR = "plots"
FILES = (CONFIG_FILE, OVERRIDES_FILE, RUN_FILE, LOG_FILE, METRICS_FILE, SUMMARY_FILE, VAL_SAMPLE_FILE, ERROR_FILE,
         "model.pt")
LOSS_FILE, TIMELINE_FILE = "loss.png", "timeline.png"


@dataclass
class Report:
    """What a report wrote."""

    html: Path
    pngs: list[Path] = field(default_factory=list)
    kind: str = "run"


def write_run_plots(run: RunData, folder: Path) -> list[tuple[Path, bytes, str]]:
    """Write the run's PNGs into ``folder``; return (path, PNG bytes, caption) of each, every file written.

    The validation sample and the transform chart exist only for runs that have them; a file of either left
    by an earlier report is removed, so plots/ holds exactly what this report shows.
    """

    title = f"{run.name} - {run.path.name}"
    path = folder / LOSS_FILE
    out = [(path, plot_curves(run, path), "training loss per iteration and per epoch; validation metric")]
    sample = write_val_sample_chart(run.path, folder, title)
    path = folder / TIMELINE_FILE
    caption = "per iteration: time waiting for the next batch (orange) against computing the step (blue)"
    timeline = (path, plot_timeline(run, path), caption)
    transforms = write_transforms_chart(run, folder)
    for name, chart in ((SAMPLE_FILE, sample), (TIMELINE_FILE, timeline), (TRANSFORMS_FILE, transforms)):
        if chart is None:  # a run without validation or timed transforms: no stale file of an earlier report
            (folder / name).unlink(missing_ok=True)
        else:
            out.append(chart)
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
    split = wait_parts(run, report)
    if split is not None:
        text += (f" Of the data wait, {split[0]:.2f} s reading (file loads) and {split[1]:.2f} s transforming, "
                 "by the share of the file loads in the transforms' time.")
    advice = "".join(f"<li>{page.esc(a)}</li>" for a in report.get("advice") or [])
    return f"<p>{page.esc(text)}</p>" + (f"<ul>{advice}</ul>" if advice else "")


def wait_parts(run: RunData, report: dict[str, Any]) -> tuple[float, float] | None:
    """The data wait's (reading, transforming) seconds: the report's, or (an older summary) split here by the
    summary's transform timings; None when no transform was timed."""
    read, rest = report.get("data_read_s"), report.get("data_transform_s")
    if isinstance(read, (int, float)) and isinstance(rest, (int, float)):
        return float(read), float(rest)

    return wait_split(float(report.get("data_wait_s") or 0.0), transform_rows(run))


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
    job = recorded_job(r)  # the job's ids, nodes and CPUs, as its scheduler named them (an older run's too)
    if job.summary:
        parts.append(page.key_values(job.summary, job.name))
    return "\n".join(parts) or "<p>Not recorded (the run has not started).</p>"


def _hyperparams_html(run: RunData) -> str:

    rows = key_hyperparams(run.config, run.record.get("entry"))
    if not rows:
        return f"<p>None found ({CONFIG_FILE} is missing or names no trainer, learning rate or batch size).</p>"
    cells = [[page.Cell(r.name), page.Cell(r.value), page.Cell(r.where, cls="id")] for r in rows]
    return page.table(["", "value", f"where in {CONFIG_FILE}"], cells, "hyperparams", sortable=False)


def _sample_html(run: RunData, chart: tuple[Path, bytes, str] | None) -> str:
    if chart is not None:
        return page.image(chart[1], "validation sample", chart[2])
    if not run.vals:
        return "<p>No validation in this run, so no image, label and prediction to show.</p>"
    return (f"<p>No {VAL_SAMPLE_FILE} in this run dir (the validation's outputs are not images shaped like "
            "its labels, or the run was made by an older hpc-runner).</p>")


def run_page(run: RunData, plots: list[tuple[Path, bytes, str]]) -> str:
    """Return the HTML page of a run: results and set-up first, a validation sample, then where the time went."""
    base = run.path
    by_name = {path.name: (path, png, caption) for path, png, caption in plots}
    title = f"{run.name} run {run.path.name}"
    parts = [f"<h1>{page.esc(title)}</h1>", f'<p class="meta">{page.esc(run.path.resolve())}</p>']
    rerun_of = run.record.get("rerun_of")
    if rerun_of:
        src = Path(str(rerun_of))
        parts.append(f'<p class="meta">Re-run of {page.link(src, base, src)}.</p>')
    parts.append(_error_html(run))
    # what a reader comes for first: the curves, the figures and what was trained with what (issue 35)
    results = [page.image(by_name[LOSS_FILE][1], "loss", by_name[LOSS_FILE][2])] if LOSS_FILE in by_name else []
    results.append('<div class="columns"><div class="wide"><h3>Hyper-parameters</h3>' + _hyperparams_html(run)
                   + "</div><div><h3>Summary</h3>" + page.key_values(_summary_items(run), "summary") + "</div></div>")
    parts.append(page.section("results", "Results", results))
    parts.append(page.section("sample", "Validation sample", [_sample_html(run, by_name.get(SAMPLE_FILE))]))
    timeline = by_name.get(TIMELINE_FILE)
    profiling = [_bottleneck_html(run)]
    if timeline is not None:
        profiling.append(page.image(timeline[1], "timeline", timeline[2]))
    profiling.append(transforms_html(run, by_name.get(TRANSFORMS_FILE)))
    parts.append(page.section("profiling", "Where the time went", profiling))
    parts.append("<h2>Overrides</h2>" + _overrides_html(run))
    parts.append("<h2>Environment</h2>" + _environment_html(run))
    files = [page.link(base / f, base, f) for f in FILES if (base / f).is_file()]
    files += [page.link(path, base, f"{PLOTS_DIR}/{path.name}") for path, _, _ in plots]
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

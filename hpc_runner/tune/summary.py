"""What a tune dir has found: its trials, the best so far, the pruning decisions per rung, importances.

sweep.yaml says which trial ran where and how it ended; the Optuna journal holds the values each
trial reported at each validation (its rungs). Both are read, never written.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hpc_runner.jobs.ledger import SweepRecord
from hpc_runner.records.atomic import write_text_atomic
from hpc_runner.records.json_out import dumps_json
from hpc_runner.tune.settings import TuneSettings
from hpc_runner.tune.study import read_study

STATES = ("completed", "pruned", "failed", "running")


@dataclass
class Trial:
    """One trial: its Optuna number, point, parameters, how it ended, its value and its epochs."""

    number: int
    index: int
    params: dict[str, Any]
    state: str
    value: float | None
    epochs: int | None
    worker: int | None
    job_id: str | None
    dir: str


@dataclass
class Rung:
    """The trials that reported at one step (epochs trained), and how many were stopped there."""

    step: int
    reported: int
    pruned: int
    best: float | None
    worst_kept: float | None  # the weakest value at this step of a trial that went on (or completed)


@dataclass
class TuneSummary:
    """Trials, counts per state, the best trial, the rungs and the parameter importances."""

    metric: str
    direction: str
    budget: int
    trials: list[Trial]
    counts: dict[str, int]
    best: Trial | None
    rungs: list[Rung]
    importances: dict[str, float] = field(default_factory=dict)
    importance_note: str = ""
    epochs: int = 0

    def to_json(self) -> dict[str, Any]:
        """Return the summary as plain data (tune.json, status --json)."""
        return asdict(self)


def summarize(sweep_dir: str | Path) -> TuneSummary:
    """Read sweep.yaml and the journal of the tune dir ``sweep_dir``."""
    record = SweepRecord.load(Path(sweep_dir))
    settings = TuneSettings.from_record(record.data.get("tune"), where=str(Path(sweep_dir) / "sweep.yaml"))
    trials = [_trial(p) for p in record.points if p.get("trial") is not None]  # claimed by a worker
    study = _open(sweep_dir)
    frozen = study.get_trials(deepcopy=False) if study is not None else []
    counts = {s: sum(t.state == s for t in trials) for s in STATES}
    done = [t for t in trials if t.state == "completed" and t.value is not None]
    pick = max if settings.direction == "maximize" else min
    best = pick(done, key=lambda t: t.value) if done else None
    importances, note = _importances(study, len(done))
    return TuneSummary(
        metric=settings.metric,
        direction=settings.direction,
        budget=settings.trials,
        trials=trials,
        counts=counts,
        best=best,
        rungs=rungs(frozen, settings.direction),
        importances=importances,
        importance_note=note,
        epochs=sum(t.epochs or 0 for t in trials),
    )


def _trial(p: dict[str, Any]) -> Trial:
    return Trial(
        number=int(p.get("trial", p["index"])),
        index=int(p["index"]),
        params=dict(p.get("params") or {}),
        state=str(p.get("state") or "running"),
        value=p.get("value"),
        epochs=p.get("epochs"),
        worker=p.get("worker"),
        job_id=p.get("job_id"),
        dir=str(p.get("dir", "")),
    )


def _open(sweep_dir: str | Path) -> Any:
    return read_study(sweep_dir)  # read-only: no journal line, no lock (status --no-submit writes nothing)


def rungs(frozen: list[Any], direction: str) -> list[Rung]:
    """Return, per step where some trial was pruned, who reported there, who stopped and the bar they missed."""
    from optuna.trial import TrialState

    better = (lambda a, b: a > b) if direction == "maximize" else (lambda a, b: a < b)
    stopped: dict[int, list[Any]] = {}
    for t in frozen:
        if t.state == TrialState.PRUNED and t.intermediate_values:
            stopped.setdefault(max(t.intermediate_values), []).append(t)
    out = []
    for step in sorted(stopped):
        at = [t for t in frozen if step in t.intermediate_values]
        values = [t.intermediate_values[step] for t in at]
        kept = [t.intermediate_values[step] for t in at if t not in stopped[step]
                and (t.state != TrialState.PRUNED or max(t.intermediate_values) > step)]
        best = None
        for v in values:
            best = v if best is None or better(v, best) else best
        worst_kept = None
        for v in kept:
            worst_kept = v if worst_kept is None or better(worst_kept, v) else worst_kept
        out.append(Rung(step=step, reported=len(at), pruned=len(stopped[step]), best=best, worst_kept=worst_kept))
    return out


def _importances(study: Any, completed: int) -> tuple[dict[str, float], str]:
    if study is None:
        return {}, "no journal yet"
    if completed < 2:
        return {}, f"needs 2 completed trials ({completed} so far)"
    import optuna

    try:
        values = optuna.importance.get_param_importances(study)
    except (ValueError, RuntimeError) as exc:  # e.g. one parameter took a single value in every trial
        return {}, f"not computed: {exc}"
    return {k: round(float(v), 4) for k, v in values.items()}, "fANOVA over the completed trials"


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return json.dumps(value) if isinstance(value, (list, dict)) else str(value)


def render(summary: TuneSummary) -> str:
    """Return the summary as text (status, collect's tune.md)."""
    s = summary
    counts = ", ".join(f"{n} {state}" for state, n in s.counts.items() if n)
    lines = [f"tune: {len(s.trials)} of {s.budget} trial(s) started ({counts or 'none yet'}); "
             f"{s.epochs} epoch(s) trained in all; {s.direction} {s.metric}"]
    if s.best is not None:
        params = ", ".join(f"{k}={_fmt(v)}" for k, v in s.best.params.items())
        lines.append(f"best so far: trial {s.best.number} (point {s.best.index:04d}) {s.metric} "
                     f"{_fmt(s.best.value)} with {params}")
    else:
        lines.append("best so far: none (no trial completed yet)")
    if s.rungs:
        lines.append("pruning per rung (step = epochs trained):")
        for r in s.rungs:
            lines.append(f"  step {r.step}: {r.reported} reported, {r.pruned} pruned; best {_fmt(r.best)}, "
                         f"weakest kept {_fmt(r.worst_kept)}")
    else:
        lines.append("pruning per rung: no trial pruned")
    if s.importances:
        lines.append("parameter importance: " + ", ".join(f"{k} {v:.2f}" for k, v in s.importances.items()))
    else:
        lines.append(f"parameter importance: {s.importance_note}")
    return "\n".join(lines)


def trial_table(summary: TuneSummary) -> str:
    """Return one Markdown row per trial: trial, point, state, value, epochs, worker, params."""
    names = sorted({k for t in summary.trials for k in t.params})
    head = ["trial", "point", "state", summary.metric, "epochs", "worker", *names]
    rows = [[str(t.number), f"{t.index:04d}", t.state, _fmt(t.value), _fmt(t.epochs), _fmt(t.worker),
             *(_fmt(t.params.get(n)) for n in names)] for t in summary.trials]
    return "\n".join("| " + " | ".join(r) + " |" for r in [head, ["---"] * len(head), *rows])


def write_summary(summary: TuneSummary, folder: Path) -> tuple[Path, Path]:
    """Write tune.md and tune.json into ``folder`` atomically; return their paths."""
    md = write_text_atomic(folder / "tune.md", f"# Tune\n\n{render(summary)}\n\n{trial_table(summary)}\n")
    js = write_text_atomic(folder / "tune.json", dumps_json(summary.to_json(), indent=1, default=str) + "\n")
    return Path(md), Path(js)


def is_tune_dir(record: Any) -> bool:
    """Return True for a sweep record with a ``tune`` section."""
    return bool(record is not None and isinstance(getattr(record, "data", None), dict) and record.data.get("tune"))

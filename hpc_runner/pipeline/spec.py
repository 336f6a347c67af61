"""The pipeline file: its stages, their kinds and their inputs, checked before any config is loaded.

A pipeline file is YAML (or JSON)::

    bundle: bundles/synthetic_seg          # a folder, or a name on the search path
    overrides: {dataset_dir: /scratch/me/data}   # optional: every stage whose config has the id
    stages:
      - name: search
        sweep: ["learning_rate=1e-3,4e-3"]     # as --sweep (or tune: {space, trials, metric, ...})
        overrides: {max_epochs: 2}
      - name: best
        select: {from: search, metric: val_dice, mode: max}
      - name: test
        entry: evaluate                       # configs/evaluate.* of the bundle
        from: best                            # the chosen point's weights and values
      - name: predict
        entry: inference
        from: best
        shards: 2

A stage's kind is given by its one kind key: ``sweep`` or ``tune`` (a search), ``select`` (pick the best
point of a search or a run), ``entry`` alone (one run; with ``shards: N`` N array tasks), ``export``
(MONAI's ckpt_export of the chosen weights). Everything refused here is refused before anything is
loaded, written or queued (docs/pipelines.md has every field).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpc_runner.errors import UserError

SWEEP, TUNE, SELECT, RUN, SHARDS, EXPORT = "sweep", "tune", "select", "run", "shards", "export"
KINDS = (SWEEP, TUNE, SELECT, RUN, SHARDS, EXPORT)
SEARCHES = (SWEEP, TUNE)  # stages whose points a select stage chooses from (a run too: one point)
CONSUMERS = (RUN, SHARDS, EXPORT)  # stages that may take `from:` a select stage
NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")
RESERVED = frozenset({"attempts", "slurm", "pipeline"})  # folders and files of the pipeline dir itself
TOP_KEYS = ("bundle", "overrides", "stages", "description")
STAGE_KEYS = ("name", "sweep", "tune", "select", "entry", "export", "config_file", "overrides", "from", "shards",
              "slurm", "zip", "pack", "pack_parallel", "weights_id", "description")
# which keys each kind takes (besides name, description, slurm)
KIND_KEYS = {
    SWEEP: {"sweep", "entry", "config_file", "overrides", "zip", "pack", "pack_parallel"},
    TUNE: {"tune", "entry", "config_file", "overrides"},
    SELECT: {"select"},
    RUN: {"entry", "config_file", "overrides", "from", "weights_id"},
    SHARDS: {"entry", "config_file", "overrides", "from", "shards", "weights_id"},
    EXPORT: {"export", "from", "config_file", "weights_id"},
}
SELECT_KEYS = ("from", "metric", "mode")
TUNE_KEYS = ("space", "trials", "metric", "mode", "direction", "parallel", "pruner", "sampler", "seed",
             "pruner_options", "sampler_options")
EXPORT_KEYS = ("net_id", "filepath", "key_in_ckpt", "use_trace", "input_shape")
MODES = ("max", "min")
DEFAULT_WEIGHTS_ID = "ckpt"  # the id of an evaluate/inference config that names the weights (--ckpt RUN_DIR)


@dataclass
class StageSpec:
    """One stage of the pipeline file, checked."""

    name: str
    kind: str
    index: int
    raw: dict[str, Any]
    entry: str | None = None
    config_file: list[str] = field(default_factory=list)
    overrides: dict[str, Any] = field(default_factory=dict)
    source: str | None = None  # `from:` (a select stage) or, for a select stage, the stage it chooses from
    shards: int | None = None
    slurm: dict[str, Any] = field(default_factory=dict)
    weights_id: str = DEFAULT_WEIGHTS_ID
    metric: str | None = None  # select
    mode: str = "max"  # select
    sweep: list[str] = field(default_factory=list)
    zip: bool = False
    pack: int = 1
    pack_parallel: int = 1
    tune: dict[str, Any] = field(default_factory=dict)
    export: dict[str, Any] = field(default_factory=dict)

    @property
    def inputs(self) -> list[str]:
        """Return the stages this one waits for (its ``from``, or what a select stage chooses from)."""
        return [self.source] if self.source else []

    def to_record(self) -> dict[str, Any]:
        """Return the stage as written in the pipeline record (the file's own fields, and its kind)."""
        return {"kind": self.kind, **self.raw}


@dataclass
class PipelineSpec:
    """The pipeline file, checked: the bundle, the overrides of every stage and the stages in file order."""

    file: Path
    bundle: str
    overrides: dict[str, Any]
    stages: list[StageSpec]
    lines: dict[str, int] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)

    def stage(self, name: str) -> StageSpec:
        """Return the stage called ``name``."""
        return next(s for s in self.stages if s.name == name)

    def consumers(self, name: str) -> list[StageSpec]:
        """Return the stages that wait on stage ``name`` (its ``from`` is ``name``)."""
        return [s for s in self.stages if s.source == name]

    def order(self) -> list[StageSpec]:
        """Return the stages in the order they are submitted: each after its inputs, else in file order."""
        return topological(self.stages)


def where(spec_file: Path, lines: dict[str, int], path: str) -> str:
    """Return ``file:line`` of an id of the pipeline file (``stages::2::from``), or the file."""
    line = lines.get(path)
    while line is None and "::" in path:
        path = path.rsplit("::", 1)[0]
        line = lines.get(path)
    return f"{spec_file}:{line}" if line else str(spec_file)


def load_spec(path: str | Path) -> PipelineSpec:
    """Read and check the pipeline file; UserError (exit 2) naming the file, the line and the field."""
    from hpc_runner.config.loader import load_file

    path = Path(path)
    if not path.is_file():
        raise UserError("the pipeline file does not exist", where=str(path),
                        expected="a YAML file with `bundle:` and `stages:` (docs/pipelines.md)")
    loaded = load_file(path)
    return parse_spec(loaded.data, path, loaded.lines)


def parse_spec(data: Any, path: Path, lines: dict[str, int] | None = None) -> PipelineSpec:
    """Check the pipeline file's contents (``data``); return the spec."""
    lines = lines or {}

    def fail(message: str, at: str, expected: str | None = None, hint: str | None = None) -> UserError:
        return UserError(message, where=where(path, lines, at), id_path=at.replace("::", "."), expected=expected,
                         hint=hint)

    if not isinstance(data, dict):
        raise fail("a pipeline file is a mapping", "", expected="`bundle:` and `stages:` (docs/pipelines.md)")
    _unknown_keys(data, TOP_KEYS, "", fail)
    bundle = data.get("bundle")
    if not isinstance(bundle, str) or not bundle.strip():
        raise fail("the pipeline names no bundle", "bundle", expected="bundle: a bundle folder or a name on the "
                   "search path, e.g. bundle: bundles/synthetic_seg")
    overrides = _mapping(data.get("overrides"), "overrides", fail)
    raw_stages = data.get("stages")
    if not isinstance(raw_stages, list) or not raw_stages:
        raise fail("the pipeline has no stages", "stages", expected="stages: a list of stages, each with a name")
    stages = [_stage(raw, n, fail) for n, raw in enumerate(raw_stages)]
    seen: dict[str, int] = {}
    for s in stages:
        if s.name in seen:
            raise fail(f"two stages are called '{s.name}' (stages {seen[s.name]} and {s.index})",
                       f"stages::{s.index}::name", expected="a different name for each stage (its folder)")
        seen[s.name] = s.index
    _check_inputs(stages, fail)
    topological(stages, fail)
    return PipelineSpec(path, bundle.strip(), overrides, stages, lines, data)


def _unknown_keys(data: dict[str, Any], known: tuple[str, ...], at: str, fail: Any) -> None:
    for key in data:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            raise fail(f"unknown field '{key}'", f"{at}::{key}" if at else str(key),
                       expected=f"one of: {', '.join(known)}", hint=f"Did you mean: {close[0]}?" if close else None)


def _mapping(value: Any, at: str, fail: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and k for k in value):
        raise fail(f"{at.split('::')[-1]} is not a mapping of ids to values", at,
                   expected="e.g. overrides: {max_epochs: 2, network_def::channels: [8, 16, 32]}")
    return dict(value)


def _positive(value: Any, at: str, fail: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise fail(f"{at.split('::')[-1]}: {value!r} is not {what}", at, expected=f"{what} (a whole number >= 1)")
    return value


def _text(value: Any, at: str, fail: Any, expected: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise fail(f"{at.split('::')[-1]}: {value!r} is not {expected}", at, expected=expected)
    return value.strip()


def _kind(raw: dict[str, Any], at: str, fail: Any) -> str:
    keys = [k for k in ("select", "sweep", "tune", "export") if k in raw]
    if len(keys) > 1:
        raise fail(f"the stage has both {keys[0]} and {keys[1]}", f"{at}::{keys[1]}",
                   expected="one of sweep, tune, select, export (or entry alone: one run)")
    if keys:
        return keys[0]
    if "entry" in raw or "config_file" in raw:
        return SHARDS if raw.get("shards") is not None else RUN
    raise fail("the stage has nothing to do", at,
               expected="one of sweep, tune, select, export, or entry (one run; with shards: N, N array tasks)")


def _stage(raw: Any, n: int, fail: Any) -> StageSpec:
    at = f"stages::{n}"
    if not isinstance(raw, dict):
        raise fail(f"stage {n} is not a mapping", at, expected="name: and what the stage does")
    _unknown_keys(raw, STAGE_KEYS, at, fail)
    name = raw.get("name")
    if not isinstance(name, str) or not NAME.fullmatch(name) or name in RESERVED:
        raise fail(f"stage {n} has the name {name!r}, which cannot name its folder", f"{at}::name",
                   expected="a name of letters, digits, _ and - that starts with a letter (at most 64), not one of "
                   f"{', '.join(sorted(RESERVED))}")
    kind = _kind(raw, at, fail)
    allowed = KIND_KEYS[kind] | {"name", "description", "slurm"}
    for key in raw:
        if key not in allowed:
            raise fail(f"a {kind} stage takes no {key}", f"{at}::{key}",
                       expected=f"for a {kind} stage: {', '.join(sorted(allowed))}")
    stage = StageSpec(name=name, kind=kind, index=n, raw=dict(raw))
    stage.slurm = _mapping(raw.get("slurm"), f"{at}::slurm", fail)
    stage.overrides = _mapping(raw.get("overrides"), f"{at}::overrides", fail)
    if raw.get("entry") is not None:
        stage.entry = _text(raw["entry"], f"{at}::entry", fail, "an entry: a config of the bundle "
                            "(configs/<entry>.*) or an id of its train config")
    files = raw.get("config_file")
    if files is not None:
        files = [files] if isinstance(files, str) else files
        if not isinstance(files, list) or not files or not all(isinstance(f, str) and f for f in files):
            raise fail("config_file is not a file or a list of files", f"{at}::config_file",
                       expected="config_file: configs/evaluate.yaml (relative to the bundle), or a list")
        stage.config_file = list(files)
    if raw.get("weights_id") is not None:
        stage.weights_id = _text(raw["weights_id"], f"{at}::weights_id", fail, "the id that names the weights")
    if "from" in raw:
        stage.source = _text(raw["from"], f"{at}::from", fail, "the name of a select stage")
    if kind == SHARDS:
        stage.shards = _positive(raw.get("shards"), f"{at}::shards", fail, "a number of shards")
    if kind == SWEEP:
        _sweep_stage(stage, raw, at, fail)
    elif kind == TUNE:
        _tune_stage(stage, raw, at, fail)
    elif kind == SELECT:
        _select_stage(stage, raw, at, fail)
    elif kind == EXPORT:
        _export_stage(stage, raw, at, fail)
    return stage


def _sweep_stage(stage: StageSpec, raw: dict[str, Any], at: str, fail: Any) -> None:
    sweeps = raw.get("sweep")
    sweeps = [sweeps] if isinstance(sweeps, str) else sweeps
    if not isinstance(sweeps, list) or not sweeps or not all(isinstance(s, str) and s.strip() for s in sweeps):
        raise fail("sweep is not a list of --sweep options", f"{at}::sweep",
                   expected='sweep: ["learning_rate=1e-3,4e-3", "batch_size=2,4"]')
    stage.sweep = list(sweeps)
    stage.zip = bool(raw.get("zip", False))
    stage.pack = _positive(raw.get("pack", 1), f"{at}::pack", fail, "a number of points per task")
    stage.pack_parallel = _positive(raw.get("pack_parallel", 1), f"{at}::pack_parallel", fail,
                                    "a number of points run at once")


def _tune_stage(stage: StageSpec, raw: dict[str, Any], at: str, fail: Any) -> None:
    tune = _mapping(raw.get("tune"), f"{at}::tune", fail)
    _unknown_keys(tune, TUNE_KEYS, f"{at}::tune", fail)
    space = tune.get("space")
    space = [space] if isinstance(space, str) else space
    if not isinstance(space, list) or not space or not all(isinstance(s, str) for s in space):
        raise fail("tune has no space", f"{at}::tune::space",
                   expected="space: ['learning_rate=loguniform(1e-4,1e-1)', ...] (as tune --space)")
    _positive(tune.get("trials"), f"{at}::tune::trials", fail, "a number of trials")
    _text(tune.get("metric"), f"{at}::tune::metric", fail, "the trainer's metric_name, e.g. val_dice")
    if "mode" in tune and tune["mode"] not in MODES:
        raise fail(f"mode: {tune['mode']!r}", f"{at}::tune::mode", expected="mode: max or min")
    if "parallel" in tune:
        _positive(tune["parallel"], f"{at}::tune::parallel", fail, "a number of workers")
    stage.tune = {**tune, "space": list(space)}


def _select_stage(stage: StageSpec, raw: dict[str, Any], at: str, fail: Any) -> None:
    sel = raw.get("select")
    if not isinstance(sel, dict):
        raise fail("select is not a mapping", f"{at}::select", expected="select: {from: search, metric: val_dice, "
                   "mode: max}")
    _unknown_keys(sel, SELECT_KEYS, f"{at}::select", fail)
    stage.source = _text(sel.get("from"), f"{at}::select::from", fail, "the name of the stage to choose from")
    if sel.get("metric") is not None:
        stage.metric = _text(sel["metric"], f"{at}::select::metric", fail, "a metric of the points' summary.json")
    mode = sel.get("mode", "max")
    if mode not in MODES:
        raise fail(f"mode: {mode!r} is not a direction", f"{at}::select::mode",
                   expected="mode: max (the highest metric wins) or min (the lowest)")
    stage.mode = mode


def _export_stage(stage: StageSpec, raw: dict[str, Any], at: str, fail: Any) -> None:
    export = _mapping(raw.get("export"), f"{at}::export", fail)
    _unknown_keys(export, EXPORT_KEYS, f"{at}::export", fail)
    stage.export = {"net_id": "network_def", "filepath": "model.ts", **export}
    if stage.source is None:
        raise fail("an export stage needs the weights it exports", f"{at}", expected="from: a select stage")


def _check_inputs(stages: list[StageSpec], fail: Any) -> None:
    """Each `from` names a stage that can give what the stage takes (a select stage chooses from a search or a run)."""
    by_name = {s.name: s for s in stages}
    for s in stages:
        if s.source is None:
            continue
        at = f"stages::{s.index}::select::from" if s.kind == SELECT else f"stages::{s.index}::from"
        src = by_name.get(s.source)
        if src is None:
            close = difflib.get_close_matches(s.source, list(by_name), n=1)
            raise fail(f"stage '{s.name}' takes from '{s.source}', which is not a stage of this pipeline", at,
                       expected=f"one of: {', '.join(by_name)}", hint=f"Did you mean: {close[0]}?" if close else None)
        if src.name == s.name:
            raise fail(f"stage '{s.name}' takes from itself", at, expected="another stage")
        if s.kind == SELECT and src.kind not in (*SEARCHES, RUN):
            raise fail(f"select stage '{s.name}' chooses from '{src.name}', a {src.kind} stage", at,
                       expected="a sweep, tune or run stage (its points, or its one run)")
        if s.kind == SELECT and src.kind in SEARCHES and not s.metric and not (src.kind == TUNE):
            raise fail(f"select stage '{s.name}' has no metric to choose the best point of '{src.name}' by",
                       f"stages::{s.index}::select", expected="select: {from: ..., metric: val_dice, mode: max}")
        if s.kind in CONSUMERS and src.kind != SELECT:
            raise fail(f"stage '{s.name}' takes from '{src.name}', a {src.kind} stage", at,
                       expected="from: a select stage (its chosen point gives the weights and values); "
                       f"add one: {{name: best, select: {{from: {src.name}, metric: ..., mode: max}}}}")


def topological(stages: list[StageSpec], fail: Any = None) -> list[StageSpec]:
    """Return the stages, each after its inputs (file order otherwise); UserError for a cycle."""
    by_name = {s.name: s for s in stages}
    done: list[StageSpec] = []
    placed: set[str] = set()
    left = list(stages)
    while left:
        ready = [s for s in left if all(i in placed or i not in by_name for i in s.inputs)]
        if not ready:
            cycle = _cycle(left, by_name)
            message = f"the stages wait on each other in a cycle: {' -> '.join(cycle)}"
            first = by_name[cycle[0]]
            at = f"stages::{first.index}::select::from" if first.kind == SELECT else f"stages::{first.index}::from"
            if fail is None:
                raise UserError(message)
            raise fail(message, at, expected="each stage after the stages it takes from (no cycle)")
        for s in ready:
            done.append(s)
            placed.add(s.name)
        left = [s for s in left if s.name not in placed]
    return done


def _cycle(left: list[StageSpec], by_name: dict[str, StageSpec]) -> list[str]:
    """Return one cycle among ``left`` (each of them waits on another of them)."""
    start = left[0]
    path = [start.name]
    current = start
    while True:
        nxt = by_name[current.inputs[0]]
        if nxt.name in path:
            return [*path[path.index(nxt.name):], nxt.name]
        path.append(nxt.name)
        current = nxt


def descendants(stages: list[StageSpec], name: str) -> list[str]:
    """Return every stage that waits, directly or not, on stage ``name`` (in submission order)."""
    out: list[str] = []
    frontier = {name}
    for s in topological(stages):
        if any(i in frontier for i in s.inputs):
            out.append(s.name)
            frontier.add(s.name)
    return out

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
(MONAI's ckpt_export of the chosen weights); each kind is a class of pipeline/stages/, which checks its own
fields. Everything refused here is refused before anything is loaded, written or queued (docs/pipelines.md
has every field). The checked file's types, ``PipelineSpec`` and ``StageSpec``, are in model.py.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

from hpc_runner.config.loader import load_file
from hpc_runner.errors import UserError
from hpc_runner.pipeline.model import Kind, PipelineSpec, StageSpec, topological
from hpc_runner.pipeline.stages.registry import kinds as registered

NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")
RESERVED = frozenset({"attempts", "jobs", "slurm", "pipeline"})  # folders and files of the pipeline dir itself
# (jobs/: a job folder, ledger.JOB_FOLDER; slurm/: its name in pipeline dirs made before)
TOP_KEYS = ("bundle", "overrides", "stages", "description")
# the fields of a stage, as the messages list them; a kind's field not here is known too (``_stage_keys``).
# Which fields each kind takes: its class's ``keys`` (pipeline/stages/).
STAGE_KEYS = ("name", "sweep", "tune", "select", "entry", "export", "config_file", "overrides", "from", "shards",
              "slurm", "zip", "pack", "pack_parallel", "weights_id", "description")
MODES = ("max", "min")
# the most stages a pipeline may have (docs/pipelines.md): every stage is pre-flighted and queued as a job.
# `pipeline --dry-run --cluster local` on 2 busy cores: 100 stages 1.4 s (8.1 s with a cold target cache, of
# which 7.8 s is importing MONAI, as for 3 stages), 200 3 s, 3,000 over 20 s; real studies have fewer than 10
MAX_STAGES = 100


def where(spec_file: Path, lines: dict[str, int], path: str) -> str:
    """Return ``file:line`` of an id of the pipeline file (``stages::2::from``), or the file."""
    line = lines.get(path)
    while line is None and "::" in path:
        path = path.rsplit("::", 1)[0]
        line = lines.get(path)
    return f"{spec_file}:{line}" if line else str(spec_file)


def load_spec(path: str | Path) -> PipelineSpec:
    """Read and check the pipeline file; UserError (exit 2) naming the file, the line and the field."""
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
    if len(raw_stages) > MAX_STAGES:
        raise fail(f"the pipeline has {len(raw_stages):,} stages, more than the {MAX_STAGES} a pipeline may have",
                   "stages", expected=f"at most {MAX_STAGES} stages (each is checked and queued as its own job)",
                   hint="Split the study into several pipelines, or make many similar runs one sweep stage")
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


def _stage_keys(kinds: list[Kind]) -> tuple[str, ...]:
    """Return the fields a stage may have: STAGE_KEYS, then any other field a registered kind takes."""
    extra = sorted({k for kind in kinds for k in kind.keys} - set(STAGE_KEYS))
    return (*STAGE_KEYS, *extra)


def _kind(raw: dict[str, Any], at: str, fail: Any, kinds: list[Kind]) -> Kind:
    """Return the stage's kind: the one whose field it has (two: refused), else the first that claims it."""
    keyed = [k for k in kinds if k.key is not None and k.key in raw]
    if len(keyed) > 1:
        raise fail(f"the stage has both {keyed[0].key} and {keyed[1].key}", f"{at}::{keyed[1].key}",
                   expected="one of sweep, tune, select, export (or entry alone: one run)")
    claimed = keyed or [k for k in kinds if k.claims(raw)]
    if claimed:
        return claimed[0]
    raise fail("the stage has nothing to do", at,
               expected="one of sweep, tune, select, export, or entry (one run; with shards: N, N array tasks)")


def _stage(raw: Any, n: int, fail: Any) -> StageSpec:
    at = f"stages::{n}"
    if not isinstance(raw, dict):
        raise fail(f"stage {n} is not a mapping", at, expected="name: and what the stage does")
    kinds = registered()
    _unknown_keys(raw, _stage_keys(kinds), at, fail)
    name = raw.get("name")
    if not isinstance(name, str) or not NAME.fullmatch(name) or name in RESERVED:
        raise fail(f"stage {n} has the name {name!r}, which cannot name its folder", f"{at}::name",
                   expected="a name of letters, digits, _ and - that starts with a letter (at most 64), not one of "
                   f"{', '.join(sorted(RESERVED))}")
    kind = _kind(raw, at, fail, kinds)
    allowed = kind.keys | {"name", "description", "slurm"}
    for key in raw:
        if key not in allowed:
            raise fail(f"a {kind.name} stage takes no {key}", f"{at}::{key}",
                       expected=f"for a {kind.name} stage: {', '.join(sorted(allowed))}")
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
    kind.parse(stage, raw, at, fail)
    return stage


def _check_inputs(stages: list[StageSpec], fail: Any) -> None:
    """Each `from` names a stage that can give what the stage takes (a select stage chooses from a search or a run)."""
    by_name = {s.name: s for s in stages}
    for s in stages:
        if s.source is None:
            continue
        at = s.kind.source_path(s.index)
        src = by_name.get(s.source)
        if src is None:
            close = difflib.get_close_matches(s.source, list(by_name), n=1)
            raise fail(f"stage '{s.name}' takes from '{s.source}', which is not a stage of this pipeline", at,
                       expected=f"one of: {', '.join(by_name)}", hint=f"Did you mean: {close[0]}?" if close else None)
        if src.name == s.name:
            raise fail(f"stage '{s.name}' takes from itself", at, expected="another stage")
        s.kind.check_source(s, src, at, fail)


def descendants(stages: list[StageSpec], name: str) -> list[str]:
    """Return every stage that waits, directly or not, on stage ``name`` (in submission order)."""
    out: list[str] = []
    frontier = {name}
    for s in topological(stages):
        if any(i in frontier for i in s.inputs):
            out.append(s.name)
            frontier.add(s.name)
    return out

"""Each stage's bundle config, and what it takes from the stage it comes ``from``.

The overrides of a stage, lowest first: the pipeline's ``overrides`` (for the ids its config has), the
overrides of the search its select stage chooses from (ids its config has: "its config and overrides"),
its own ``overrides`` (every id must exist: a typo stops the pipeline), then, once the choice is known,
the chosen point's swept values (ids its config has, unless the stage sets them itself) and the weights:
``ckpt`` (``weights_id``) = the chosen run dir. Until then the weights id holds a placeholder,
``<pipeline dir>/<select stage>/chosen`` (no such folder exists): the select stage's job writes the real
values into the stage's prepared config before the stage can start (pipeline/choice.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hpc_runner.config.bundle_config import BundleConfig, find_default_config, load_bundle_config
from hpc_runner.config.ids import has_id, normalize_id
from hpc_runner.config.loader import load_file
from hpc_runner.config.overrides import Override
from hpc_runner.config.values import parse_value
from hpc_runner.errors import ConfigError, UserError
from hpc_runner.pipeline import spec as ps
from hpc_runner.pipeline.choice import choice_overrides
from hpc_runner.pipeline.model import PipelineSpec, StageConfig, StageSpec
from hpc_runner.registry.search import resolve_bundle
from hpc_runner.registry.trust import check_trust
from hpc_runner.scheduler.profiles import ClusterProfile, check_settings

SOURCE = "pipeline"  # the source of the overrides a pipeline sets (overrides.yaml says where each came from)
PLACEHOLDER = "chosen"  # <pipeline dir>/<select stage>/chosen: the weights before the choice is made


def typed(value: Any) -> Any:
    """Return a value of the pipeline file typed as a command-line value is (YAML 1.2: ``1e-3`` is a number)."""
    if isinstance(value, str):
        parsed = parse_value(value)
        return parsed if isinstance(parsed, int | float) and not isinstance(parsed, bool) else value
    if isinstance(value, list):
        return [typed(v) for v in value]
    if isinstance(value, dict):
        return {k: typed(v) for k, v in value.items()}
    return value


def make_override(spelled_id: str, value: Any, origin: str) -> Override:
    """Return the Override of one ``id: value`` of the pipeline file (``+id`` adds an id)."""
    add = spelled_id.startswith("+")
    key = normalize_id(spelled_id[1:] if add else spelled_id)
    return Override(key, typed(value), SOURCE, origin, add=add)


def stage_profile(profile: ClusterProfile, stage: StageSpec, where: str) -> ClusterProfile:
    """Return the profile a stage's jobs are submitted with: the pipeline's, as its kind changes it (a select
    stage's job asks for one CPU, no GPU and at most 15 minutes), the stage's ``slurm:`` on top."""
    settings = dict(profile.settings)
    stage.kind.job_settings(settings, profile)
    if stage.slurm:
        check_settings(stage.slurm, where)
        settings.update(stage.slurm)
    return ClusterProfile(profile.name, list(profile.sources), settings)


def resolve_bundle_dir(spec: PipelineSpec) -> Path:
    """Return the bundle folder the pipeline names (a folder, or a name on the search path), checked for trust."""
    try:
        bundle_dir = resolve_bundle(spec.bundle)
    except UserError as exc:
        raise type(exc)(exc.message, where=ps.where(spec.file, spec.lines, "bundle"), id_path="bundle",
                        expected=exc.expected, hint=exc.hint) from None
    check_trust(bundle_dir)
    return bundle_dir


def load_stage_config(spec: PipelineSpec, stage: StageSpec, bundle_dir: Path) -> BundleConfig:
    """Load the stage's config files (``config_file``, else its kind's default config, else ``configs/<entry>.*``,
    else train), no overrides."""
    at = f"stages::{stage.index}"
    if stage.entry and not stage.config_file and stage.kind.checks_entry:
        _check_entry_config(spec, stage, bundle_dir)
    files = [str(f if Path(f).is_absolute() else bundle_dir / f) for f in stage.config_file] or None
    if stage.kind.default_config and not files:
        files = [str(find_default_config(bundle_dir, stage.kind.default_config))]
    if files:
        missing = [f for f in files if not Path(f).is_file()]
        if missing:
            raise ConfigError(f"stage '{stage.name}': the config file {missing[0]} does not exist",
                              where=ps.where(spec.file, spec.lines, f"{at}::config_file"),
                              id_path=f"stages.{stage.index}.config_file",
                              expected="a file of the bundle (relative to it) or an absolute path")
    return load_bundle_config(bundle=str(bundle_dir), config_files=files, entry=stage.entry, check=False,
                              strict_ids=True)


def _check_entry_config(spec: PipelineSpec, stage: StageSpec, bundle_dir: Path) -> None:
    """A stage's ``entry`` names a config of the bundle (configs/<entry>.*) or an id of its train config."""
    found = find_default_config(bundle_dir, stage.entry)
    if found.stem == stage.entry or has_id(load_file(found).data, stage.entry or ""):
        return
    configs = sorted(p.stem for p in (bundle_dir / "configs").glob("*.*") if p.suffix in (".yaml", ".yml", ".json")
                     and p.stem != "metadata")
    raise ConfigError(
        f"stage '{stage.name}' runs entry '{stage.entry}', and the bundle has no configs/{stage.entry}.* and no id "
        f"'{stage.entry}' in {found.name}",
        where=ps.where(spec.file, spec.lines, f"stages::{stage.index}::entry"), id_path=f"stages.{stage.index}.entry",
        expected=f"an entry the bundle has: a config among {', '.join(configs)}, or an id of {found.name}")


def with_stage_overrides(spec: PipelineSpec, stage: StageSpec, base: BundleConfig,
                         inherited: dict[str, Any], extra: Sequence[Override] = ()) -> BundleConfig:
    """Return the stage's config with the pipeline's, the inherited and its own overrides (module doc) and ``extra``."""
    at = f"stages::{stage.index}::overrides"
    ovs = [make_override(k, v, f"{spec.file}: overrides::{k}") for k, v in spec.overrides.items()
           if has_id(base.config, k.lstrip("+"))]
    own = {k.lstrip("+") for k in stage.overrides}
    ovs += [make_override(k, v, f"{spec.file}: from {stage.source}") for k, v in inherited.items()
            if k.lstrip("+") not in own and has_id(base.config, k.lstrip("+"))]
    ovs += [make_override(k, v, ps.where(spec.file, spec.lines, f"{at}::{k}")) for k, v in stage.overrides.items()]
    try:
        return base.with_overrides([*ovs, *extra], check=True)
    except ConfigError as exc:
        raise ConfigError(f"stage '{stage.name}': {exc.message}", where=exc.where, id_path=exc.id_path,
                          expected=exc.expected, hint=exc.hint) from None


def check_pipeline_overrides(spec: PipelineSpec, configs: dict[str, StageConfig]) -> None:
    """ConfigError for an id of the pipeline's ``overrides`` that no stage's config has (a typo)."""
    loaded = [c.cfg for c in configs.values() if c.cfg is not None]
    for key in spec.overrides:
        bare = key.lstrip("+")
        if key.startswith("+") or any(has_id(c.config, bare) for c in loaded):
            continue
        raise ConfigError(f"no stage's config has the id '{bare}'", where=ps.where(spec.file, spec.lines,
                          f"overrides::{key}"), id_path=f"overrides.{key}",
                          expected="an id of at least one stage's config (the pipeline's overrides apply to every "
                          "stage that has the id)")


def placeholder(directory: Path, select_stage: str) -> str:
    """Return the weights a consumer's config holds until its select stage has chosen (module doc)."""
    return str((directory / select_stage / PLACEHOLDER).resolve())


def inherited_overrides(spec: PipelineSpec, stage: StageSpec) -> dict[str, Any]:
    """Return the overrides of the search (or run) a consumer's select stage chooses from."""
    if stage.source is None:
        return {}
    select = spec.stage(stage.source)
    search = spec.stage(select.source) if select.source else None
    return dict(search.overrides) if search is not None else {}


def build_configs(spec: PipelineSpec, profile: ClusterProfile, directory: Path,
                  choices: dict[str, dict[str, Any]] | None = None) -> dict[str, StageConfig]:
    """Load every stage's config (in submission order), with its overrides; nothing is written.

    ``choices``: the choice of each select stage that has chosen (resume, the local executor): its
    consumers get the chosen values and weights now instead of the placeholder."""
    bundle_dir = resolve_bundle_dir(spec)
    out: dict[str, StageConfig] = {}
    choices = choices or {}
    for stage in spec.order():
        where = ps.where(spec.file, spec.lines, f"stages::{stage.index}::slurm")
        sc = StageConfig(stage, stage_profile(profile, stage, where))
        out[stage.name] = sc
        stage.kind.configure(spec, sc, bundle_dir, directory, choices)
    check_pipeline_overrides(spec, out)
    return out


def configure_stage(spec: PipelineSpec, sc: StageConfig, bundle_dir: Path, directory: Path,
                    choices: dict[str, dict[str, Any]]) -> None:
    """Load a stage's config into ``sc``: its overrides (module doc), the weights and values it takes from its
    select stage (the placeholder until it has chosen), what its kind adds, then what its kind runs."""
    stage = sc.stage
    base = load_stage_config(spec, stage, bundle_dir)
    sc.inherited = inherited_overrides(spec, stage) if stage.source else {}
    extra: list[Override] = []
    if stage.source:
        _check_weights_id(spec, stage, base)
        choice = choices.get(stage.source)
        if choice is not None:
            extra = choice_overrides(base, choice, stage.weights_id, own=set(stage.overrides))
        else:
            extra = [Override(stage.weights_id, placeholder(directory, stage.source), SOURCE,
                              f"from {stage.source} (until it has chosen)")]
    extra += stage.kind.extra_overrides(sc, base, directory)
    sc.cfg = with_stage_overrides(spec, stage, base, sc.inherited, extra)
    sc.cfg.trusted = False
    stage.kind.plan(spec, sc)


def _check_weights_id(spec: PipelineSpec, stage: StageSpec, cfg: BundleConfig) -> None:
    if not has_id(cfg.config, stage.weights_id):
        files = ", ".join(str(f) for f in cfg.config_files)
        raise ConfigError(
            f"stage '{stage.name}' takes the weights of '{stage.source}' as id '{stage.weights_id}', and its config "
            f"({files}) has no such id", where=ps.where(spec.file, spec.lines, f"stages::{stage.index}::from"),
            id_path=f"stages.{stage.index}.from",
            expected="a config whose weights come from an id (e.g. ckpt, as --ckpt RUN_DIR); weights_id: ID names "
            "another")
    if stage.weights_id in {k.lstrip("+") for k in stage.overrides}:
        raise ConfigError(f"stage '{stage.name}' sets '{stage.weights_id}' itself and takes the weights from "
                          f"'{stage.source}'", where=ps.where(spec.file, spec.lines,
                                                              f"stages::{stage.index}::overrides"),
                          id_path=f"stages.{stage.index}.overrides.{stage.weights_id}",
                          expected="one of the two: the chosen point's weights (from:) or the stage's own")


def source_points(configs: dict[str, StageConfig], stage: StageSpec) -> list[dict[str, Any]]:
    """Return the points a consumer's select stage may choose (a sweep's points, a tune's corners, one run: {})."""
    if stage.source is None:
        return []
    select = configs[stage.source].stage
    search = configs.get(select.source or "")
    if search is None:
        return [{}]
    return search.points or [{}]  # a run has no points: its one run is {}

"""One entry point that turns a bundle, its files, overrides and environment into a checked config."""

from __future__ import annotations

import ast
import copy
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpc_runner.config.env import expand_env_refs, has_env_refs
from hpc_runner.config.ids import get_by_id, has_id, iter_ids, set_by_id
from hpc_runner.config.loader import LoadedFile, load_file
from hpc_runner.config.merge import locate, merge_files
from hpc_runner.config.overrides import (
    Override,
    added_id_warning,
    apply_override,
    fold_into_args_file,
    load_args_file,
    parse_env_overrides,
    suggest_ids,
    typo_candidates,
)
from hpc_runner.config.references import (
    check_references,
    expand_macros,
    load_macro_file,
    refs_in_string,
    resolve_relative_ids,
)
from hpc_runner.errors import BundleError, ConfigError, UserError
from hpc_runner.registry.metadata import metadata_note
from hpc_runner.registry.search import resolve_bundle

META_KEY = "_meta_"
DEFAULT_CONFIG_STEMS = ("train",)
# ids MONAI's workflow properties define: `--bundle_root X` / `--dataset_dir X` set them as MONAI does,
# added without a word when a config lacks them (any other unknown id is added with a warning, or refused
# when the ids are strict: --strict-ids, sweeps, tune)
ADDED_IF_MISSING = ("bundle_root", "dataset_dir")
# what MONAI's ConfigWorkflow runs around ENTRY unless --init_id / --final_id name other ids
DEFAULT_INIT_ID, DEFAULT_FINAL_ID = "initialize", "finalize"
# the ids a bundle usually runs (MONAI's entries): what pre-flight checks and the runner looks for without an entry
USUAL_ENTRIES = ("run", "training", "train", "evaluating", "evaluate", "inferring", "infer", "inference")
LOGGING_CONF = "logging.conf"


@dataclass
class EnvUse:
    """A ``${env:NAME}`` expanded while loading: which id, which variable, which value."""

    id_path: str
    variable: str
    value: str | None  # None: the default was used
    where: str | None


@dataclass
class BundleConfig:
    """A merged, overridden and checked bundle config, ready to hand to MONAI's ConfigParser."""

    name: str
    bundle_dir: Path | None
    config_files: list[Path]
    meta_file: Path | None
    config: dict  # merged files + overrides + env, with ``_meta_``; macros not yet expanded
    where: dict[str, str]  # id -> "file:line" where the current value was set
    overrides: list[Override] = field(default_factory=list)
    env_uses: list[EnvUse] = field(default_factory=list)
    trusted: bool = False  # run despite a MANIFEST mismatch (--trust); recorded so a job checks the same way
    safe: bool = False  # checked with --safe
    sandbox_writable: tuple[str, ...] = ()  # --safe: folders besides the run dir its sandbox may write (--writable)
    sandbox_readable: tuple[str, ...] = ()  # --safe: folders its sandbox may read under the hidden ones (--readable)
    container: dict | None = None  # --container: the image it runs in (engine/container.py), as run.yaml records it
    tracking: dict | None = None  # --tracking: where MLflow runs go (hpc_runner/tracking/settings.py)
    recorded: bool = False  # loaded from a run dir's config.yaml (resume, rerun, jobs), not from bundle files
    logging_file: Path | None = None  # applied with logging.config.fileConfig before the run, as MONAI does
    config_root: Path | None = None  # without --bundle: MONAI's bundle root (the folder above configs/)
    strict_ids: bool = False  # an override of an id the config lacks is refused (else added, as MONAI does)
    refuse_unused_ids: bool = False  # `run`: an added id that nothing references (it cannot change the run) is refused
    init_id: str = DEFAULT_INIT_ID  # MONAI's --init_id: the id run before ENTRY (optional in the config)
    final_id: str = DEFAULT_FINAL_ID  # MONAI's --final_id: the id run after ENTRY, always (optional)

    @property
    def code_dir(self) -> Path | None:
        """Return the folder put on sys.path for the bundle's ``scripts/`` (--bundle, else MONAI's rule)."""
        return self.bundle_dir or self.config_root

    @property
    def meta(self) -> dict:
        """Return the bundle metadata."""
        return self.config.get(META_KEY, {})

    def expanded(self) -> dict:
        """Return the config with ``%`` macros and relative ids resolved (what is recorded and run)."""
        base = self.config_files[0].parent if self.config_files else None
        return expand_macros(self.config, lambda p: load_macro_file(p, base), where=self.where)

    def locate(self, id_path: str) -> str | None:
        """Return where ``id_path`` got its value (file:line, env variable or CLI flag)."""
        return locate(self.where, id_path)

    def with_overrides(self, overrides: Sequence[Override], *, check: bool = True) -> BundleConfig:
        """Return a copy with more overrides applied on top (used for sweep points)."""
        new = copy.deepcopy(self)
        apply_overrides(new, overrides, os.environ)
        if check:
            new.check()
        return new

    def check(self) -> None:
        """Raise ConfigError for references to missing ids and circular references."""
        expanded = self.expanded()
        check_references(expanded, self.where, lambda ref: suggest_ids(ref, expanded))


def find_default_config(bundle_dir: Path, entry: str | None = None) -> Path:
    """Return ``configs/<entry>.*`` when the bundle has it (``run inference``), else ``configs/train.*``."""
    # zoo bundles ship inference.json and evaluate.json beside train.json; naming the entry picks its file
    stems = ([entry] if entry and "/" not in entry and "::" not in entry else []) + list(DEFAULT_CONFIG_STEMS)
    for stem in stems:
        for suffix in (".yaml", ".yml", ".json"):
            candidate = bundle_dir / "configs" / f"{stem}{suffix}"
            if candidate.is_file():
                return candidate
    raise BundleError(
        "the bundle has no configs/train.yaml, train.yml or train.json",
        where=str(bundle_dir),
        expected="a bundle folder with configs/train.* (or pass --config_file)",
    )


def split_config_files(values: Sequence[Any] | str | None) -> list[Path]:
    """Split ``--config_file`` values into paths, in order, as MONAI reads them.

    Each value is a path, a comma list (``a.json,b.json``) or a Python/JSON list literal
    (``"['a.json', 'b.json']"``, the model zoo's way to merge files); it may be given repeatedly.
    """
    if values is None:
        return []
    if isinstance(values, str | Path):
        values = [values]
    paths: list[Path] = []
    for value in values:
        if isinstance(value, list | tuple):
            paths += split_config_files(list(value))
            continue
        text = str(value).strip()
        if text.startswith(("[", "(")):
            paths += split_config_files(_literal_file_list(text))
        elif Path(text).is_file():
            paths.append(Path(text))
        else:
            paths += [Path(p.strip()) for p in text.split(",") if p.strip()]
    return paths


def _literal_file_list(text: str) -> list[str]:
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        value = None
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ConfigError(
            f"--config_file {text!r} is not a list of file names",
            expected="FILE, FILE,FILE or a list such as \"['configs/train.json','configs/evaluate.json']\"",
        )
    return list(value)


def merge_meta_files(paths: Sequence[Path]) -> LoadedFile:
    """Load metadata files and merge them in order (MONAI accepts a list of metadata files)."""
    loaded = [load_file(p) for p in paths]
    if len(loaded) == 1:
        return loaded[0]
    data: dict = {}
    lines: dict[str, int] = {}
    for f in loaded:
        data.update(f.data)
        lines.update(f.lines)
    return LoadedFile(loaded[-1].path, data, lines)


def monai_config_root(files: Sequence[Path]) -> Path:
    """Return MONAI's bundle root for config files: the folder above ``configs/``, else their folder."""
    folder = files[0].parent
    return folder.parent if folder.name == "configs" else folder


def logging_file_for(value: str | Path | None, files: Sequence[Path]) -> Path | None:
    """Return the logging config to apply: ``--logging_file``, else ``logging.conf`` beside the first config file.

    ``false`` turns it off (MONAI's ``--logging_file False``); a named file that does not exist is an error.
    """
    if value is None:
        default = files[0].parent / LOGGING_CONF
        return default if default.is_file() else None
    if str(value).strip().lower() in ("false", "none", ""):
        return None
    path = Path(value)
    if not path.is_file():
        raise ConfigError(
            "logging config file not found",
            where=str(path),
            expected="an INI file for logging.config.fileConfig (as MONAI's --logging_file), or False to keep "
            "hpc-runner's logging",
        )
    return path


def expand_file_env(cfg: BundleConfig, environ: Mapping[str, str]) -> None:
    """Expand ``${env:...}`` in the values that came from config files, recording each variable used."""
    for id_path, value in list(iter_ids(cfg.config)):
        if has_env_refs(value):
            used: dict[str, str | None] = {}
            where = cfg.locate(id_path)
            set_by_id(cfg.config, id_path, expand_env_refs(value, environ, id_path=id_path, where=where, used=used))
            cfg.env_uses += [EnvUse(id_path, k, v, where) for k, v in used.items()]


STRICT_SOURCES = ("sweep",)  # a typo in a swept id must stop the sweep before anything is queued


def apply_overrides(cfg: BundleConfig, overrides: Sequence[Override], environ: Mapping[str, str],
                    entry: str | None = None) -> None:
    """Apply overrides to ``cfg`` in order, expanding ${env:} in their values and recording sources.

    An override of an id the config lacks adds it, as MONAI's runner does, with a warning (naming close
    ids when it looks like a typo); with ``cfg.strict_ids`` or from a sweep it is refused instead.
    """
    added: list[tuple[Override, list[str]]] = []
    for ov in overrides:
        if ov.id in ADDED_IF_MISSING and not ov.add and not has_id(cfg.config, ov.id):
            ov.add = True
        if has_env_refs(ov.value):
            used: dict[str, str | None] = {}
            ov.value = expand_env_refs(ov.value, environ, id_path=ov.id, where=ov.origin, used=used)
            cfg.env_uses += [EnvUse(ov.id, k, v, ov.origin) for k, v in used.items()]
        strict = cfg.strict_ids or ov.source in STRICT_SOURCES
        note = None
        if not strict and not ov.add and ov.source != "hpc-runner" and not has_id(cfg.config, ov.id):
            note = added_id_warning(ov, cfg.config)  # before it is added: the close ids are the others
            if note and cfg.refuse_unused_ids:
                added.append((ov, typo_candidates(ov.id, cfg.config) or suggest_ids(ov.id, cfg.config)))
                note = None  # said below, as a refusal, when nothing references it
        apply_override(cfg.config, ov, cfg.where, strict=strict)
        if note:
            warnings.warn(note, stacklevel=2)
        cfg.where[ov.id] = ov.origin
        for sub, _ in iter_ids(ov.value, ov.id):
            cfg.where[sub] = ov.origin
        cfg.overrides.append(ov)
    if added:
        _refuse_unused(cfg, added, entry)


def _refuse_unused(cfg: BundleConfig, added: list[tuple[Override, list[str]]], entry: str | None) -> None:
    """Raise ConfigError for the first added id that nothing references: neither it nor an id above it is an
    ``@``/``%`` reference of the config or an id the runner runs, so its value cannot change the run (``--max_epoch
    2`` beside ``max_epochs``). An added id something references stays, as MONAI adds it."""
    sources = _merged_sources(cfg)
    if sources is None:  # what MONAI merges before running is not known here: nothing is refused
        return
    used = {cfg.init_id, cfg.final_id, *USUAL_ENTRIES, *([entry] if entry else [])}
    for source in sources:
        for id_path, value in iter_ids(source):
            if isinstance(value, str) and ("@" in value or "%" in value):
                text = value.replace("%", "@")
                text = resolve_relative_ids(id_path, text) if "::" in value else text
                used.update(refs_in_string(text))
    for ov, close in added:
        parts = ov.id.split("::")
        if any("::".join(parts[:n]) in used for n in range(1, len(parts) + 1)):
            continue
        spell = {"cli": "--{}", "env": "HPCR__{}"}.get(ov.source, "{}")
        mean = ", ".join(spell.format(c if ov.source != "env" else c.replace("::", "__")) for c in close)
        raise ConfigError(
            f"{ov.origin} names id '{ov.id}', which the config does not have and nothing in it references: its "
            f"value could not change the run" + (f" (did you mean {mean}?)" if mean else "")
            + "; nothing was run",
            where=ov.origin if ov.source == "args_file" else None, id_path=ov.id,
            expected=f"an id of the config{f' such as {mean}' if mean else ''} (`hpc-runner config` lists them), or "
            f"--+{ov.id} VALUE to add it on purpose",
        )


def _merged_sources(cfg: BundleConfig) -> list[Any] | None:
    """Return what MONAI merges before running, whose references keep an added id: the config (its files, args
    file and overrides) with ``%`` macros' pieces of other files expanded, and the ``--tracking`` settings' configs
    (a MONAI settings file, else MONAI's default settings). None when that cannot be known here."""
    try:
        sources: list[Any] = [cfg.config, cfg.expanded()]
    except (UserError, OSError, ValueError):  # a macro's file that cannot be read: reported when it is run
        return None
    if cfg.tracking:
        given = cfg.tracking.get("monai") or {}
        configs = given.get("configs") if isinstance(given, dict) else None
        if configs is not None and not isinstance(configs, dict):
            return None
        sources.append(configs or {})
        if not (isinstance(given, dict) and given.get("handlers_id")):  # MONAI's defaults are merged in too
            try:
                from monai.bundle.utils import DEFAULT_MLFLOW_SETTINGS  # heavy: only for `run --tracking`
            except Exception:  # without MONAI the defaults are unknown: refuse nothing
                return None
            sources.append(copy.deepcopy(DEFAULT_MLFLOW_SETTINGS.get("configs") or {}))
    return sources


def load_bundle_config(
    bundle: str | Path | None = None,
    config_files: Sequence[str] | str | None = None,
    meta_file: str | Path | None = None,
    *,
    cli_overrides: Sequence[Override] = (),
    args_file: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
    check: bool = True,
    logging_file: str | Path | None = None,
    entry: str | None = None,
    strict_ids: bool = False,
    refuse_unused_ids: bool = False,
    tracking: dict | None = None,
) -> BundleConfig:
    """Load, merge, override (files < args_file < env < CLI) and check a bundle's config.

    Without config files, ``--bundle B`` loads ``configs/<entry>.*`` when it exists, else ``configs/train.*``.
    Metadata is never validated here (MONAI's runner does not): at most one warning line; ``verify`` checks it.
    ``strict_ids`` refuses overrides of ids the config lacks (without it they are added, as MONAI does).
    """
    environ = os.environ if environ is None else environ
    args_overrides: list[Override] = []
    if args_file:
        args_overrides, options = load_args_file(args_file)
        config_files = config_files or options.get("config_file")
        meta_file = meta_file or options.get("meta_file")
        logging_file = logging_file if logging_file is not None else options.get("logging_file")

    bundle_dir = resolve_bundle(str(bundle), environ) if bundle else None
    files = split_config_files(config_files)
    if not files:
        if bundle_dir is None:
            raise ConfigError("no config given", expected="--bundle DIR or --config_file FILE[,FILE...]")
        files = [find_default_config(bundle_dir, entry)]
    elif bundle_dir is not None:
        # relative --config_file names are tried inside the bundle, as `run --bundle B --config_file configs/x.json`
        files = [f if f.exists() or f.is_absolute() else bundle_dir / f for f in files]
    loaded: list[LoadedFile] = [load_file(f) for f in files]
    merged, where = merge_files(loaded)

    meta_paths = split_config_files(meta_file) if meta_file else []
    if not meta_paths:
        default_meta = (bundle_dir / "configs" / "metadata.json") if bundle_dir else files[0].parent / "metadata.json"
        if default_meta.exists():  # a named pipe or device there is refused by the loader, naming it
            meta_paths = [default_meta]
        else:  # MONAI logs an error and runs without metadata
            warnings.warn(f"no metadata file at {default_meta}; running without metadata", stacklevel=2)
    if bundle_dir is not None:
        meta_paths = [p if p.is_file() or p.is_absolute() else bundle_dir / p for p in meta_paths]
    missing = [p for p in meta_paths if not p.exists()]
    if missing:  # MONAI logs an error and runs without any of the metadata files
        warnings.warn(f"metadata file {missing[0]} not found; running without metadata", stacklevel=2)
        meta_paths = []
    meta_path: Path | None = meta_paths[-1] if meta_paths else None
    meta: dict = {}
    if meta_paths:
        meta_loaded = merge_meta_files(meta_paths)
        note = metadata_note(meta_loaded.data, ", ".join(str(p) for p in meta_paths))
        if note:
            warnings.warn(note, stacklevel=2)
        meta = meta_loaded.data
        for id_path, line in meta_loaded.lines.items():
            where[f"{META_KEY}::{id_path}"] = f"{meta_loaded.path}:{line}"
    if meta_paths or META_KEY not in merged:  # without a metadata file MONAI keeps a config file's own _meta_
        merged[META_KEY] = meta

    name = str(meta.get("name") or (bundle_dir.name if bundle_dir else files[0].stem))
    cfg = BundleConfig(name, bundle_dir, files, meta_path, merged, where, strict_ids=strict_ids,
                       refuse_unused_ids=refuse_unused_ids)
    cfg.tracking = tracking  # before the overrides: an id its settings reference is not refused as unused
    cfg.logging_file = logging_file_for(logging_file, files)
    if bundle_dir is None:
        cfg.config_root = monai_config_root(files)
    expand_file_env(cfg, environ)
    env_overrides = parse_env_overrides(environ)
    folded_args, cli_list = fold_into_args_file(args_overrides, list(cli_overrides))
    if not env_overrides:  # as MONAI: a command-line key the args file has takes effect in the file's place
        folded = {ov.key for ov in folded_args if ov.source == "cli"}
        args_overrides, cli_list = folded_args, [ov for ov in cli_list if ov.key not in folded]
    # (HPCR__ variables have no MONAI counterpart: after them the command line, its dicts merged, wins)
    apply_overrides(cfg, [*args_overrides, *env_overrides, *cli_list], environ, entry)
    if check:
        cfg.check()
    return cfg


def config_value(cfg: BundleConfig, id_path: str, default: Any = None) -> Any:
    """Return the raw (unresolved) value at ``id_path`` or ``default``."""
    try:
        return get_by_id(cfg.config, id_path)
    except (KeyError, IndexError, TypeError):
        return default

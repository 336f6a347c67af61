"""One entry point that turns a bundle, its files, overrides and environment into a checked config."""

from __future__ import annotations

import copy
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpc_runner.config.env import expand_env_refs, has_env_refs
from hpc_runner.config.ids import iter_ids, set_by_id
from hpc_runner.config.loader import LoadedFile, load_file
from hpc_runner.config.merge import locate, merge_files
from hpc_runner.config.overrides import (
    Override,
    apply_override,
    load_args_file,
    parse_env_overrides,
    suggest_ids,
)
from hpc_runner.config.references import check_references, expand_macros, load_macro_file
from hpc_runner.errors import BundleError, ConfigError

META_KEY = "_meta_"
DEFAULT_CONFIG_STEMS = ("train",)


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
    recorded: bool = False  # loaded from a run dir's config.yaml (resume, rerun, jobs), not from bundle files

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


def find_default_config(bundle_dir: Path) -> Path:
    """Return ``configs/train.{yaml,yml,json}`` of a bundle."""
    for stem in DEFAULT_CONFIG_STEMS:
        for suffix in (".yaml", ".yml", ".json"):
            candidate = bundle_dir / "configs" / f"{stem}{suffix}"
            if candidate.is_file():
                return candidate
    raise BundleError(
        "the bundle has no configs/train.yaml, train.yml or train.json",
        where=str(bundle_dir),
        expected="a bundle folder with configs/train.* (or pass --config_file)",
    )


def split_config_files(values: Sequence[str] | str | None) -> list[Path]:
    """Split ``--config_file a.yaml,b.json`` (given once or repeated) into paths, in order."""
    if values is None:
        return []
    if isinstance(values, str):
        values = [values]
    return [Path(p) for v in values for p in str(v).split(",") if p]


def expand_file_env(cfg: BundleConfig, environ: Mapping[str, str]) -> None:
    """Expand ``${env:...}`` in the values that came from config files, recording each variable used."""
    for id_path, value in list(iter_ids(cfg.config)):
        if has_env_refs(value):
            used: dict[str, str | None] = {}
            where = cfg.locate(id_path)
            set_by_id(cfg.config, id_path, expand_env_refs(value, environ, id_path=id_path, where=where, used=used))
            cfg.env_uses += [EnvUse(id_path, k, v, where) for k, v in used.items()]


def apply_overrides(cfg: BundleConfig, overrides: Sequence[Override], environ: Mapping[str, str]) -> None:
    """Apply overrides to ``cfg`` in order, expanding ${env:} in their values and recording sources."""
    for ov in overrides:
        if has_env_refs(ov.value):
            used: dict[str, str | None] = {}
            ov.value = expand_env_refs(ov.value, environ, id_path=ov.id, where=ov.origin, used=used)
            cfg.env_uses += [EnvUse(ov.id, k, v, ov.origin) for k, v in used.items()]
        apply_override(cfg.config, ov, cfg.where)
        cfg.where[ov.id] = ov.origin
        for sub, _ in iter_ids(ov.value, ov.id):
            cfg.where[sub] = ov.origin
        cfg.overrides.append(ov)


def load_bundle_config(
    bundle: str | Path | None = None,
    config_files: Sequence[str] | str | None = None,
    meta_file: str | Path | None = None,
    *,
    cli_overrides: Sequence[Override] = (),
    args_file: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
    check: bool = True,
) -> BundleConfig:
    """Load, merge, override (files < args_file < env < CLI) and check a bundle's config."""
    from hpc_runner.registry.metadata import check_metadata
    from hpc_runner.registry.search import resolve_bundle

    environ = os.environ if environ is None else environ
    args_overrides: list[Override] = []
    if args_file:
        args_overrides, options = load_args_file(args_file)
        config_files = config_files or options.get("config_file")
        meta_file = meta_file or options.get("meta_file")

    bundle_dir = resolve_bundle(str(bundle), environ) if bundle else None
    files = split_config_files(config_files)
    if not files:
        if bundle_dir is None:
            raise ConfigError("no config given", expected="--bundle DIR or --config_file FILE[,FILE...]")
        files = [find_default_config(bundle_dir)]
    elif bundle_dir is not None:
        # relative --config_file names are tried inside the bundle, as `run --bundle B --config_file configs/x.json`
        files = [f if f.exists() or f.is_absolute() else bundle_dir / f for f in files]
    loaded: list[LoadedFile] = [load_file(f) for f in files]
    merged, where = merge_files(loaded)

    meta_path: Path | None = Path(meta_file) if meta_file else None
    if meta_path is None:
        meta_path = (bundle_dir / "configs" / "metadata.json") if bundle_dir else files[0].parent / "metadata.json"
        if not meta_path.is_file():
            if bundle_dir is not None:
                raise BundleError(
                    "the bundle has no configs/metadata.json", where=str(bundle_dir), expected="a metadata file"
                )
            warnings.warn(f"no metadata file at {meta_path}; running without metadata", stacklevel=2)
            meta_path = None
    meta: dict = {}
    if meta_path is not None:
        if not meta_path.is_file() and bundle_dir is not None and not meta_path.is_absolute():
            meta_path = bundle_dir / meta_path
        meta_loaded = load_file(meta_path)
        check_metadata(meta_loaded.data, str(meta_path))
        meta = meta_loaded.data
        for id_path, line in meta_loaded.lines.items():
            where[f"{META_KEY}::{id_path}"] = f"{meta_path}:{line}"
    merged[META_KEY] = meta

    name = str(meta.get("name") or (bundle_dir.name if bundle_dir else files[0].stem))
    cfg = BundleConfig(name, bundle_dir, files, meta_path, merged, where)
    expand_file_env(cfg, environ)
    apply_overrides(cfg, [*args_overrides, *parse_env_overrides(environ), *cli_overrides], environ)
    if check:
        cfg.check()
    return cfg


def config_value(cfg: BundleConfig, id_path: str, default: Any = None) -> Any:
    """Return the raw (unresolved) value at ``id_path`` or ``default``."""
    from hpc_runner.config.ids import get_by_id

    try:
        return get_by_id(cfg.config, id_path)
    except (KeyError, IndexError, TypeError):
        return default

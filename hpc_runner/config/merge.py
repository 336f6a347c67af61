"""Merge several config files in order, exactly as MONAI's ``ConfigParser.load_config_files`` does."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from hpc_runner.config.ids import get_by_id, has_id, iter_ids, join_id, normalize_id, set_by_id
from hpc_runner.config.loader import LoadedFile
from hpc_runner.errors import ConfigError

MERGE_KEY = "+"


def merge_files(files: Sequence[LoadedFile]) -> tuple[dict, dict[str, str]]:
    """Merge loaded files (later wins; ``+key`` merges dicts / extends lists).

    Returns the merged config and ``where``: id -> ``file:line`` of its defining line.
    """
    config: dict = {}
    where: dict[str, str] = {}
    for f in files:
        for key, value in f.data.items():
            key = str(key)
            id_path = normalize_id(key[1:] if key.startswith(MERGE_KEY) else key)
            if key.startswith(MERGE_KEY) and has_id(config, id_path):
                old = get_by_id(config, id_path)
                if isinstance(old, dict) and isinstance(value, dict):
                    old.update(value)
                elif isinstance(old, list) and isinstance(value, list):
                    old.extend(value)
                else:
                    raise ConfigError(
                        f"'{key}' merges a {type(value).__name__} into a {type(old).__name__}",
                        where=f.where(id_path),
                        id_path=id_path,
                        expected="a dict merged into a dict, or a list into a list",
                    )
            else:
                if key.startswith(MERGE_KEY):
                    warnings.warn(
                        f"{f.where(id_path)}: can't merge '{key}', '{id_path}' is not defined before - copying",
                        stacklevel=2,
                    )
                try:
                    set_by_id(config, id_path, value)
                except (KeyError, IndexError, ValueError):
                    raise ConfigError(
                        f"key '{key}' sets a nested id whose parent is not defined by an earlier file",
                        where=f.where(id_path),
                        id_path=id_path,
                        expected="the parent id to exist",
                    ) from None
            where[id_path] = f.where(id_path)
            for sub, _ in iter_ids(value, id_path):
                where[sub] = f.where(sub)
    return config, where


def locate(where: dict[str, str], id_path: str) -> str | None:
    """Return where ``id_path`` (or its closest defined parent) was defined."""
    parts = normalize_id(id_path).split("::")
    while parts:
        found = where.get(join_id(*parts))
        if found:
            return found
        parts.pop()
    return None






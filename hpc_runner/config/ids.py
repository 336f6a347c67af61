"""Config ids: ``a::b::0`` paths into nested dicts and lists (legacy ``#`` accepted)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

SEP = "::"
LEGACY_SEP = "#"


def normalize_id(id_path: str) -> str:
    """Return ``id_path`` with legacy ``#`` separators written as ``::``."""
    return id_path.replace(LEGACY_SEP, SEP)


def split_id(id_path: str) -> list[str]:
    """Split an id path into its keys (``"a::b#c"`` -> ``["a", "b", "c"]``)."""
    return normalize_id(id_path).split(SEP) if id_path else []


def join_id(*keys: object) -> str:
    """Join keys into an id path, skipping empty leading parts."""
    return SEP.join(str(k) for k in keys if str(k) != "")


def _step(node: Any, key: str) -> Any:
    if isinstance(node, dict):
        return node[key]
    if isinstance(node, list):
        try:
            return node[int(key)]
        except ValueError:
            raise KeyError(key) from None
    raise KeyError(key)


def get_by_id(config: Any, id_path: str) -> Any:
    """Return the value at ``id_path``; raise KeyError (or IndexError) when it does not exist."""
    node = config
    for key in split_id(id_path):
        node = _step(node, key)
    return node


def has_id(config: Any, id_path: str) -> bool:
    """Return True when ``id_path`` exists in ``config``."""
    try:
        get_by_id(config, id_path)
    except (KeyError, IndexError, TypeError):
        return False
    return True


def set_by_id(config: dict, id_path: str, value: Any, *, create_parents: bool = False) -> None:
    """Set the value at ``id_path``; with ``create_parents``, missing dict levels are created."""
    keys = split_id(id_path)
    if not keys:
        raise KeyError("empty id")
    node: Any = config
    for key in keys[:-1]:
        if create_parents and isinstance(node, dict) and key not in node:
            node[key] = {}
        node = _step(node, key)
    last = keys[-1]
    if isinstance(node, dict):
        node[last] = value
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        raise KeyError(last)


def iter_ids(config: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Yield ``(id_path, value)`` for every node below ``config``, parents before children."""
    if isinstance(config, dict):
        items: Any = config.items()
    elif isinstance(config, list):
        items = enumerate(config)
    else:
        return
    for key, value in items:
        sub = join_id(prefix, key) if prefix else str(key)
        yield sub, value
        yield from iter_ids(value, sub)

"""Config ids: ``a::b::0`` paths into nested dicts and lists (legacy ``#`` accepted)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

SEP = "::"
LEGACY_SEP = "#"


# the ids hpc-runner itself sets: the run dir, and the bundle folder when the config has the id
OUTPUT_DIR_ID = "output_dir"
BUNDLE_ROOT_ID = "bundle_root"

def normalize_id(id_path: str) -> str:
    """Return ``id_path`` with legacy ``#`` separators written as ``::``."""
    return id_path.replace(LEGACY_SEP, SEP)


def has_empty_key(id_path: str) -> bool:
    """Return True when an id is empty or has an empty key (``a::::b``, ``::a``, ``a::``, ``a#``)."""
    return "" in normalize_id(id_path).split(SEP)


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


def _children(node: Any) -> Iterator[tuple[Any, Any]] | None:
    if isinstance(node, dict):
        return iter(node.items())
    if isinstance(node, list):
        return enumerate(node)
    return None


def iter_ids(config: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Yield ``(id_path, value)`` for every node below ``config``, parents before children."""
    # an explicit stack, not recursion: a deeply nested override value must not hit the recursion limit
    top = _children(config)
    stack: list[tuple[Iterator[tuple[Any, Any]], str]] = [(top, prefix)] if top is not None else []
    while stack:
        items, parent = stack[-1]
        for key, value in items:
            sub = join_id(parent, key) if parent else str(key)
            yield sub, value
            below = _children(value)
            if below is not None:
                stack.append((below, sub))
            break
        else:
            stack.pop()

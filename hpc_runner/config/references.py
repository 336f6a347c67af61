"""Static checks of ``@ref``/``%macro`` ids before anything runs, mirroring MONAI's resolver rules."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from hpc_runner.config.ids import LEGACY_SEP, SEP, get_by_id, has_id, iter_ids, join_id, normalize_id
from hpc_runner.config.loader import load_file
from hpc_runner.config.merge import locate
from hpc_runner.errors import ConfigError
from hpc_runner.records.shape import MAX_DEPTH

REF_KEY = "@"
MACRO_KEY = "%"
EXPR_KEY = "$"
# the same patterns as monai.bundle.ReferenceResolver / ConfigParser
_REF_PATTERN = re.compile(rf"{REF_KEY}(?:\w*)(?:{SEP}\w*)*")
_RELATIVE_PREFIX = re.compile(rf"(?:{REF_KEY}|{MACRO_KEY})(?:{SEP})+")
_PATH_IN_MACRO = re.compile(rf"(.*\.(json|yaml|yml)(?=(?:{SEP}.*)|$))", re.IGNORECASE)


def refs_in_string(value: str) -> list[str]:
    """Return the ids a string refers to: all ``@id`` in a ``$`` expression, or the whole ``@id``."""
    value = normalize_id(value)
    is_expr = value.startswith(EXPR_KEY)
    return [m[1:] for m in _REF_PATTERN.findall(value) if is_expr or value == m]


def resolve_relative_ids(id_path: str, value: str) -> str:
    """Rewrite relative ids (``@::x`` = sibling, ``@::::x`` = uncle) as absolute ones, as MONAI does."""
    value = normalize_id(value)
    prefixes = sorted(set(_RELATIVE_PREFIX.findall(value)), reverse=True)
    current = id_path.split(SEP)
    for p in prefixes:
        sym = REF_KEY if REF_KEY in p else MACRO_KEY
        levels = p[len(sym) :].count(SEP)
        if levels > len(current):
            raise ConfigError(f"the relative id in '{value}' goes above the top of the config", id_path=id_path)
        new = "" if levels == len(current) else SEP.join(current[:-levels]) + SEP
        value = value.replace(p, sym + new)
    return value


def split_macro(src: str) -> tuple[str, str]:
    """Split ``file.yaml::a::b`` into ``("file.yaml", "a::b")``; a pure id gives ``("", id)``."""
    src = normalize_id(src)
    found = _PATH_IN_MACRO.findall(src)
    if not found:
        return "", src
    path = found[0][0]
    rest = src.rsplit(path, 1)[1]
    return path, rest[len(SEP) :] if rest.startswith(SEP) else ""


def expand_macros(
    config: dict, load: Callable[[str], Any], *, where: Mapping[str, str] | None = None
) -> dict:
    """Return a copy of ``config`` with relative ids made absolute and ``%`` macros replaced.

    ``load(path)`` reads another config file for ``%file::id`` macros.
    """
    try:
        return _expand_macros(config, load, where or {})
    except RecursionError:  # files are depth-checked when loaded; an override value can still be too deep
        raise _too_deep("expanding macros and relative ids") from None


def _too_deep(doing: str) -> ConfigError:
    return ConfigError(
        f"the config is nested too deeply for {doing} (an override value nested hundreds of levels deep?)",
        expected=f"at most {MAX_DEPTH} levels of nesting",
    )


def _expand_macros(config: dict, load: Callable[[str], Any], where: Mapping[str, str]) -> dict:
    root = copy.deepcopy(config)

    def visit(node: Any, id_path: str) -> Any:
        if isinstance(node, dict):
            for k in list(node):
                node[k] = visit(node[k], join_id(id_path, k) if id_path else str(k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                node[i] = visit(v, join_id(id_path, i) if id_path else str(i))
        elif isinstance(node, str):
            node = resolve_relative_ids(id_path, node)
            if node.startswith(MACRO_KEY):
                path, ids = split_macro(node[len(MACRO_KEY) :])
                source = root if not path else load(path)
                try:
                    return copy.deepcopy(get_by_id(source, ids))
                except (KeyError, IndexError, TypeError):
                    raise ConfigError(
                        f"macro '{node}' names id '{ids}', which is not in {path or 'the config'}",
                        where=locate(where, id_path),
                        id_path=id_path,
                        expected="an existing id",
                    ) from None
        return node

    return visit(root, "")


def check_references(config: dict, where: Mapping[str, str], suggest: Callable[[str], list[str]]) -> None:
    """Raise ConfigError for an ``@ref`` to a missing id or a circular chain of references."""
    refs_below: dict[str, set[str]] = {}
    for id_path, value in iter_ids(config):
        if LEGACY_SEP in id_path and (
            (isinstance(value, dict) and "_target_" in value) or (isinstance(value, str) and value.startswith(EXPR_KEY))
        ):  # MONAI resolves the item by its id, read with '#' as '::': a key holding '#' is never found
            raise ConfigError(
                f"a key with '#' holds a component or expression, which MONAI cannot resolve: it reads '#' in "
                f"the id as '::' and looks for '{normalize_id(id_path)}'",
                where=locate(where, id_path),
                id_path=id_path,
                expected="keys without '#' ('#' separates the keys of an id, as '::' does)",
            )
        if isinstance(value, str):
            for ref in refs_in_string(value):
                if not ref:  # MONAI: `@` with no id names the root item "", which holds this one
                    raise ConfigError(
                        f"'@' with no id after it in {value!r} refers to the whole config, which holds this item: "
                        "MONAI fails with a circular reference",
                        where=locate(where, id_path),
                        id_path=id_path,
                        expected="'@' followed by an id (in an expression: torch.matmul(x, y) for x @ y, "
                        "chr(64) for the character)",
                    )
                if not has_id(config, ref):
                    close = suggest(ref)
                    raise ConfigError(
                        f"'@{ref}' refers to an id that is not in the config",
                        where=locate(where, id_path),
                        id_path=id_path,
                        expected="a reference to an existing id",
                        hint=f"Did you mean: {', '.join('@' + c for c in close)}?" if close else None,
                    )
                # an item depends on every reference found anywhere below it (MONAI resolves subtrees)
                parts = id_path.split(SEP)
                for n in range(1, len(parts) + 1):
                    refs_below.setdefault(SEP.join(parts[:n]), set()).add(normalize_id(ref))
    _check_cycles(refs_below, where)


def _check_cycles(graph: dict[str, set[str]], where: Mapping[str, str]) -> None:
    done: set[str] = set()
    for start in graph:
        if start in done:
            continue
        # iterative DFS keeping the path, so a long chain cannot hit the recursion limit
        path: list[str] = [start]
        on_path = {start}
        stack = [iter(sorted(graph.get(start, ())))]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                stack.pop()
                done.add(path[-1])
                on_path.discard(path.pop())
                continue
            if nxt in on_path:
                cycle = [*path[path.index(nxt) :], nxt]
                raise ConfigError(
                    "circular reference: " + " -> ".join("@" + c for c in cycle),
                    where=locate(where, cycle[0]),
                    id_path=cycle[0],
                    expected="references that do not loop back on themselves",
                )
            if nxt in done:
                continue
            path.append(nxt)
            on_path.add(nxt)
            stack.append(iter(sorted(graph.get(nxt, ()))))


def load_macro_file(path: str, base: Path | None = None) -> Any:
    """Read a file named in a ``%file``/``%file::id`` macro (relative to the working directory, as MONAI).

    Its content may be any JSON/YAML value (``"Dataset"``, a list), as MONAI's ``%file`` takes it.
    """
    p = Path(path)
    if not p.is_absolute() and base is not None and not p.exists():
        p = base / p
    return load_file(p, mapping=False).data

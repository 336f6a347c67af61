"""Overrides from the command line, an args file and ``HPCR__`` variables, applied by id."""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpc_runner.config.env import env_override_vars, env_var_to_id
from hpc_runner.config.ids import get_by_id, has_empty_key, has_id, iter_ids, normalize_id, set_by_id
from hpc_runner.config.loader import record_lines, report_duplicates
from hpc_runner.config.values import PASS_THROUGH_PREFIXES, Yaml12Loader, parse_value
from hpc_runner.errors import ConfigError
from hpc_runner.records.json_out import json_copy
from hpc_runner.records.numbers import INT64_MAX, INT64_MIN
from hpc_runner.records.read import RecordError, read_record_text
from hpc_runner.records.shape import compose_checked

ADD_PREFIX = "+"
# args-file keys that are options of `run` rather than override ids (as in MONAI's args_file)
ARGS_FILE_MAX_BYTES = 16 << 20  # an args file is a list of overrides: a few KB
ARGS_FILE_OPTIONS = ("config_file", "meta_file", "logging_file", "tracking", "run_id", "init_id", "final_id")


@dataclass
class Override:
    """One ``id = value`` override and where it came from."""

    id: str
    value: Any
    source: str  # "cli", "env" or "args_file"
    origin: str  # "--optimizer::lr", "HPCR__optimizer__lr" or "args.yaml:3"
    add: bool = False
    raw: str | None = None
    replaced: str | None = field(default=None)  # where the value it replaced was defined
    key: str | None = None  # the id as written (``a#b``), which MONAI's update_kwargs matches args-file keys by

    def spelling(self) -> str:
        """Return the key as the user wrote it (with ``+`` for an added id)."""
        return (ADD_PREFIX if self.add else "") + self.id


SWEPT = "sweep"  # the source of a swept point's overrides: a typo in its id stops it (bundle_config STRICT_SOURCES)


def point_override(spelled_id: str, value: Any) -> Override:
    """Return the Override of one recorded point's ``id`` (``+id`` adds it) and value: how a sweep, a tune and the
    job that runs a point (jobs/job.py) read a point's overrides back from its record."""
    add = spelled_id.startswith(ADD_PREFIX)
    key = spelled_id[1:] if add else spelled_id
    return Override(key, json_copy(value), SWEPT, f"--sweep {key}", add=add)


def _split_key(key: str, origin: str) -> tuple[str, bool]:
    add = key.startswith(ADD_PREFIX)
    key = normalize_id(key[1:] if add else key)
    if not key or key.startswith("::") or key.endswith("::"):
        raise ConfigError(f"override {origin!r} has an empty id", expected="--ID VALUE, e.g. --optimizer::lr 1e-3")
    if has_empty_key(key):  # --+x::::y would add an id with an empty key
        raise ConfigError(f"override {origin!r} has an empty key in its id {key!r}",
                          expected="keys separated by a single '::', e.g. --optimizer::lr 1e-3")
    return key, add


def parse_cli_overrides(tokens: Iterable[str]) -> list[Override]:
    """Parse ``--KEY VALUE`` / ``--KEY=VALUE`` tokens into overrides (``--+KEY`` adds an id)."""
    tokens = list(tokens)
    result: list[Override] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if not token.startswith("--") or token == "--":
            raise ConfigError(
                f"unexpected argument {token!r}",
                expected="overrides of the form --ID VALUE or --ID=VALUE, e.g. --optimizer::lr 1e-3",
            )
        body = token[2:]
        if "=" in body:
            key, raw = body.split("=", 1)
            i += 1
        else:
            if i + 1 >= len(tokens):
                raise ConfigError(
                    f"override {token} has no value", expected=f"{token} VALUE or {token}=VALUE"
                )
            key, raw = body, tokens[i + 1]
            i += 2
        id_path, add = _split_key(key, token)
        value = parse_value(raw, what=f"value of --{key}")
        result.append(Override(id_path, value, "cli", f"--{key}", add=add, raw=raw, key=key))
    return result


def parse_env_overrides(environ: Mapping[str, str]) -> list[Override]:
    """Return one override per ``HPCR__`` variable (``HPCR__a__b=1`` sets id ``a::b``)."""
    result = []
    for name, raw in env_override_vars(environ):
        id_path, add = _split_key(env_var_to_id(name), name)
        value = parse_value(raw, what=f"value of {name}")
        result.append(Override(id_path, value, "env", name, add=add, raw=raw))
    return result


def load_args_file(path: str | Path) -> tuple[list[Override], dict[str, Any]]:
    """Load an args file (YAML/JSON mapping of id to value); return its overrides and file options."""
    path = Path(path)
    try:  # bounded, and never a device: --args_file /dev/zero must not read forever
        text = read_record_text(path, "args file", ARGS_FILE_MAX_BYTES, pipe=True)
    except RecordError as err:
        raise ConfigError(err.message, where=err.where, expected=err.expected) from None
    if text is None:
        raise ConfigError("cannot read the args file (No such file or directory)", where=str(path))
    # depth and alias limits first (the composer recurses and aliases expand when walked); every YAML error, a
    # control character included, is a ConfigError naming the file and line
    node, data = compose_checked(Yaml12Loader, text, path, what="args file")
    if node is not None:  # MONAI loads an args file with its duplicate-key check, like any config file

        duplicates: list = []
        record_lines(node, "", {}, duplicates)
        report_duplicates(duplicates, path)
    if node is None:  # an empty args file (nothing, or only comments) overrides nothing; `null` is no mapping
        data = {}
    if not isinstance(data, dict):
        kind = "null" if data is None else ("an " if type(data).__name__[0] in "aeiou" else "a ") + type(data).__name__
        raise ConfigError(f"the args file holds {kind}, not a mapping", where=str(path),
                          expected="a mapping of config ids to values")
    lines = {str(k.value): k.start_mark.line + 1 for k, _ in node.value} if node is not None else {}
    options = {k: data.pop(k) for k in ARGS_FILE_OPTIONS if k in data}
    result = []
    for key, value in data.items():
        origin = f"{path}:{lines.get(str(key), 1)}"
        id_path, add = _split_key(str(key), origin)
        result.append(Override(id_path, value, "args_file", origin, add=add, key=str(key)))
    return result, options


def _update_kwargs(old: dict, new: dict) -> dict:
    """MONAI's ``update_kwargs(old, **new)``: None values dropped, dicts merged recursively, ``+key`` merged."""
    out = dict(old)
    for k, v in new.items():
        if v is None:
            continue
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _update_kwargs(out[k], v)
        elif isinstance(k, str) and k.startswith(ADD_PREFIX) and k[1:] in out:
            out[k[1:]] = _merge(out[k[1:]], v)
        else:
            out[k[1:] if isinstance(k, str) and k.startswith(ADD_PREFIX) else k] = v
    return out


def fold_into_args_file(args: list[Override], cli: list[Override]) -> tuple[list[Override], list[Override]]:
    """Combine args-file and command-line overrides as MONAI's ``update_kwargs(args_file, **overrides)`` does.

    A command-line key spelled as an args-file key takes that key's place in the file's order, and a dict given
    for a dict is merged into it (recursively); the other command-line overrides follow. Returns the args-file
    overrides with those replaced, and the command-line overrides with their merged values, in their own order.
    """
    by_key = {ov.key: i for i, ov in enumerate(args) if ov.key is not None and not ov.add}
    args, out = list(args), []
    for ov in cli:
        i = by_key.get(ov.key) if ov.key is not None and not ov.add else None
        if i is not None:
            old = args[i].value
            value = _update_kwargs(old, ov.value) if isinstance(ov.value, dict) and isinstance(old, dict) else ov.value
            ov = Override(ov.id, value, ov.source, ov.origin, add=ov.add, raw=ov.raw, key=ov.key)
            args[i] = Override(ov.id, value, ov.source, ov.origin, add=ov.add, raw=ov.raw, key=ov.key)
        out.append(ov)
    return args, out


def suggest_ids(id_path: str, config: Any, limit: int = 3) -> list[str]:
    """Return the existing ids closest to ``id_path`` (for 'did you mean')."""
    ids = [i for i, _ in iter_ids(config) if not i.startswith("_meta_")]
    close = difflib.get_close_matches(id_path, ids, n=limit, cutoff=0.6)
    last = id_path.split("::")[-1]
    close += [i for i in ids if i.split("::")[-1] == last and i not in close]
    return close[:limit]


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, dict | list):
        return "collection"
    return "other"


def beyond_int64(value: Any) -> int | None:
    """Return the first whole number in ``value`` (itself, or an item of its lists and mappings, keys included)
    outside the signed 64-bit range, else None: no config id can hold one (``--max_epochs 999...9`` would
    train for ever, a seed or a size overflows in torch or numpy)."""
    stack = [value]
    while stack:  # a loop: a parsed value's depth is bounded, its width is not
        item = stack.pop()
        if isinstance(item, int) and not isinstance(item, bool) and not INT64_MIN <= item <= INT64_MAX:
            return item
        if isinstance(item, dict):
            stack += [*item.keys(), *item.values()]
        elif isinstance(item, list | tuple):
            stack += item
    return None


def _int64_expected(big: int) -> str:
    digits = len(str(abs(big))) if big.bit_length() < 10_000 else f"over {big.bit_length() * 3 // 10}"
    return (f"whole numbers from {INT64_MIN} to {INT64_MAX} (the signed 64-bit range torch and numpy use); "
            f"it holds one of {digits} digits")


def check_value_type(old: Any, new: Any) -> str | None:
    """Return what was expected when ``new`` cannot sensibly replace ``old`` (or holds a whole number past 64 bits,
    which no id can hold), else None."""
    big = beyond_int64(new)
    if big is not None:
        return _int64_expected(big)
    if isinstance(new, str) and new.startswith(PASS_THROUGH_PREFIXES):
        return None  # expressions, references and macros are typed by the resolver
    if old is None or new is None or isinstance(old, str):
        return None
    old_kind, new_kind = _kind(old), _kind(new)
    if isinstance(old, int) and not isinstance(old, bool) and isinstance(new, float) and not math.isfinite(new):
        return f"a whole number (like the current {old!r}); {new!r} is not a count"
    if old_kind == new_kind:
        return None
    if old_kind == "collection" and isinstance(new, dict | list):
        return None
    if old_kind == "number":
        return f"a number (like the current {old!r})"
    if old_kind == "bool":
        return "true or false"
    if old_kind == "collection":
        return f"a {type(old).__name__} (like the current value), an @reference or a $expression"
    return None


def _merge(old: Any, new: Any) -> Any:
    if isinstance(old, dict) and isinstance(new, dict):
        return {**old, **new}
    if isinstance(old, list) and isinstance(new, list):
        return old + new
    return new


# ids MONAI's runner itself reads or its --tracking settings add (`--tracking_uri X` is documented MONAI usage):
# adding them is not worth a warning
QUIET_NEW_IDS = ("bundle_root", "dataset_dir", "output_dir", "tracking_uri", "experiment_name", "run_name",
                 "save_execute_config", "is_not_rank0")


def _parent_id(id_path: str) -> str:
    return id_path.rsplit("::", 1)[0] if "::" in id_path else ""


def typo_candidates(id_path: str, config: Any, limit: int = 3) -> list[str]:
    """Return ids ``id_path`` may be a typo of: a sibling whose key is nearly the same (``max_epoch`` for
    ``max_epochs``), or an id elsewhere with the same last key (``--lr`` for ``optimizer::lr``)."""
    parent, last = _parent_id(id_path), id_path.rsplit("::", 1)[-1]
    node = get_by_id(config, parent) if parent and has_id(config, parent) else (config if not parent else None)
    found: list[str] = []
    if isinstance(node, dict):
        siblings = [str(k) for k in node if not str(k).startswith("_")]
        found += ["::".join(filter(None, [parent, k])) for k in difflib.get_close_matches(last, siblings, 3, 0.8)]
    found += [i for i, _ in iter_ids(config) if i.rsplit("::", 1)[-1] == last and i != id_path
              and not i.startswith("_meta_") and i not in found]
    return found[:limit]


def added_id_warning(ov: Override, config: Any) -> str | None:
    """Return the one-line warning for an override that adds an id the config lacks (None: not worth one)."""
    if ov.id in QUIET_NEW_IDS:
        return None
    close = typo_candidates(ov.id, config)
    mean = f"; did you mean {', '.join(close)}?" if close else ""
    return (f"{ov.origin} adds id '{ov.id}', which the config does not have (as MONAI's runner does){mean} "
            f"(--strict-ids refuses ids the config lacks)")


def apply_override(config: dict, ov: Override, where_defined: Mapping[str, str], *, strict: bool = True) -> None:
    """Apply one override to ``config`` in place; raise ConfigError for bad values.

    An id the config lacks is refused when ``strict`` (unless the override adds it, ``+id``); otherwise it is
    added under its existing parent, as MONAI's ``ConfigParser.update`` does.
    """
    big = beyond_int64(ov.value)
    if big is not None:  # whatever it replaces or adds: no id holds it
        raise ConfigError(f"override {ov.origin} gives a whole number past 64 bits for id '{ov.id}'",
                          where=ov.origin if ov.source == "args_file" else None, id_path=ov.id,
                          expected=_int64_expected(big))
    exists = has_id(config, ov.id)
    if not exists and not ov.add and not strict:
        parent = _parent_id(ov.id)
        if parent and not isinstance(get_by_id(config, parent) if has_id(config, parent) else None, dict | list):
            last = ov.id.rsplit("::", 1)[-1]
            near = typo_candidates(parent, config)
            close = [f"{c}::{last}" for c in near if has_id(config, f"{c}::{last}")] or near
            raise ConfigError(
                f"override {ov.origin} names id '{ov.id}', whose parent '{parent}' is not in the config "
                "(MONAI's runner fails on it too)",
                where=ov.origin if ov.source == "args_file" else None,
                expected="an id under an existing mapping or list (--+ID VALUE creates missing parents)",
                hint=f"Did you mean: {', '.join(close)}?" if close else None,
            )
        try:
            set_by_id(config, ov.id, ov.value)
        except (KeyError, IndexError, ValueError):
            raise ConfigError(
                f"override {ov.origin} names id '{ov.id}': its last key is not an index of the list '{parent}'",
                expected=f"an index below {len(get_by_id(config, parent))}",
            ) from None
        return
    if not exists and not ov.add:
        close = suggest_ids(ov.id, config)
        hint = f"Did you mean: {', '.join(close)}?" if close else None
        add = f"--+{ov.id}" if ov.source == "cli" else f"+{ov.id}"
        raise ConfigError(
            f"override {ov.origin} names id '{ov.id}', which is not in the config",
            where=ov.origin if ov.source == "args_file" else None, id_path=ov.id,
            expected=f"an existing id (to add a new one, write {add} VALUE)",
            hint=hint,
        )
    if exists:
        old = get_by_id(config, ov.id)
        ov.replaced = where_defined.get(ov.id)
        if not ov.add:
            expected = check_value_type(old, ov.value)
            if expected:
                raise ConfigError(
                    f"override {ov.origin} gives {ov.value!r} for id '{ov.id}'",
                    where=ov.replaced,
                    id_path=ov.id,
                    expected=expected,
                    hint="Quote a value to force a string, e.g. \"'text'\"",
                )
            set_by_id(config, ov.id, ov.value)
        else:
            set_by_id(config, ov.id, _merge(old, ov.value))
    else:
        try:
            set_by_id(config, ov.id, ov.value, create_parents=True)
        except (KeyError, IndexError, ValueError):
            raise ConfigError(
                f"override {ov.origin} cannot add id '{ov.id}': its parent is not a mapping",
                expected="a new key under an existing mapping",
            ) from None

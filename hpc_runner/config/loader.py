"""Load JSON and YAML config files as MONAI does, keeping the line of every id for error messages."""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from hpc_runner.config.ids import join_id, normalize_id
from hpc_runner.errors import ConfigError
from hpc_runner.records.read import read_record_text
from hpc_runner.records.shape import MAX_CONFIG_NODES, check_json_depth, check_yaml_shape, compose_checked

try:  # libyaml is ~10x faster and keeps the same marks
    _YamlLoader: type = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - pure-Python PyYAML
    _YamlLoader = yaml.SafeLoader

SUFFIXES = (".json", ".yaml", ".yml")
# The largest config, metadata or macro file read (real ones are under 100 KB; a 16 MiB file of few values
# loads in ~2.5 s and 250 MB, and MAX_CONFIG_NODES bounds one of many small values).
MAX_CONFIG_BYTES = 16 << 20


@dataclass
class LoadedFile:
    """One config file: its content and the line (1-based) where each id is defined."""

    path: Path
    data: Any
    lines: dict[str, int] = field(default_factory=dict)

    def where(self, id_path: str) -> str:
        """Return ``file:line`` for ``id_path`` (or just the file when the line is unknown)."""
        line = self.lines.get(normalize_id(id_path))
        return f"{self.path}:{line}" if line else str(self.path)


DUPLICATE_ENV = "MONAI_FAIL_ON_DUPLICATE_CONFIG"  # "1": a duplicate key is an error, as in MONAI
_MERGE_TAG = "tag:yaml.org,2002:merge"


@dataclass
class Duplicate:
    """A key given twice in one mapping: the key as MONAI sees it, its line and the line of its first use."""

    key: Any
    line: int
    first: int


def _key_object(constructor: yaml.constructor.SafeConstructor, node: yaml.Node) -> Any:
    """The key as MONAI's CheckKeyDuplicatesYamlLoader compares it: the constructed (YAML 1.1 typed) scalar."""
    try:
        return constructor.construct_object(node, deep=True)
    except yaml.YAMLError:
        return node.value


def record_lines(
    node: yaml.Node, prefix: str, lines: dict[str, int], duplicates: list[Duplicate] | None = None,
    constructor: yaml.constructor.SafeConstructor | None = None,
) -> None:
    """Walk a composed YAML node tree: record the line of every key and list item, and each duplicate key.

    Keys are compared as MONAI compares them (constructed values in a set, so ``1`` and ``true`` are one
    key, ``"1"`` another); merge keys (``<<``) and keys that are collections are not compared.
    """
    constructor = constructor or yaml.constructor.SafeConstructor()
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if duplicates is not None and isinstance(key_node, yaml.ScalarNode) and key_node.tag != _MERGE_TAG:
                key_obj = _key_object(constructor, key_node)
                try:
                    if key_obj in seen:
                        duplicates.append(Duplicate(key_obj, line, seen[key_obj]))
                    else:
                        seen[key_obj] = line
                except TypeError:  # an unhashable key: MONAI would fail on it; the loader reports that
                    pass
            key = normalize_id(str(key_node.value))
            sub = join_id(prefix, key.lstrip("+")) if prefix else key.lstrip("+")
            lines[sub] = line
            record_lines(value_node, sub, lines, duplicates, constructor)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            sub = join_id(prefix, i) if prefix else str(i)
            lines[sub] = item.start_mark.line + 1
            record_lines(item, sub, lines, duplicates, constructor)


def report_duplicates(duplicates: list[Duplicate], path: Path | str, environ: Any = None) -> None:
    """Warn about each duplicate key as MONAI does, or (``MONAI_FAIL_ON_DUPLICATE_CONFIG=1``) refuse the first."""
    import os

    environ = os.environ if environ is None else environ
    for dup in duplicates:
        if environ.get(DUPLICATE_ENV, "0") == "1":
            raise ConfigError(
                f"Duplicate key: `{dup.key}` (first at line {dup.first})",
                where=f"{path}:{dup.line}",
                expected=f"each key once per mapping ({DUPLICATE_ENV}=1 makes a duplicate an error, as in MONAI)",
            )
        warnings.warn(f"{path}:{dup.line}: Duplicate key: `{dup.key}` (first at line {dup.first}); the last one "
                      "wins, as in MONAI", stacklevel=3)


def _json_duplicates(text: str) -> list[Any]:
    """Duplicate keys as MONAI's ``check_key_duplicates`` (json's object_pairs_hook) finds them."""
    found: list[Any] = []

    def hook(pairs: list[tuple[Any, Any]]) -> dict:
        keys: set[Any] = set()
        for k, _ in pairs:
            if k in keys:
                found.append(k)
            keys.add(k)
        return dict(pairs)

    json.loads(text, object_pairs_hook=hook)
    return found


def _yaml_lines(text: str, path: Path) -> tuple[dict[str, int], list[Duplicate]]:
    loader = _YamlLoader(text)
    try:
        node = loader.get_single_node()
    finally:
        loader.dispose()
    lines: dict[str, int] = {}
    duplicates: list[Duplicate] = []
    if node is not None:
        record_lines(node, "", lines, duplicates)
    return lines, duplicates


def _empty(path: Path) -> ConfigError:
    return ConfigError(
        "the file is empty (no content, only comments, or null)",
        where=str(path),
        expected="a mapping of ids to values ({} for a file that deliberately sets nothing)",
    )


def load_file(path: str | Path, *, mapping: bool = True) -> LoadedFile:
    """Load one JSON/YAML config file; raise ConfigError naming file and line on any problem.

    ``mapping=False`` accepts any value at the top level (a ``%file`` macro's file may hold a string or a list,
    as in MONAI); config, metadata and args files must hold a mapping.
    """
    path = Path(path)
    if path.suffix.lower() not in SUFFIXES:
        raise ConfigError(
            f"unsupported config file type '{path.suffix or path.name}'",
            where=str(path),
            expected="a .json, .yaml or .yml file",
        )
    # bounded, a regular file only: /dev/zero or a named pipe (a %fifo.json macro) is refused before it is opened
    text = read_record_text(path, "config file", MAX_CONFIG_BYTES, error=ConfigError)
    if text is None:
        raise ConfigError("config file not found", where=str(path), expected="an existing file")

    if path.suffix.lower() == ".json":
        if not text.strip():
            raise _empty(path)
        check_json_depth(text, path)
        try:  # JSON is YAML flow syntax: the event stream counts its values before anything is built
            check_yaml_shape(_YamlLoader(text), path, MAX_CONFIG_NODES)
        except yaml.YAMLError:  # rare: valid JSON the YAML parser refuses; commas bound its values instead
            if text.count(",") > MAX_CONFIG_NODES:
                raise ConfigError(f"the file holds more than {MAX_CONFIG_NODES:,} values", where=str(path),
                                  expected="a config of at most that many values") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"JSON syntax error: {exc.msg}", where=f"{path}:{exc.lineno}:{exc.colno}", expected="valid JSON"
            ) from None
        try:  # JSON is YAML flow syntax, so the YAML composer can tell the lines (and find duplicate keys)
            lines, duplicates = _yaml_lines(text, path)
        except yaml.YAMLError:  # rare: valid JSON the composer refuses; json's own hook still finds them
            lines, duplicates = {}, [Duplicate(k, 1, 1) for k in _json_duplicates(text)]
    else:
        # every YAML error (syntax, a control character, a second document) is a ConfigError naming the line
        node, data = compose_checked(_YamlLoader, text, path, MAX_CONFIG_NODES, what="config file")
        lines = {}
        duplicates = []
        if node is not None:
            record_lines(node, "", lines, duplicates)
    report_duplicates(duplicates, path)
    if data is None:  # no content, only comments, or `null`: MONAI fails on it later with an AttributeError
        raise _empty(path)
    if mapping and not isinstance(data, dict):
        raise ConfigError(
            f"the top level is a {type(data).__name__}",
            where=f"{path}:1",
            expected="a mapping of ids to values at the top level",
        )
    return LoadedFile(path=path, data=data, lines=lines)

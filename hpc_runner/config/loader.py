"""Load JSON and YAML config files as MONAI does, keeping the line of every id for error messages."""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from hpc_runner.config.ids import join_id, normalize_id
from hpc_runner.config.nesting import check_json_depth, compose_checked
from hpc_runner.errors import ConfigError

try:  # libyaml is ~10x faster and keeps the same marks
    _YamlLoader: type = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - pure-Python PyYAML
    _YamlLoader = yaml.SafeLoader

SUFFIXES = (".json", ".yaml", ".yml")


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


def _record_lines(node: yaml.Node, prefix: str, lines: dict[str, int], path: Path) -> None:
    """Walk a composed YAML node tree and record the line of every key and list item."""
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = normalize_id(str(key_node.value))
            line = key_node.start_mark.line + 1
            if key in seen:
                warnings.warn(
                    f"{path}:{line}: duplicate key '{key}' (first at line {seen[key]}); the last one wins",
                    stacklevel=2,
                )
            seen[key] = line
            sub = join_id(prefix, key.lstrip("+")) if prefix else key.lstrip("+")
            lines[sub] = line
            _record_lines(value_node, sub, lines, path)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            sub = join_id(prefix, i) if prefix else str(i)
            lines[sub] = item.start_mark.line + 1
            _record_lines(item, sub, lines, path)


def _yaml_lines(text: str, path: Path) -> dict[str, int]:
    loader = _YamlLoader(text)
    try:
        node = loader.get_single_node()
    finally:
        loader.dispose()
    lines: dict[str, int] = {}
    if node is not None:
        _record_lines(node, "", lines, path)
    return lines


def _empty(path: Path) -> ConfigError:
    return ConfigError(
        "the file is empty (no content, only comments, or null)",
        where=str(path),
        expected="a mapping of ids to values ({} for a file that deliberately sets nothing)",
    )


def _syntax_error(path: Path, exc: yaml.MarkedYAMLError) -> ConfigError:
    mark = exc.problem_mark or exc.context_mark
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
    problem = " ".join(p for p in (exc.context, exc.problem) if p) or str(exc)
    return ConfigError(f"YAML syntax error: {problem}", where=where, expected="valid YAML")


def load_file(path: str | Path) -> LoadedFile:
    """Load one JSON/YAML config file; raise ConfigError naming file and line on any problem."""
    path = Path(path)
    if path.suffix.lower() not in SUFFIXES:
        raise ConfigError(
            f"unsupported config file type '{path.suffix or path.name}'",
            where=str(path),
            expected="a .json, .yaml or .yml file",
        )
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("config file not found", where=str(path), expected="an existing file") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file ({exc.__class__.__name__})", where=str(path)) from None

    if path.suffix.lower() == ".json":
        if not text.strip():
            raise _empty(path)
        check_json_depth(text, path)
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"JSON syntax error: {exc.msg}", where=f"{path}:{exc.lineno}:{exc.colno}", expected="valid JSON"
            ) from None
        try:  # JSON is YAML flow syntax, so the YAML composer can tell the lines
            lines = _yaml_lines(text, path)
        except yaml.YAMLError:
            lines = {}
    else:
        try:
            node, data = compose_checked(_YamlLoader, text, path)
        except yaml.MarkedYAMLError as exc:
            raise _syntax_error(path, exc) from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"YAML error: {exc}", where=str(path), expected="valid YAML") from None
        lines = {}
        if node is not None:
            _record_lines(node, "", lines, path)
    if data is None:  # no content, only comments, or `null`: MONAI fails on it later with an AttributeError
        raise _empty(path)
    if not isinstance(data, dict):
        raise ConfigError(
            f"the top level is a {type(data).__name__}",
            where=f"{path}:1",
            expected="a mapping of ids to values at the top level",
        )
    return LoadedFile(path=path, data=data, lines=lines)

"""Sweep specs: ``--sweep 'id=v1,v2'`` (grid or ``--zip``), ``range()``/``linspace()``/``logspace()``
and ``--sweep-file``, expanded into points (one mapping of id to value per run).

Values are typed like command-line overrides (``hpc_runner.config.values.parse_value``) and split at
top-level commas only, so ``[8,16],[16,32]`` is two lists and ``'a,b'`` one string.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpc_runner.config.ids import OUTPUT_DIR_ID, has_empty_key, normalize_id
from hpc_runner.config.values import Yaml12Loader, format_value, parse_value
from hpc_runner.errors import ClusterError, ConfigError
from hpc_runner.records.read import read_record_text
from hpc_runner.records.shape import compose_checked

ADD_PREFIX = "+"
_FUNC = re.compile(r"\A(range|linspace|logspace)\((.*)\)\Z", re.S)
MAX_POINTS = 1_000_000
# ids hpc-runner sets itself for every point (engine/runner.py prepare_run: each point's run dir), whatever the
# point's overrides say: sweeping one gives identical points, so it is refused
RUNNER_SET_IDS = {OUTPUT_DIR_ID: "hpc-runner sets to each point's own run dir (points/NNNN)"}


@dataclass
class Axis:
    """One dimension of the sweep: one id (or several zipped ids) and the values it takes."""

    ids: tuple[str, ...]  # spelled as the user wrote them, ``+`` kept for added ids
    values: list[tuple[Any, ...]]  # one tuple per step, aligned with ids
    source: str  # where it was given, for error messages

    def to_record(self) -> dict[str, Any]:
        """Return the axis as recorded in sweep.yaml."""
        return {"ids": list(self.ids), "values": [list(v) for v in self.values], "source": self.source}


@dataclass
class SweepSpec:
    """The axes of a sweep; its points are their cartesian product, first axis slowest."""

    axes: list[Axis] = field(default_factory=list)

    @property
    def ids(self) -> list[str]:
        """Return every swept id in axis order."""
        return [i for a in self.axes for i in a.ids]

    def size(self) -> int:
        """Return the number of points."""
        return math.prod(len(a.values) for a in self.axes) if self.axes else 0

    def points(self) -> list[dict[str, Any]]:
        """Return every point as ``{id: value}`` (ids spelled with ``+`` when they add an id)."""
        if self.size() > MAX_POINTS:
            raise ClusterError(f"the sweep has {self.size():,} points", expected=f"at most {MAX_POINTS:,}")
        points = []
        for combo in itertools.product(*(a.values for a in self.axes)):
            point: dict[str, Any] = {}
            for axis, values in zip(self.axes, combo):
                point.update(zip(axis.ids, values))
            points.append(point)
        return points

    def to_record(self) -> list[dict[str, Any]]:
        """Return the axes as recorded in sweep.yaml."""
        return [a.to_record() for a in self.axes]


def split_top_level(text: str, sep: str = ",") -> list[str]:
    """Split ``text`` at ``sep`` outside brackets, braces, parentheses and quotes."""
    parts, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced {ch!r} at character {i + 1}")
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if quote:
        raise ValueError(f"unclosed quote {quote}")
    if depth:
        raise ValueError("unclosed bracket")
    parts.append(text[start:])
    return parts


def _number(text: str, what: str) -> float | int:
    value = parse_value(text.strip(), what=what)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{text.strip()!r} is not a number")
    return value


def _clean(x: float) -> float:
    return float(f"{x:.12g}")


def _check_count(n: int, name: str) -> None:
    if n > MAX_POINTS:
        raise ValueError(f"{name}() gives {n:,} values, more than the {MAX_POINTS:,} points a sweep may have")


def expand_function(name: str, args_text: str) -> list[Any]:
    """Return the values of ``range(a,b[,step])`` (end excluded), ``linspace(a,b,n)`` or ``logspace(a,b,n)``."""
    args = [_number(a, f"argument of {name}()") for a in split_top_level(args_text)]
    if name == "range":
        if not 1 <= len(args) <= 3:
            raise ValueError("range() takes 1 to 3 numbers: range(stop), range(start, stop[, step])")
        start, stop, step = (0, args[0], 1) if len(args) == 1 else (args[0], args[1], args[2] if len(args) == 3 else 1)
        if step == 0:
            raise ValueError("range() step must not be zero")
        if all(isinstance(a, int) for a in (start, stop, step)):
            _check_count(len(range(start, stop, step)), name)  # counted before a value is made
            return list(range(start, stop, step))
        count = (stop - start) / step
        if not math.isfinite(count):
            raise ValueError("range() of numbers that are not finite")
        n = max(0, math.ceil(count - 1e-9))
        _check_count(n, name)
        return [_clean(start + i * step) for i in range(n)]
    if len(args) != 3 or not isinstance(args[2], int) or args[2] < 1:
        raise ValueError(f"{name}() takes start, stop and a whole number of values: {name}(a, b, n)")
    start, stop, n = args
    _check_count(n, name)
    values = [start + (stop - start) * i / (n - 1) for i in range(n)] if n > 1 else [start]
    if name == "logspace":
        return [_clean(10.0**v) for v in values]
    return [_clean(v) for v in values]


def parse_values(text: str, what: str) -> list[Any]:
    """Return the values of a comma-separated list (``1e-3,1e-4``, ``[8,16],[16,32]``, ``range(1,4)``)."""
    try:
        items = split_top_level(text)
    except ValueError as exc:
        raise ClusterError(f"{what}: {exc}", expected="values separated by commas, e.g. 1e-3,1e-4") from None
    values: list[Any] = []
    for item in items:
        stripped = item.strip()
        if not stripped:
            raise ClusterError(f"{what} has an empty value", expected="values separated by single commas")
        m = _FUNC.match(stripped)
        if m:
            try:
                expanded = expand_function(m.group(1), m.group(2))
            except (ValueError, ConfigError) as exc:
                raise ClusterError(f"{what}: {stripped}: {exc}") from None
            if not expanded:
                raise ClusterError(f"{what}: {stripped} gives no values")
            values.extend(expanded)
            if len(values) > MAX_POINTS:
                raise ClusterError(f"{what} has more than {MAX_POINTS:,} values", expected="a smaller sweep")
            continue
        try:
            values.append(parse_value(stripped, what=f"value {stripped!r} of {what}"))
        except ConfigError as exc:
            raise ClusterError(exc.message, expected=exc.expected, hint=exc.hint) from None
    return values


def _check_id(key: str, what: str) -> str:
    key = key.strip()
    add = key.startswith(ADD_PREFIX)
    body = normalize_id(key[1:] if add else key)
    if not body or has_empty_key(body) or any(c.isspace() for c in body):  # a::::b: an empty key
        raise ClusterError(f"{what} has no valid id before '='", expected="ID=VALUES, e.g. optimizer::lr=1e-3,1e-4")
    return (ADD_PREFIX if add else "") + body


def parse_sweep_option(text: str) -> tuple[str, list[Any]]:
    """Parse one ``--sweep 'id=v1,v2'`` into its id and values."""
    what = f"--sweep {text!r}"
    key, sep, rest = text.partition("=")
    if not sep:
        raise ClusterError(f"{what} has no '='", expected="ID=VALUES, e.g. --sweep 'optimizer::lr=1e-3,1e-4'")
    return _check_id(key, what), parse_values(rest, what)


def _file_values(value: Any, what: str) -> list[Any]:
    if isinstance(value, str):
        return parse_values(value, what)
    if isinstance(value, list):
        out: list[Any] = []
        for item in value:
            m = _FUNC.match(item.strip()) if isinstance(item, str) else None
            out.extend(parse_values(item, what) if m else [item])
        if not out:
            raise ClusterError(f"{what} has no values", expected="a non-empty list")
        return out
    return [value]


SWEEP_FILE_KEYS = ("grid", "zip", "points")
_SWEEP_FILE_FORM = "grid: {id: [values]}, zip: {id: [values]} (same lengths), points: [{id: value}, ...]"


def _read_sweep_yaml(path: Path) -> tuple[Any, dict[str, int]]:
    """Return the sweep file's data and the line of each top-level key."""
    import yaml

    text = read_record_text(path, "sweep file", error=ClusterError)
    if text is None:
        raise ClusterError("the sweep file does not exist", where=str(path), expected="--sweep-file FILE (YAML)")
    # depth and alias limits first; every YAML error is a ClusterError naming the file and line
    node, data = compose_checked(Yaml12Loader, text, path, what="sweep file", error=ClusterError)
    lines = {}
    if isinstance(node, yaml.MappingNode):
        lines = {str(k.value): k.start_mark.line + 1 for k, _ in node.value}
    return data, lines


def load_sweep_file(path: str | Path) -> list[Axis]:
    """Read a sweep file (``grid:``, ``zip:``, ``points:``) into axes."""
    import difflib

    path = Path(path)
    data, lines = _read_sweep_yaml(path)
    if not isinstance(data, dict) or not data:
        raise ClusterError(
            "a sweep file is a mapping with grid:, zip: and/or points:", where=str(path), expected=_SWEEP_FILE_FORM
        )
    for key in data:
        if key not in SWEEP_FILE_KEYS:
            close = difflib.get_close_matches(str(key), SWEEP_FILE_KEYS, n=1)
            raise ClusterError(
                f"unknown key '{key}': a sweep file is a mapping with grid:, zip: and/or points:",
                where=f"{path}:{lines[str(key)]}" if str(key) in lines else str(path),
                expected=_SWEEP_FILE_FORM,
                hint=f"Did you mean '{close[0]}:'?" if close else None,
            )
    axes: list[Axis] = []
    for key, value in (data.get("grid") or {}).items():
        what = f"{path}: grid: {key}"
        axes.append(Axis((_check_id(str(key), what),), [(v,) for v in _file_values(value, what)], what))
    if data.get("zip"):
        zipped = {
            _check_id(str(k), f"{path}: zip: {k}"): _file_values(v, f"{path}: zip: {k}") for k, v in data["zip"].items()
        }
        axes.append(_zip_axis(zipped, f"{path}: zip"))
    if data.get("points"):
        points = data["points"]
        if not isinstance(points, list) or not all(isinstance(p, dict) and p for p in points):
            raise ClusterError("points: must be a list of mappings id: value", where=str(path))
        ids = list(dict.fromkeys(_check_id(str(k), f"{path}: points") for p in points for k in p))
        rows = []
        for n, p in enumerate(points):
            spelled = {_check_id(str(k), f"{path}: points"): v for k, v in p.items()}
            if set(spelled) != set(ids):
                raise ClusterError(
                    f"point {n} of points: sets {sorted(spelled)}",
                    where=str(path),
                    expected=f"every point to set the same ids: {', '.join(ids)}",
                )
            rows.append(tuple(spelled[i] for i in ids))
        axes.append(Axis(tuple(ids), rows, f"{path}: points"))
    return axes


def _zip_axis(values: dict[str, list[Any]], source: str) -> Axis:
    lengths = {k: len(v) for k, v in values.items()}
    if len(set(lengths.values())) > 1:
        raise ClusterError(
            f"{source}: zipped values have different lengths ({', '.join(f'{k}: {n}' for k, n in lengths.items())})",
            expected="the same number of values for every zipped id",
        )
    return Axis(tuple(values), list(zip(*values.values())), source)


def build_spec(sweeps: Sequence[str] = (), zip_values: bool = False, sweep_file: str | Path | None = None) -> SweepSpec:
    """Return the sweep described by ``--sweep`` options, ``--zip`` and ``--sweep-file``."""
    axes: list[Axis] = load_sweep_file(sweep_file) if sweep_file else []
    parsed = [(text, *parse_sweep_option(text)) for text in sweeps]
    if zip_values and parsed:
        axes.append(_zip_axis({i: v for _, i, v in parsed}, "--zip --sweep"))
    else:
        axes += [Axis((i,), [(v,) for v in vals], f"--sweep {text!r}") for text, i, vals in parsed]
    if not axes:
        raise ClusterError("no sweep given", expected="--sweep 'ID=V1,V2' (repeatable) or --sweep-file FILE")
    seen: dict[str, str] = {}
    for axis in axes:
        for i in axis.ids:
            bare = i.lstrip(ADD_PREFIX)
            if bare in seen:
                raise ClusterError(
                    f"id '{bare}' is swept twice ({seen[bare]} and {axis.source})",
                    expected="each id in one --sweep (use --zip or a sweep file to pair ids)",
                )
            seen[bare] = axis.source
    for axis in axes:
        _check_not_runner_set(axis)
        _check_finite(axis)
        _check_distinct(axis)
    return SweepSpec(axes)


def _check_not_runner_set(axis: Axis) -> None:
    """ClusterError when the axis sweeps an id hpc-runner sets for every point itself (``output_dir``)."""
    for i in axis.ids:
        bare = normalize_id(i.lstrip(ADD_PREFIX))
        if bare in RUNNER_SET_IDS:
            raise ClusterError(f"{axis.source} sweeps id '{bare}', which {RUNNER_SET_IDS[bare]}: every point would "
                               "run the same; nothing was written or submitted",
                               expected="a sweep of ids the runner leaves to the config (--output_dir DIR names the "
                               "sweep dir)")


def _non_finite(value: Any) -> float | None:
    """The first non-finite number in ``value`` (lists and mappings looked into), else None."""
    if isinstance(value, float) and not math.isfinite(value):
        return value
    if isinstance(value, str) and len(value) < 16:  # text a number reader takes for one: 'nan', '-inf', 'Infinity'
        try:
            number = float(value)
        except ValueError:
            return None
        return None if math.isfinite(number) else number
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list | tuple) else ()
    for item in items:
        found = _non_finite(item)
        if found is not None:
            return found
    return None


def _check_finite(axis: Axis) -> None:
    """ClusterError when a value is NaN or infinite (``nan``, ``inf``, ``1e999``): no config means it, and no
    record or JSON output can hold it."""
    for n, values in enumerate(axis.values):
        for i, value in zip(axis.ids, values):
            if _non_finite(value) is not None:
                raise ClusterError(f"{axis.source}: value {n + 1} of id '{i}' is {format_cell(value)}, which is not a "
                                   "finite number; nothing was written or submitted",
                                   expected="finite numbers (1e999 is infinity; nan and inf are not values to sweep)")


def _check_distinct(axis: Axis) -> None:
    """ClusterError when an axis gives the same value twice: two identical jobs (``--sweep lr=0.1,0.1``)."""
    import json

    first: dict[str, int] = {}
    for n, values in enumerate(axis.values):
        key = json.dumps(list(values), sort_keys=True, default=repr)  # 1 and 1.0 differ, as they do in a config
        if key in first:
            point = describe_point(dict(zip(axis.ids, values)))
            raise ClusterError(
                f"{axis.source} gives {point} twice (value {first[key] + 1} and value {n + 1}): two identical jobs",
                expected="each value of a swept id once (each set of values once for zipped ids and points:)",
            )
        first[key] = n


def describe_point(point: dict[str, Any]) -> str:
    """Return ``id=value id=value`` for messages and tables."""
    return " ".join(f"{k}={format_cell(v)}" for k, v in point.items())


def format_cell(value: Any) -> str:
    """Return a value as it would be typed on the command line."""
    try:
        return format_value(value)
    except TypeError:
        return repr(value)

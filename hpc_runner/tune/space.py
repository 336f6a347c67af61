"""Search spaces: ``--space 'ID=loguniform(a,b)'``, ``uniform(a,b)``, ``int(a,b[,step])``, ``choice(V1,V2,...)``.

Values are typed like sweep values and overrides (``hpc_runner.config.values.parse_value``) and a
choice list is split at top-level commas only, so ``choice([8,16],[16,32])`` has two lists. Optuna
(imported lazily: the CLI parses spaces before anything heavy loads) sees a choice that is not a
plain scalar as its canonical JSON text, and the trial gets the typed value back.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hpc_runner.config.ids import normalize_id
from hpc_runner.config.values import parse_value
from hpc_runner.errors import ConfigError, UserError
from hpc_runner.records.json_out import json_copy
from hpc_runner.sweep.spec import split_top_level

ADD_PREFIX = "+"  # as in sweeps: ``+id`` adds an id the config does not have
FUNCTIONS = ("loguniform", "uniform", "int", "choice")
_CALL = re.compile(r"^\s*([A-Za-z_]\w*)\s*\((.*)\)\s*\Z", re.S)
_FORM = "ID=loguniform(a,b), ID=uniform(a,b), ID=int(a,b[,step]) or ID=choice(V1,V2,...)"


@dataclass(frozen=True)
class Param:
    """One searched id: its kind (a function of FUNCTIONS) and its bounds or choices."""

    id: str  # spelled as given, ``+`` kept for an added id
    kind: str
    low: float | int | None = None
    high: float | int | None = None
    step: int | None = None
    choices: tuple[Any, ...] = ()
    text: str = ""  # the --space option it came from

    def distribution(self) -> Any:
        """Return the Optuna distribution of this parameter."""
        from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

        if self.kind == "loguniform":
            return FloatDistribution(float(self.low), float(self.high), log=True)  # type: ignore[arg-type]
        if self.kind == "uniform":
            return FloatDistribution(float(self.low), float(self.high))  # type: ignore[arg-type]
        if self.kind == "int":
            return IntDistribution(int(self.low), int(self.high), step=self.step or 1)  # type: ignore[arg-type]
        return CategoricalDistribution([to_optuna_choice(c) for c in self.choices])

    def typed(self, optuna_value: Any) -> Any:
        """Return the value the config gets for the value Optuna chose."""
        if self.kind == "choice":
            for c in self.choices:
                if to_optuna_choice(c) == optuna_value:
                    return json_copy(c)
            raise ValueError(f"{optuna_value!r} is not a choice of {self.id}")
        if self.kind == "int":
            return int(optuna_value)
        return float(optuna_value)

    def first(self) -> Any:
        """Return the value this parameter takes in the corners of the other parameters."""
        return json_copy(self.choices[0]) if self.kind == "choice" else self.low

    def corners(self) -> list[Any]:
        """Return the values the pre-flight must check: both bounds, or every choice."""
        if self.kind == "choice":
            return [json_copy(c) for c in self.choices]
        high = self.high
        if self.kind == "int" and self.step:
            high = self.low + (self.high - self.low) // self.step * self.step  # type: ignore[operator]
        return [self.low, high]


@dataclass(frozen=True)
class Space:
    """The parameters of a tune, in the order given."""

    params: tuple[Param, ...]

    @property
    def ids(self) -> list[str]:
        """Return the searched ids as spelled."""
        return [p.id for p in self.params]

    def distributions(self) -> dict[str, Any]:
        """Return ``{id: Optuna distribution}`` for ``study.ask``."""
        return {p.id: p.distribution() for p in self.params}

    def typed(self, optuna_params: dict[str, Any]) -> dict[str, Any]:
        """Return a trial's params as config overrides ``{id: typed value}``."""
        return {p.id: p.typed(optuna_params[p.id]) for p in self.params}

    def texts(self) -> list[str]:
        """Return the --space options, as recorded in sweep.yaml (parse_space reads them back)."""
        return [p.text for p in self.params]


def to_optuna_choice(value: Any) -> Any:
    """Return what Optuna stores for a choice: scalars as they are, anything else as canonical JSON text."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _error(text: str, message: str, expected: str | None = None, hint: str | None = None, id_path: str | None = None):
    return UserError(f"--space {text!r}: {message}", id_path=id_path, expected=expected, hint=hint)


def _check_id(key: str, text: str) -> str:
    key = key.strip()
    add = key.startswith(ADD_PREFIX)
    body = normalize_id(key[1:] if add else key)
    if not body or body.startswith("::") or body.endswith("::") or any(c.isspace() for c in body):
        raise _error(text, "no valid id before '='", expected=_FORM)
    return (ADD_PREFIX if add else "") + body


def _values(args: str, text: str, id_: str) -> list[Any]:
    try:
        items = split_top_level(args)
    except ValueError as exc:
        raise _error(text, str(exc), expected=_FORM, id_path=id_) from None
    out = []
    for item in items:
        if not item.strip():
            raise _error(text, "has an empty value", expected="values separated by single commas", id_path=id_)
        try:
            out.append(parse_value(item.strip(), what=f"value {item.strip()!r} of --space {text!r}"))
        except ConfigError as exc:
            raise UserError(exc.message, id_path=id_, expected=exc.expected, hint=exc.hint) from None
    return out


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _bounds(kind: str, args: list[Any], text: str, id_: str) -> Param:
    if kind == "int":
        if len(args) not in (2, 3) or not all(isinstance(a, int) and not isinstance(a, bool) for a in args):
            raise _error(text, f"int() takes two or three whole numbers, got {', '.join(map(repr, args)) or 'none'}",
                         expected="int(a,b) or int(a,b,step) with whole numbers", id_path=id_)
        low, high, step = args[0], args[1], (args[2] if len(args) == 3 else 1)
        if step < 1:
            raise _error(text, f"step {step} is not positive", expected="int(a,b,step) with step >= 1", id_path=id_)
        if not low < high:
            raise _error(text, f"the bounds {low}, {high} are not in order", expected="int(a,b) with a < b",
                         id_path=id_)
        if (high - low) % step:
            raise _error(text, f"{high} - {low} is not a multiple of the step {step}",
                         expected="int(a,b,step) where b - a is a multiple of step", id_path=id_)
        return Param(id_, kind, low, high, step, text=text)
    if len(args) != 2 or not all(_is_number(a) for a in args):
        raise _error(text, f"{kind}() takes two numbers, got {', '.join(map(repr, args)) or 'none'}",
                     expected=f"{kind}(a,b) with numbers a < b", id_path=id_)
    low, high = float(args[0]), float(args[1])
    if kind == "loguniform" and low <= 0:
        raise _error(text, f"loguniform() needs positive bounds, got {args[0]}",
                     expected="loguniform(a,b) with 0 < a < b", id_path=id_)
    if not low < high:
        raise _error(text, f"the bounds {args[0]}, {args[1]} are not in order",
                     expected=f"{kind}(a,b) with a < b", id_path=id_)
    return Param(id_, kind, low, high, text=text)


def parse_space_option(text: str) -> Param:
    """Parse one ``--space 'ID=function(args)'`` into a Param; raise UserError naming what is wrong."""
    key, sep, rest = text.partition("=")
    if not sep:
        raise _error(text, "has no '='", expected=_FORM)
    id_ = _check_id(key, text)
    m = _CALL.match(rest)
    if not m:
        raise _error(text, f"{rest.strip()!r} is not a function call", expected=_FORM, id_path=id_)
    kind, args_text = m.group(1), m.group(2)
    if kind not in FUNCTIONS:
        close = difflib.get_close_matches(kind, FUNCTIONS, n=1)
        raise _error(text, f"unknown function {kind}()", expected=f"one of {', '.join(FUNCTIONS)}",
                     hint=f"Did you mean {close[0]}()?" if close else None, id_path=id_)
    args = _values(args_text, text, id_) if args_text.strip() else []
    if kind != "choice":
        return _bounds(kind, args, text, id_)
    if len(args) < 2:
        raise _error(text, f"choice() has {len(args)} value(s)", expected="at least two values",
                     hint=f"To fix {id_} at one value, give it as an override: --{id_.lstrip('+')} VALUE",
                     id_path=id_)
    seen: dict[Any, Any] = {}
    for v in args:
        key_ = to_optuna_choice(v)  # 1, 1.0 and true are one choice to Optuna (it compares with ==)
        if key_ in seen:
            raise _error(text, f"the value {json.dumps(v)} is given twice (or equals {json.dumps(seen[key_])})",
                         expected="distinct choices", id_path=id_)
        seen[key_] = v
    return Param(id_, kind, choices=tuple(args), text=text)


def parse_space(options: Sequence[str]) -> Space:
    """Return the space of the ``--space`` options; raise UserError on none, bad ones or an id given twice."""
    if not options:
        raise UserError("no search space given", expected="--space 'ID=loguniform(a,b)' (repeatable); " + _FORM)
    params = [parse_space_option(t) for t in options]
    seen: dict[str, str] = {}
    for p in params:
        bare = p.id.lstrip(ADD_PREFIX)
        if bare in seen:
            raise UserError(f"id '{bare}' is searched twice (--space {seen[bare]!r} and --space {p.text!r})",
                            id_path=bare, expected="each id in one --space")
        seen[bare] = p.text
    return Space(tuple(params))


def space_corners(space: Space) -> list[dict[str, Any]]:
    """Return the points the pre-flight checks: each bound and each choice, the other ids at their first value."""
    base = {p.id: p.first() for p in space.params}
    points, keys = [], set()
    for p in space.params:
        for value in p.corners():
            point = {**{k: json_copy(v) for k, v in base.items()}, p.id: value}
            key = json.dumps(point, sort_keys=True, default=repr)
            if key not in keys:
                keys.add(key)
                points.append(point)
    return points

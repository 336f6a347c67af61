"""Evaluate a ``$`` expression only when it is provably pure: no call, attribute or name we did not list.

``config --resolve`` promises that nothing is built or run. An allow-list of method *names* is not
enough (``os.replace('a', 'b')`` is a call named ``replace``), so this is an interpreter of a small
subset of Python, not ``eval``: literals, references (given as values), arithmetic, comparisons,
boolean logic, conditional expressions, subscripts, f-strings, the pure functions of ``PURE_FUNCTIONS``
(looked up by their dotted name in *our* table, never in the expression's namespace), and the
methods of ``PURE_METHODS`` on plain values (str, numbers, lists, tuples, dicts). Anything else
raises ``NotPure`` naming the construct, and the expression is shown unevaluated.

Everything is bounded *before* it is computed: the expression's length and depth before it is parsed
(``records/shape.py``: ``parse_expression``), and the size of what an operation would make before it
runs: ``Sizes`` bounds how many characters ``str()`` of a value takes (memoised, so a list of 100,000
references to one list costs one walk), ``*``, ``%``, ``str.format``, f-strings, ``join``, ``replace`` and
``zfill`` predict their result from it, every other call's arguments must be small enough to show, and
``sum`` adds numbers only (``sum(lists, [])`` is quadratic). ``10**10**10``, ``'%0999999999d' % 0``,
``'{:>{}}'.format('', 999999999)`` and ``str([[0]*100000]*100000)`` are refused in microseconds.
"""

from __future__ import annotations

import ast
import math
import operator
import os.path
import re
import string
from collections.abc import Callable, Mapping
from typing import Any

from hpc_runner.errors import ConfigError
from hpc_runner.records.shape import parse_expression

MAX_POWER = 64  # largest exponent of **
MAX_SIZE = 100_000  # the most characters a value an operation produces may take to show
MAX_BITS = 100_000  # largest integer an operation may produce
_BIG_NUMBER = re.compile(r"\d{6,}")  # a width or precision in a format spec that would build a huge string
_DIGITS = re.compile(r"\d+")
# printf-style conversions: %[(key)][flags][width][.precision][length]type
_PERCENT = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d*))?[hlL]?(.)", re.S)
MAX_ROUND_DIGITS = 1_000  # round(5, -10**8) computes 10**(10**8)


class NotPure(Exception):
    """The expression uses something this interpreter cannot prove free of effects; the message says what."""


def _torch_device(*args: Any) -> Any:
    import torch

    return torch.device(*args)


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _cuda_count() -> int:
    import torch

    return torch.cuda.device_count()


def _bounded_range(*args: int) -> list[int]:
    r = range(*args)
    if len(r) > MAX_SIZE:
        raise NotPure(f"range of {len(r)} items is too large to show")
    return list(r)


# dotted name as written in a bundle -> the function we call (each reads at most the environment)
PURE_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "str": str, "int": int, "float": float, "bool": bool, "len": len, "min": min, "max": max, "sum": sum,
    "abs": abs, "round": round, "sorted": sorted, "list": list, "tuple": tuple, "dict": dict,
    "range": _bounded_range,
    "os.path.join": os.path.join, "os.path.basename": os.path.basename, "os.path.dirname": os.path.dirname,
    "os.path.splitext": os.path.splitext, "os.path.abspath": os.path.abspath,
    "os.path.expanduser": os.path.expanduser, "os.environ.get": os.environ.get, "os.getenv": os.getenv,
    "os.cpu_count": os.cpu_count, "math.sqrt": math.sqrt, "math.ceil": math.ceil, "math.floor": math.floor,
    "torch.device": _torch_device, "torch.cuda.is_available": _cuda_available,
    "torch.cuda.device_count": _cuda_count,
}
PURE_METHODS: dict[type, frozenset[str]] = {
    str: frozenset({"format", "replace", "join", "split", "rsplit", "lower", "upper", "strip", "lstrip", "rstrip",
                    "startswith", "endswith", "zfill", "title", "capitalize", "count", "find"}),
    dict: frozenset({"get", "keys", "values", "items"}),
    list: frozenset({"index", "count"}),
    tuple: frozenset({"index", "count"}),
    int: frozenset({"bit_length"}),
    float: frozenset({"is_integer"}),
}
_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg, ast.Not: operator.not_, ast.Invert: operator.invert}
_CMP = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
        ast.GtE: operator.ge, ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
        ast.Is: operator.is_, ast.IsNot: operator.is_not}
_PLAIN = (str, int, float, bool, type(None), list, tuple, dict)


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


class Sizes:
    """An upper bound of how many characters ``str()`` of a value takes, capped at ``limit`` + 1.

    Containers are walked once (memoised by identity, the value kept alive while the memo lives) and the
    walk stops once over the cap, so a value shared 100,000 times costs one walk, and none costs more
    than ``limit`` steps."""

    def __init__(self, limit: int = MAX_SIZE) -> None:
        self.limit = limit
        self.memo: dict[int, tuple[Any, int]] = {}

    def __call__(self, value: Any) -> int:
        if isinstance(value, str | bytes):
            return min(len(value) + 2, self.limit + 1)
        if value is None or isinstance(value, bool | float | complex):
            return 24
        if isinstance(value, int):
            return value.bit_length() * 30103 // 100000 + 2
        hit = self.memo.get(id(value))
        if hit is not None and hit[0] is value:
            return hit[1]
        total = 2
        try:
            if isinstance(value, dict):
                for k, v in value.items():
                    total += self(k) + self(v) + 4
                    if total > self.limit:
                        break
            elif isinstance(value, list | tuple | set | frozenset | range | type({}.keys()) | type({}.values())
                            | type({}.items())):
                for item in value:
                    total += self(item) + 2
                    if total > self.limit:
                        break
            else:
                total = 64  # a device or another small object a pure function returns
        except RecursionError:
            raise NotPure("a value nested too deeply to show") from None
        total = min(total, self.limit + 1)
        self.memo[id(value)] = (value, total)
        return total

    def sized(self, value: Any) -> Any:
        """Return ``value``; NotPure when it would take more than ``limit`` characters to show."""
        if self(value) > self.limit:
            raise NotPure(f"a value of over {self.limit:,} characters is too large to show")
        return value


def _spec_width(spec: str) -> int:
    """The most characters a format spec's numbers (width, precision) may add."""
    return sum(int(d) if len(d) < 7 else MAX_SIZE + 1 for d in _DIGITS.findall(spec))


def _too_large_power(base: Any, exponent: Any) -> bool:
    if not isinstance(exponent, int | float) or abs(exponent) > MAX_POWER:
        return True
    return isinstance(base, int) and isinstance(exponent, int) and base.bit_length() * exponent > MAX_BITS


# calls whose result is no larger than their arguments' parts: their arguments may be large (a config list)
_REDUCING = frozenset({len, min, max, abs, bool, int, float, round, sum, math.sqrt, math.ceil, math.floor})
_REDUCING_METHODS = frozenset({"index", "count", "find", "startswith", "endswith", "get", "bit_length",
                               "is_integer"})


def _format_size(fmt: str, args: list[Any], kwargs: Mapping[str, Any], size: Sizes) -> int:
    """An upper bound of ``fmt.format(*args, **kwargs)``'s length; NotPure for a spec taken from an argument."""
    arg = max((size(a) for a in [*args, *kwargs.values()]), default=0)
    total = len(fmt)
    for _, field, spec, _ in string.Formatter().parse(fmt):
        if field is None:
            continue
        if "{" in (spec or ""):
            raise NotPure("str.format with a width or precision taken from an argument is not evaluated")
        if "." in field:
            raise NotPure("str.format reading an attribute is not evaluated")
        total += arg + _spec_width(spec or "")
    return total


def _percent_size(fmt: str | bytes, values: Any, size: Sizes) -> int:
    """An upper bound of ``fmt % values``' length; NotPure for a ``*`` width or precision."""
    text = fmt.decode("latin-1") if isinstance(fmt, bytes) else fmt
    total, arg = len(text), size(values)
    for m in _PERCENT.finditer(text):
        if "*" in (m.group(1) or "", m.group(2) or ""):
            raise NotPure("% with a width or precision taken from an argument is not evaluated")
        total += arg + _spec_width(f"{m.group(1) or ''} {m.group(2) or ''}")
    return total


def _check_call(fn: Any, args: list[Any], kwargs: Mapping[str, Any], size: Sizes) -> None:
    """NotPure when a call's result could be too large to show or too slow to compute (checked before it runs)."""
    receiver, name = getattr(fn, "__self__", None), getattr(fn, "__name__", "")
    if fn not in _REDUCING and not (receiver is not None and name in _REDUCING_METHODS):
        inputs = sum(size(a) for a in [*args, *kwargs.values()]) + (size(receiver) if receiver is not None else 0)
        if inputs > MAX_SIZE:
            raise NotPure(f"{name or 'the call'} of values over {MAX_SIZE:,} characters is not evaluated")
    if fn is sum:
        items = [*(args[0] if args and isinstance(args[0], list | tuple) else [None]), *args[1:],
                 *kwargs.values()]
        if not all(isinstance(x, int | float) for x in items):
            raise NotPure("sum of anything but a list of numbers is not evaluated (sum(lists, []) is quadratic)")
    if fn is round and len(args) > 1 and isinstance(args[1], int) and abs(args[1]) > MAX_ROUND_DIGITS:
        raise NotPure(f"round to {args[1]} digits is not evaluated")
    if not isinstance(receiver, str):
        return
    if name == "replace" and len(args) >= 2:
        grow = len(receiver) * max(1, size(args[1])) + size(args[1])
    elif name == "join" and args:
        grow = size(args[0]) + len(args[0]) * len(receiver) if isinstance(args[0], list | tuple | str) else 0
    elif name == "zfill" and args:
        grow = args[0] if isinstance(args[0], int) else 0
    elif name == "format":
        grow = MAX_SIZE + 1 if _BIG_NUMBER.search(receiver) else _format_size(receiver, args, kwargs, size)
    else:
        return
    if grow > MAX_SIZE:
        raise NotPure(f"str.{name} would make a string too large to show")


class _Interpreter:
    def __init__(self, names: Mapping[str, Any]) -> None:
        self.names = names
        self.size = Sizes()

    def run(self, node: ast.AST) -> Any:
        method = getattr(self, f"_{type(node).__name__}", None)
        if method is None:
            raise NotPure(f"{type(node).__name__.lower()} is not evaluated")
        return method(node)

    def _Expression(self, node: ast.Expression) -> Any:
        return self.run(node.body)

    def _Constant(self, node: ast.Constant) -> Any:
        return node.value

    def _Name(self, node: ast.Name) -> Any:
        if node.id in self.names:
            return self.names[node.id]
        if node.id in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[node.id]
        raise NotPure(f"name '{node.id}' is not evaluated")

    def _List(self, node: ast.List) -> Any:
        return self.size.sized([self.run(e) for e in node.elts])

    def _Tuple(self, node: ast.Tuple) -> Any:
        return self.size.sized(tuple(self.run(e) for e in node.elts))

    def _Dict(self, node: ast.Dict) -> Any:
        if any(k is None for k in node.keys):
            raise NotPure("** in a dict is not evaluated")
        return self.size.sized({self.run(k): self.run(v) for k, v in zip(node.keys, node.values)})  # type: ignore[arg-type]

    def _BinOp(self, node: ast.BinOp) -> Any:
        left, right = self.run(node.left), self.run(node.right)
        op = type(node.op)
        if op not in _BIN:
            raise NotPure(f"operator {op.__name__} is not evaluated")
        if op is ast.Pow and _too_large_power(left, right):
            raise NotPure(f"** {right!r} is too large a power to evaluate")
        if op is ast.Mult:
            seq = isinstance(left, str | bytes | list | tuple) or isinstance(right, str | bytes | list | tuple)
            if seq:
                seq_value, times = (left, right) if isinstance(left, str | bytes | list | tuple) else (right, left)
                one = len(seq_value) if isinstance(seq_value, str | bytes) else self.size(seq_value)
                if not isinstance(times, int) or one * max(times, 0) > MAX_SIZE:
                    raise NotPure("a repeated sequence too large to show")
            elif isinstance(left, int) and isinstance(right, int) and left.bit_length() + right.bit_length() > MAX_BITS:
                raise NotPure("a product too large to evaluate")
        if op is ast.Mod and isinstance(left, str | bytes) and _percent_size(left, right, self.size) > MAX_SIZE:
            raise NotPure("% would make a string too large to show")
        return self.size.sized(_BIN[op](left, right))

    def _UnaryOp(self, node: ast.UnaryOp) -> Any:
        return _UNARY[type(node.op)](self.run(node.operand))

    def _BoolOp(self, node: ast.BoolOp) -> Any:
        value: Any = None
        for v in node.values:
            value = self.run(v)
            if isinstance(node.op, ast.And) and not value:
                return value
            if isinstance(node.op, ast.Or) and value:
                return value
        return value

    def _Compare(self, node: ast.Compare) -> Any:
        left = self.run(node.left)
        for op, comp in zip(node.ops, node.comparators):
            right = self.run(comp)
            if not _CMP[type(op)](left, right):
                return False
            left = right
        return True

    def _IfExp(self, node: ast.IfExp) -> Any:
        return self.run(node.body) if self.run(node.test) else self.run(node.orelse)

    def _Subscript(self, node: ast.Subscript) -> Any:
        value = self.run(node.value)
        if not isinstance(value, _PLAIN):
            raise NotPure("a subscript of a non-plain value is not evaluated")
        return value[self.run(node.slice)]

    def _Slice(self, node: ast.Slice) -> Any:
        parts = [self.run(p) if p is not None else None for p in (node.lower, node.upper, node.step)]
        return slice(*parts)

    def _JoinedStr(self, node: ast.JoinedStr) -> Any:
        return self.size.sized("".join(str(self.run(v)) for v in node.values))

    def _FormattedValue(self, node: ast.FormattedValue) -> Any:
        value = self.run(node.value)
        if not isinstance(value, _PLAIN):
            raise NotPure("formatting a non-plain value is not evaluated")
        spec = self.run(node.format_spec) if node.format_spec is not None else ""
        if _BIG_NUMBER.search(str(spec)) or _spec_width(str(spec)) > MAX_SIZE:
            raise NotPure(f"format spec {str(spec)[:20]!r} is too wide to show")
        self.size.sized(value)
        if node.conversion == ord("r"):
            value = repr(value)
        return format(value, spec)

    def _Call(self, node: ast.Call) -> Any:
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            raise NotPure("* and ** arguments are not evaluated")
        name = _dotted(node.func)
        if name is not None and name.split(".")[0] not in self.names:  # a global name: only our table's
            if name not in PURE_FUNCTIONS:
                raise NotPure(f"calls {name}")
            fn = PURE_FUNCTIONS[name]
        elif isinstance(node.func, ast.Attribute):
            receiver = self.run(node.func.value)
            allowed = PURE_METHODS.get(type(receiver), frozenset())
            if node.func.attr not in allowed:
                raise NotPure(f"calls {name or node.func.attr}")
            fn = getattr(receiver, node.func.attr)
        else:
            raise NotPure(f"calls {name or 'an expression'}")
        args = [self.run(a) for a in node.args]
        kwargs = {k.arg: self.run(k.value) for k in node.keywords}
        if any(not isinstance(a, _PLAIN) for a in [*args, *kwargs.values()]):
            raise NotPure(f"calls {name} on a value that is not plain data")
        _check_call(fn, args, kwargs, self.size)
        return self.size.sized(fn(*args, **kwargs))


def evaluate_pure(expr: str, names: Mapping[str, Any] | None = None) -> Any:
    """Return the value of ``expr`` (``names``: references already resolved); NotPure when it may have effects."""
    try:  # its length and depth bounded before and after parsing
        tree = parse_expression(expr, mode="eval")
    except ConfigError as err:
        raise NotPure(err.message) from None
    try:
        return _Interpreter(names or {}).run(tree)
    except NotPure:
        raise
    except RecursionError:
        raise NotPure("nested too deeply to evaluate") from None
    except Exception as exc:  # e.g. 1/0, a KeyError: the expression fails, so it is shown as written
        raise NotPure(f"raises {type(exc).__name__}: {exc}") from None

"""Type command-line and environment values the way YAML 1.2 would, predictably.

``42`` -> int, ``1e-4`` -> float, ``true``/``false`` -> bool, ``null``/``~`` -> None,
``[8,16]`` -> list, ``{a: 1}`` -> dict, ``'42'`` -> the string ``42``. Values starting with
``$``, ``@`` or ``%`` are passed to MONAI's resolver untouched. Unlike YAML 1.1 (PyYAML's
default), ``yes``/``no``/``on``/``off`` stay strings and ``1e-4`` is a float. A value that YAML
reads as a string is kept exactly as typed, so ``a#b`` and ``hello #1`` are not cut at ``#``.
"""

from __future__ import annotations

import math
import re
from typing import Any

import yaml

from hpc_runner.errors import ConfigError
from hpc_runner.records.shape import MAX_NUMBER_DIGITS, check_yaml_shape

PASS_THROUGH_PREFIXES = ("$", "@", "%")

_INT = re.compile(r"^[-+]?[0-9]+\Z|^0o[0-7]+\Z|^0x[0-9a-fA-F]+\Z")
_FLOAT = re.compile(
    r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?\Z"
    r"|^[-+]?\.(?:inf|Inf|INF)\Z|^\.(?:nan|NaN|NAN)\Z"
)
_BOOL = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)\Z")
_NULL = re.compile(r"^(?:~|null|Null|NULL)\Z")

_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_BOOL_TAG = "tag:yaml.org,2002:bool"
_NULL_TAG = "tag:yaml.org,2002:null"
_TYPED_TAGS = {_INT_TAG, _FLOAT_TAG, _BOOL_TAG, _NULL_TAG}


class Yaml12Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 core-schema scalars (no Norway problem, ``1e-4`` is a float)."""


Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in _TYPED_TAGS]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
Yaml12Loader.add_implicit_resolver(_NULL_TAG, _NULL, list("~nN"))
Yaml12Loader.add_implicit_resolver(_BOOL_TAG, _BOOL, list("tTfF"))
Yaml12Loader.add_implicit_resolver(_INT_TAG, _INT, list("-+0123456789"))
Yaml12Loader.add_implicit_resolver(_FLOAT_TAG, _FLOAT, list("-+0123456789."))


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    text = loader.construct_scalar(node)
    return int(text, 0) if text[:2] in ("0o", "0x") else int(text, 10)


def _construct_float(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> float:
    text = loader.construct_scalar(node).lower()
    if text.endswith(".inf"):
        return -math.inf if text.startswith("-") else math.inf
    if text == ".nan":
        return math.nan
    return float(text)


def _construct_bool(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> bool:
    return loader.construct_scalar(node).lower() == "true"


Yaml12Loader.add_constructor(_INT_TAG, _construct_int)
Yaml12Loader.add_constructor(_FLOAT_TAG, _construct_float)
Yaml12Loader.add_constructor(_BOOL_TAG, _construct_bool)


def _is_quoted(text: str) -> bool:
    return len(text) >= 2 and text[0] == text[-1] and text[0] in "'\""


def parse_value(text: str, *, what: str = "value") -> Any:
    """Return ``text`` typed as YAML 1.2 would type it; see the module docstring for the rules."""
    stripped = text.strip()
    if stripped == "" or stripped.startswith(PASS_THROUGH_PREFIXES):
        return text
    try:
        # a flow collection: bound its depth and aliases before building it; a long value: its number's digits
        if stripped[0] in "[{&*" or len(stripped) > MAX_NUMBER_DIGITS:

            check_yaml_shape(Yaml12Loader(stripped), what)
        value = yaml.load(stripped, Loader=Yaml12Loader)
    except yaml.YAMLError as exc:
        if stripped[0] in "[{" or _is_quoted(stripped):
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise ConfigError(
                f"{what} {text!r} is not valid YAML ({problem})",
                expected="a YAML scalar, a flow list like [8,16] or a flow mapping like {a: 1}",
                hint="Quote the whole value to pass it as a string",
            ) from None
        return text
    if isinstance(value, str) and not _is_quoted(stripped):
        return text  # YAML would have dropped a trailing `#comment` or folded spaces: keep it verbatim
    return value


def _quote(text: str) -> str:
    """Return ``text`` as a YAML double-quoted scalar (escapes for anything not plainly printable)."""
    out = ['"']
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch.isprintable():
            out.append(ch)
        elif ord(ch) <= 0xFFFF:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    out.append('"')
    return "".join(out)


def _format_inner(value: Any) -> str:
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_format_inner(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_format_inner(str(k))}: {_format_inner(v)}" for k, v in value.items()) + "}"
    return _format_scalar(value)


def _format_scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        return repr(value)
    if isinstance(value, int):
        return str(value)
    raise TypeError(f"cannot write {type(value).__name__} as a command-line value")


def format_value(value: Any) -> str:
    """Return the command-line spelling of ``value`` that :func:`parse_value` reads back."""
    if isinstance(value, str):
        if value.startswith(PASS_THROUGH_PREFIXES):
            return value
        try:
            if parse_value(value) == value:
                return value
        except ConfigError:
            pass
        return _quote(value)
    return _format_inner(value)

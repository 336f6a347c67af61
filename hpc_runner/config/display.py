"""``config --resolve``: substitute references and evaluate the expressions that are provably pure.

Nothing is built, imported by name or run: a ``$`` expression is evaluated by ``config/pure_eval.py``
(literals, references, arithmetic, a table of pure functions), never by ``eval``. Every expression
left as written is listed with the reason (``Unevaluated``), so the output says which values are
not what will run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hpc_runner.config.ids import get_by_id
from hpc_runner.config.pure_eval import NotPure, Sizes, evaluate_pure
from hpc_runner.config.references import _REF_PATTERN, EXPR_KEY, REF_KEY
from hpc_runner.errors import ConfigError

UNRESOLVED = object()
# the most characters the resolved config may take: references repeat values without copying them, so 20,000
# `@a` of a 99 KB `a` are cheap to hold and 2 GB to print (a config file itself is at most 16 MiB)
MAX_RESOLVED_CHARS = 16 << 20


@dataclass(frozen=True)
class Unevaluated:
    """An expression ``config --resolve`` shows as written, and why."""

    id_path: str
    expression: str
    reason: str


class _Resolver:
    def __init__(self, config: dict) -> None:
        self.config = config
        self.cache: dict[str, Any] = {}
        self.notes: dict[str, Unevaluated] = {}

    def ref(self, id_path: str, stack: tuple[str, ...]) -> Any:
        if id_path in stack:
            return UNRESOLVED
        if id_path not in self.cache:
            try:
                raw = get_by_id(self.config, id_path)
            except (KeyError, IndexError, TypeError):
                return UNRESOLVED
            self.cache[id_path] = self.node(raw, (*stack, id_path), id_path)
        return self.cache[id_path]

    def node(self, value: Any, stack: tuple[str, ...], id_path: str) -> Any:
        if isinstance(value, dict):
            return {k: self._keep(self.node(v, stack, f"{id_path}::{k}"), v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._keep(self.node(v, stack, f"{id_path}::{i}"), v) for i, v in enumerate(value)]
        if not isinstance(value, str):
            return value
        text = value.replace("#", "::") if value.startswith((REF_KEY, EXPR_KEY)) else value
        if text.startswith(REF_KEY) and _REF_PATTERN.fullmatch(text):
            return self.ref(text[1:], stack)
        if text.startswith(EXPR_KEY):
            return self.expression(text[1:], stack, id_path, value)
        return value

    def expression(self, expr: str, stack: tuple[str, ...], id_path: str, raw: str) -> Any:
        names: dict[str, Any] = {}
        for i, m in enumerate(sorted(set(_REF_PATTERN.findall(expr)), key=len, reverse=True)):
            resolved = self.ref(m[1:], stack)
            if resolved is UNRESOLVED or isinstance(resolved, dict):
                return self._note(id_path, raw, f"it uses {m}, which is not resolved")
            names[f"__ref{i}"] = resolved
            expr = expr.replace(m, f"__ref{i}")
        try:
            return evaluate_pure(expr, names)
        except NotPure as exc:
            return self._note(id_path, raw, str(exc))

    def _note(self, id_path: str, raw: str, reason: str) -> Any:
        self.notes.setdefault(id_path, Unevaluated(id_path, raw, reason))
        return UNRESOLVED

    @staticmethod
    def _keep(resolved: Any, raw: Any) -> Any:
        return raw if resolved is UNRESOLVED else resolved


def resolve_with_notes(config: dict) -> tuple[dict, list[Unevaluated]]:
    """Return ``config`` with references substituted and pure expressions evaluated, and what was not."""
    r = _Resolver(config)
    out = {}
    size, total = Sizes(MAX_RESOLVED_CHARS), 0
    for key, raw in config.items():
        value = r.ref(str(key), ())
        out[key] = raw if value is UNRESOLVED else value
        total += size(out[key])  # bounded before anything is printed
        if total > MAX_RESOLVED_CHARS:
            raise ConfigError(f"the resolved config would take over {MAX_RESOLVED_CHARS >> 20} MiB to print: its "
                              "references repeat large values", id_path=str(key),
                              expected="references that repeat values of a sensible size; 'config' without "
                              "--resolve prints the references as written")
    return out, sorted(r.notes.values(), key=lambda n: n.id_path)


def resolve_for_display(config: dict) -> dict:
    """Return ``config`` with references substituted and pure expressions evaluated; the rest as written."""
    return resolve_with_notes(config)[0]


def describe_unevaluated(notes: list[Unevaluated], limit: int = 60) -> str:
    """Return the comment block that lists the expressions shown as written."""
    if not notes:
        return ""
    lines = ["# not evaluated: config --resolve evaluates only literals, references, arithmetic and pure "
             "functions; these values are shown as written:"]
    for n in notes[:limit]:
        expr = n.expression if len(n.expression) <= 70 else n.expression[:67] + "..."
        lines.append(f"#   {n.id_path}: {expr}  ({n.reason})")
    if len(notes) > limit:
        lines.append(f"#   ... and {len(notes) - limit} more")
    return "\n".join(lines) + "\n"


def to_plain(value: Any) -> Any:
    """Return ``value`` with non-YAML objects (devices, paths, tensors) written as their repr."""
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_plain(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value) if not hasattr(value, "__fspath__") else str(value)

"""``config --resolve``: substitute references and evaluate the cheap, side-effect-free expressions."""

from __future__ import annotations

import ast
import importlib
from typing import Any

from hpc_runner.config.ids import get_by_id
from hpc_runner.config.references import _REF_PATTERN, EXPR_KEY, REF_KEY

# calls that read state but change nothing; anything else (building a dataset, training) is left unevaluated
_SAFE_CALLS = {
    "torch.device", "torch.cuda.is_available", "torch.cuda.device_count", "os.path.join", "os.path.abspath",
    "os.path.dirname", "os.path.basename", "os.path.expanduser", "os.environ.get", "os.getenv", "os.cpu_count",
    "str", "int", "float", "bool", "len", "range", "list", "tuple", "dict", "min", "max", "sum", "abs", "round",
    "sorted", "Path", "pathlib.Path",
}
_SAFE_METHODS = {"format", "replace", "join", "split", "lower", "upper", "strip", "startswith", "endswith", "get"}
DEFAULT_GLOBALS = {"monai": "monai", "torch": "torch", "np": "numpy", "numpy": "numpy", "os": "os"}
UNRESOLVED = object()


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def is_cheap_expression(expr: str) -> bool:
    """Return True when an expression only calls functions from a read-only allow-list."""
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _dotted(node.func)
            if name in _SAFE_CALLS:
                continue
            if isinstance(node.func, ast.Attribute) and node.func.attr in _SAFE_METHODS:
                continue
            return False
        if isinstance(node, ast.Lambda | ast.NamedExpr):
            return False
    return True


class _Resolver:
    def __init__(self, config: dict) -> None:
        self.config = config
        self.cache: dict[str, Any] = {}
        self.globals: dict[str, Any] = {}
        for name, module in DEFAULT_GLOBALS.items():
            self.globals[name] = _LazyModule(module)

    def ref(self, id_path: str, stack: tuple[str, ...]) -> Any:
        if id_path in stack:
            return UNRESOLVED
        if id_path not in self.cache:
            try:
                raw = get_by_id(self.config, id_path)
            except (KeyError, IndexError, TypeError):
                return UNRESOLVED
            self.cache[id_path] = self.node(raw, (*stack, id_path))
        return self.cache[id_path]

    def node(self, value: Any, stack: tuple[str, ...]) -> Any:
        if isinstance(value, dict):
            return {k: self._keep(self.node(v, stack), v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._keep(self.node(v, stack), v) for v in value]
        if not isinstance(value, str):
            return value
        text = value.replace("#", "::") if value.startswith((REF_KEY, EXPR_KEY)) else value
        if text.startswith(REF_KEY) and _REF_PATTERN.fullmatch(text):
            return self.ref(text[1:], stack)
        if text.startswith(EXPR_KEY):
            expr = text[1:]
            if expr.startswith("import ") or expr.startswith("from ") or not is_cheap_expression(
                _REF_PATTERN.sub("_ref_", expr)
            ):
                return UNRESOLVED
            local: dict[str, Any] = {}
            for i, m in enumerate(sorted(set(_REF_PATTERN.findall(expr)), key=len, reverse=True)):
                resolved = self.ref(m[1:], stack)
                if resolved is UNRESOLVED or isinstance(resolved, dict):
                    return UNRESOLVED
                local[f"__ref{i}"] = resolved
                expr = expr.replace(m, f"__ref{i}")
            try:
                return eval(expr, dict(self.globals), local)
            except Exception:
                return UNRESOLVED
        return value

    @staticmethod
    def _keep(resolved: Any, raw: Any) -> Any:
        return raw if resolved is UNRESOLVED else resolved


class _LazyModule:
    """Import a module on first attribute access, so ``--resolve`` imports torch only when used."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self._name), attr)


def resolve_for_display(config: dict) -> dict:
    """Return ``config`` with references substituted and cheap expressions evaluated; the rest as written."""
    r = _Resolver(config)
    out = {}
    for key, raw in config.items():
        value = r.ref(str(key), ())
        out[key] = raw if value is UNRESOLVED else value
    return out


def to_plain(value: Any) -> Any:
    """Return ``value`` with non-YAML objects (devices, paths, tensors) written as their repr."""
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_plain(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value) if not hasattr(value, "__fspath__") else str(value)

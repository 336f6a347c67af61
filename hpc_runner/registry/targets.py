"""Resolve ``_target_`` names exactly as MONAI does, without building anything.

A bare name (``UNet``) is looked up among the classes and functions of the loaded ``monai`` modules
(``monai.bundle.ComponentLocator``; the first module wins when several define it); anything else is a
dotted path for ``pydoc.locate``, which imports the longest importable module prefix and then follows
attributes (so ``torch.os.system`` reaches ``os.system``). Importing monai costs seconds, so callers
import this module only when they need it.
"""

from __future__ import annotations

import ast
import pydoc
from functools import lru_cache
from typing import Any

from hpc_runner.errors import ConfigError
from hpc_runner.records.shape import parse_expression


class TargetError(Exception):
    """A ``_target_`` that cannot be located; the message says why."""


@lru_cache(maxsize=1)
def _locator() -> Any:
    import monai  # noqa: F401  -- loads the monai submodules the locator scans
    from monai.bundle import ComponentLocator

    return ComponentLocator()


def monai_module_of(name: str) -> str | None:
    """Return the monai module that defines the bare component ``name`` (first of several), or None."""
    if "." in name:
        return None
    mods = _locator().get_component_module_name(name)
    if isinstance(mods, list):
        mods = mods[0] if mods else None
    return mods


def target_path(name: str) -> str:
    """Return the full dotted path MONAI instantiates for a ``_target_`` string."""
    module = monai_module_of(name)
    return f"{module}.{name}" if module else name


def locate_target(name: str) -> Any:
    """Return the object a ``_target_`` string names; TargetError when it cannot be imported."""
    path = target_path(name)
    try:
        obj = pydoc.locate(path)
    except pydoc.ErrorDuringImport as exc:
        cause = exc.value if isinstance(exc.value, BaseException) else exc
        raise TargetError(f"importing '{exc.filename}' failed: {type(cause).__name__}: {cause}") from None
    except Exception as exc:  # a module may raise anything while it is imported
        raise TargetError(f"{type(exc).__name__}: {exc}") from None
    if obj is None:
        hint = " (not a MONAI component name, nor an importable dotted path)" if "." not in name else ""
        raise TargetError(f"cannot locate '{path}'{hint}")
    return obj


def object_path(obj: Any) -> str | None:
    """Return ``module.qualname`` of a class or function (None when it does not say)."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        return None
    return f"{module}.{qualname}"


def import_statement_modules(expr: str) -> list[str] | None:
    """Return the modules an ``import``/``from ... import`` statement imports, or None when it is not one
    (nor any Python that ``parse_expression`` reads within its length and depth bounds)."""
    try:
        tree = parse_expression(expr, mode="exec")
    except ConfigError:
        return None
    if len(tree.body) != 1:
        return None
    node = tree.body[0]
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.module and not node.level:
        return [node.module]
    return None

"""Find a module and read what its source binds at module level, without importing it (or its package).

``importlib.util.find_spec("a.b")`` imports ``a`` to learn its ``__path__``; here a submodule is looked up
with the finders of ``sys.meta_path`` and the parent's ``submodule_search_locations``, as the import system
does, but nothing is executed. A module's bindings come from its AST: ``def``/``class``, assignments,
``import``/``from ... import`` (star imports too), ``__all__`` when it is a literal, and whether a
module-level ``__getattr__`` or ``globals()`` could add names that no source line spells.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from importlib.machinery import ModuleSpec, SourceFileLoader
from pathlib import Path

MAX_SOURCE_BYTES = 4 << 20  # a larger module is not parsed (its AST would cost more than importing it saves)
# module-level calls that can bind names no source line spells
_DYNAMIC_CALLS = frozenset({"globals", "vars", "exec", "setattr", "__import__"})
_TRY = (ast.Try, ast.TryStar) if hasattr(ast, "TryStar") else (ast.Try,)  # TryStar: Python 3.11+
# decorators whose result is callable but no plain function (ComponentLocator skips it: not inspect.isfunction)
_WRAPPERS = frozenset({"lru_cache", "cache", "cached_property", "property", "script", "singledispatch"})
# statements whose parts _collect walks itself (their bodies, or bodies that run later)
_COMPOUND = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.If, *_TRY, ast.With,
             ast.AsyncWith, ast.For, ast.AsyncFor, ast.While)


class Undecided(Exception):
    """The source alone cannot say; the message says why (the caller imports instead)."""


@dataclass(frozen=True)
class Binding:
    """One module-level binding of a name.

    ``kind``: ``def`` (a def or class), ``wrapped`` (a def under a decorator such as ``lru_cache``: callable, but
    no plain function), ``from`` (``from module import name``), ``module`` (``import x`` or
    ``import x.y as z``: the module ``module``), ``alias`` (``X = Y``: the name ``name`` of this module), or
    ``other`` (anything whose value only running the code tells: ``X = f()``, a loop variable, ``del``).
    """

    kind: str
    module: str = ""  # absolute module name (``from``, ``module``)
    name: str = ""


@dataclass
class ModuleBindings:
    """What a module's source binds at module level."""

    path: Path
    names: dict[str, list[Binding]] = field(default_factory=dict)
    typing_only: dict[str, list[Binding]] = field(default_factory=dict)  # under ``if TYPE_CHECKING:``
    stars: list[str] = field(default_factory=list)  # modules of ``from x import *``, in order
    all_names: list[str] | None = None  # a literal ``__all__``
    all_dynamic: bool = False  # ``__all__`` is built by code: what a star import takes is unknown
    has_getattr: bool = False  # a module-level ``__getattr__`` (PEP 562) may answer any name
    dynamic: bool = False  # ``globals()``, ``setattr`` ... at module level
    imports: list[str] = field(default_factory=list)  # absolute modules imported unconditionally at the top
    imported: list[str] = field(default_factory=list)  # every module it imports at module level (any branch)


def find_module(dotted: str) -> ModuleSpec | None:
    """Return the spec of module ``dotted`` found as the import system would, importing nothing; None: none."""
    parts = dotted.split(".")
    spec = _top_spec(parts[0])
    for n in range(2, len(parts) + 1):
        if spec is None or spec.submodule_search_locations is None:
            return None  # not a package: it has no submodules
        spec = _submodule_spec(".".join(parts[:n]), list(spec.submodule_search_locations))
    return spec


def _top_spec(name: str) -> ModuleSpec | None:
    try:
        # a top-level name: found, not imported (not cached here: each bundle on sys.path has its own `scripts`)
        return importlib.util.find_spec(name)
    except (ImportError, ValueError) as exc:  # ValueError: in sys.modules with __spec__ None
        raise Undecided(f"finding '{name}' failed: {exc}") from None


def _submodule_spec(name: str, locations: list[str]) -> ModuleSpec | None:
    loaded = sys.modules.get(name)
    if loaded is not None:
        return getattr(loaded, "__spec__", None)
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        try:
            spec = find(name, locations)
        except Exception as exc:  # a third-party finder may raise anything
            raise Undecided(f"finding '{name}' failed: {type(exc).__name__}: {exc}") from None
        if spec is not None:
            return spec
    return None


def source_path(spec: ModuleSpec) -> Path | None:
    """Return the ``.py`` file a spec loads (None: an extension, builtin, frozen or namespace module)."""
    if isinstance(spec.loader, SourceFileLoader) and spec.origin and spec.origin.endswith(".py"):
        return Path(spec.origin)
    return None


def is_namespace(spec: ModuleSpec) -> bool:
    """True for a namespace package (no ``__init__``: it binds nothing but its submodules)."""
    return spec.submodule_search_locations is not None and (spec.origin is None or spec.origin == "namespace")


def bindings_of(spec: ModuleSpec) -> ModuleBindings:
    """Return what the module's source binds; Undecided when it has no readable, parsable Python source."""
    path = source_path(spec)
    if path is None:
        raise Undecided(f"'{spec.name}' has no Python source to read ({spec.origin or 'no file'})")
    try:
        info = path.stat()
    except OSError as exc:
        raise Undecided(f"cannot read {path}: {exc}") from None
    return _parsed(str(path), spec.name, spec.submodule_search_locations is not None, info.st_mtime_ns, info.st_size)


def absolute(module: str | None, level: int, here: str, is_package: bool) -> str:
    """Return the absolute module a (possibly relative) import in module ``here`` names."""
    if not level:
        return module or ""
    base = here.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join([*base, module] if module else base)


@lru_cache(maxsize=512)
def _parsed(path: str, name: str, is_package: bool, mtime_ns: int, size: int) -> ModuleBindings:
    """Parse one file (cached per path and stat: an edited file is parsed again)."""
    if size > MAX_SOURCE_BYTES:
        raise Undecided(f"{path} is larger than {MAX_SOURCE_BYTES >> 20} MB")
    try:
        tree = ast.parse(Path(path).read_bytes(), filename=path)
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        # importing it decides (a syntax error is then reported as Python words it)
        raise Undecided(f"cannot parse {path}: {type(exc).__name__}") from None
    found = ModuleBindings(Path(path))
    _collect(tree.body, found, name, is_package, top=True, typing_only=False)
    return found


def _decorator_name(node: ast.expr) -> str:
    node = node.func if isinstance(node, ast.Call) else node
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""


def _makes_function_or_class(value: ast.expr | None) -> bool:
    """A lambda, or ``namedtuple(...)`` (a class whose ``__module__`` is the caller's), as MONAI writes them."""
    if isinstance(value, ast.Lambda):
        return True
    return isinstance(value, ast.Call) and _decorator_name(value.func) == "namedtuple"


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _bind(found: ModuleBindings, name: str, binding: Binding, typing_only: bool) -> None:
    (found.typing_only if typing_only else found.names).setdefault(name, []).append(binding)


def _targets(node: ast.expr) -> list[str]:
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Tuple | ast.List):
        return [n for elt in node.elts for n in _targets(elt)]
    if isinstance(node, ast.Starred):
        return _targets(node.value)
    return []


def _literal_names(value: ast.expr | None) -> list[str] | None:
    try:
        names = ast.literal_eval(value) if value is not None else None
    except (ValueError, TypeError, SyntaxError, RecursionError):
        return None
    if isinstance(names, list | tuple) and all(isinstance(n, str) for n in names):
        return list(names)
    return None


def _collect(body: list[ast.stmt], found: ModuleBindings, here: str, is_package: bool, *, top: bool,
             typing_only: bool) -> None:
    """Walk module-level statements (and the branches of if/try/with, never function or class bodies)."""
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            wrapped = any(_decorator_name(d) in _WRAPPERS for d in node.decorator_list)
            _bind(found, node.name, Binding("wrapped" if wrapped else "def"), typing_only)
            if node.name == "__getattr__" and not typing_only:
                found.has_getattr = True
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if not typing_only:
                    found.imported.append(alias.name)
                    if top:
                        found.imports.append(alias.name)
                if alias.asname:  # import a.b as c: c is the module a.b
                    _bind(found, alias.asname, Binding("module", alias.name), typing_only)
                else:  # import a.b: a is bound, to the top-level module
                    top_name = alias.name.split(".", 1)[0]
                    _bind(found, top_name, Binding("module", top_name), typing_only)
        elif isinstance(node, ast.ImportFrom):
            module = absolute(node.module, node.level, here, is_package)
            if not typing_only:
                found.imported.append(module)
                found.imported += [f"{module}.{a.name}" for a in node.names if a.name != "*"]  # maybe submodules
                if top and not node.level:
                    found.imports.append(module)
            for alias in node.names:
                if alias.name == "*":
                    if not typing_only:
                        found.stars.append(module)
                else:
                    _bind(found, alias.asname or alias.name, Binding("from", module, alias.name), typing_only)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [n for t in targets for n in _targets(t)]
            value = node.value
            if "__all__" in names:
                literal = _literal_names(value) if isinstance(node, ast.Assign | ast.AnnAssign) else None
                if literal is None or found.all_names is not None:
                    found.all_dynamic = True  # built by code, or assigned twice: what a star import takes is unknown
                found.all_names = literal
            plain = all(isinstance(t, ast.Name) for t in targets) and not isinstance(node, ast.AugAssign)
            for name in names:
                if isinstance(value, ast.Name) and plain:  # X = Y = Z: both alias Z
                    _bind(found, name, Binding("alias", name=value.id), typing_only)
                elif plain and _makes_function_or_class(value):
                    _bind(found, name, Binding("def"), typing_only)
                else:
                    _bind(found, name, Binding("other"), typing_only)
        elif isinstance(node, ast.If):
            checking = _is_type_checking(node.test)
            _collect(node.body, found, here, is_package, top=False, typing_only=typing_only or checking)
            _collect(node.orelse, found, here, is_package, top=False, typing_only=typing_only)
        elif isinstance(node, _TRY):
            for part in (node.body, *(h.body for h in node.handlers), node.orelse, node.finalbody):
                _collect(part, found, here, is_package, top=False, typing_only=typing_only)
        elif isinstance(node, ast.With | ast.AsyncWith):
            _collect(node.body, found, here, is_package, top=False, typing_only=typing_only)
        elif isinstance(node, ast.For | ast.AsyncFor | ast.While):
            for name in _targets(node.target) if isinstance(node, ast.For | ast.AsyncFor) else []:
                _bind(found, name, Binding("other"), typing_only)
            _collect([*node.body, *node.orelse], found, here, is_package, top=False, typing_only=typing_only)
        elif isinstance(node, ast.Delete):
            for t in node.targets:
                for name in _targets(t):
                    _bind(found, name, Binding("other"), typing_only)
        if not typing_only and not isinstance(node, _COMPOUND):
            _note_dynamic(node, found)


def _note_dynamic(node: ast.stmt, found: ModuleBindings) -> None:
    """Mark the module dynamic when a simple statement calls ``globals()``, ``setattr`` ... or binds by walrus."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id in _DYNAMIC_CALLS:
            found.dynamic = True
        elif isinstance(sub, ast.NamedExpr):
            found.names.setdefault(sub.target.id, []).append(Binding("other"))

"""Decide from source files alone, importing nothing, whether a ``_target_`` names a class or function.

The pre-flight's first look at a bundle used to import torch and MONAI (540 MB on a login node) only to learn
that ``UNet`` exists. This module answers the same question as ``registry/targets.py`` (MONAI's
``ComponentLocator`` for a bare name, then ``pydoc.locate``) by reading the modules' source:

- a bare name is looked up in the index of MONAI's component names (``config/monai_names.py``);
- a dotted path walks the modules as ``pydoc.locate`` imports them (each part that is a submodule), then
  looks the rest up as attributes: a ``def``/``class`` answers yes, a module answers "not a class or
  function", a re-export (``from .x import Name``, ``from .x import *``, ``X = Y``) is followed, at most
  :data:`MAX_HOPS` steps.

It answers only when the source says so for certain; otherwise (an extension module, a module-level
``__getattr__`` that is not the usual lazy pattern, ``globals()`` at module level, a value computed at run
time such as ``X = partial(...)``, an unconditional import of a package that is not installed, which the import
would report in Python's words) it is undecided and the caller imports as before. One convention is trusted: a
module with a ``__getattr__`` that binds a name only under ``if TYPE_CHECKING:`` (the lazy-import pattern of
``hpc_runner.engine``) serves that name as the typing import says.

What it does not see: a module that raises while it is imported for another reason (an error in code that runs
at import). ``hpc-runner verify`` and the run itself still import everything.
"""

from __future__ import annotations

import builtins
import sys
from dataclasses import dataclass, field
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

from hpc_runner.config.module_source import (
    Binding,
    Undecided,
    bindings_of,
    find_module,
    is_namespace,
    source_path,
)
from hpc_runner.config.monai_names import MonaiNames

MAX_HOPS = 32  # re-exports followed for one target (MONAI's deepest chain is 3)
_CALLABLE, _MODULE, _MISSING = "callable", "module", "missing"


@dataclass(frozen=True)
class StaticVerdict:
    """The answer for one target: ``decided`` False means import it; else ``problem`` None means it resolves."""

    decided: bool
    problem: str | None = None
    files: tuple[Path, ...] = ()  # the source files the answer was read from
    why: str = ""  # why it is undecided


@dataclass
class _Walk:
    files: set[Path] = field(default_factory=set)
    hops: int = 0
    seen: set[tuple[str, str]] = field(default_factory=set)

    def step(self, module: str, name: str) -> None:
        self.hops += 1
        if self.hops > MAX_HOPS or (module, name) in self.seen:
            raise Undecided(f"re-exports of '{name}' go round or deeper than {MAX_HOPS} steps")
        self.seen.add((module, name))


def static_verdict(target: str, names: MonaiNames | None = None) -> StaticVerdict:
    """Return whether ``target`` resolves, read from source files; call it with the bundle on ``sys.path``."""
    walk = _Walk()
    names = names if names is not None else MonaiNames()
    try:
        kind, path = _resolve(target, names, walk)
    except Undecided as exc:
        return StaticVerdict(False, why=str(exc))
    files = tuple(sorted(walk.files))
    if kind == _CALLABLE:
        return StaticVerdict(True, None, files)
    if kind == _MODULE:
        return StaticVerdict(True, f"_target_ '{target}' is not a class or function", files)
    # the words of registry/targets.py's locate_target, so either way of checking says the same
    hint = " (not a MONAI component name, nor an importable dotted path)" if "." not in target else ""
    close = _close_names(target, names) if "." not in target else []
    hint += f"; did you mean {', '.join(close)}?" if close else ""
    return StaticVerdict(True, f"_target_ '{target}' cannot be imported: cannot locate '{path}'{hint}", files)


def _close_names(target: str, names: MonaiNames) -> list[str]:
    try:
        return names.close_to(target)
    except Undecided:
        return []


def _resolve(target: str, names: MonaiNames, walk: _Walk) -> tuple[str, str]:
    """Return (kind, the dotted path MONAI would locate) for a target string."""
    if "." not in target:
        module = names.module_of(target)  # Undecided when the index cannot be built
        if module is not None:
            walk.files.add(names.file_of(module))
            return _CALLABLE, f"{module}.{target}"
    parts = [p for p in target.split(".") if p]
    return _locate(parts, walk), target


def _locate(parts: list[str], walk: _Walk) -> str:
    """``pydoc.locate``: import the longest module prefix, then follow attributes."""
    spec, n = None, 0
    while n < len(parts):
        found = find_module(".".join(parts[: n + 1]))
        if found is None:
            break
        spec, n = found, n + 1
        _check_imports(spec, walk)
    if spec is None:  # no module at all: pydoc.locate looks the name up among the builtins
        return _builtin_kind(parts)
    if n == len(parts):
        return _MODULE
    kind, spec = _attribute(spec, parts[n], walk, no_submodule=True)  # the loop above looked for one
    if kind == _CALLABLE and n + 1 < len(parts):
        raise Undecided(f"'{'.'.join(parts)}' is an attribute of a class or function: only running it tells")
    while kind == _MODULE and spec is not None and n + 1 < len(parts):
        n += 1
        kind, spec = _attribute(spec, parts[n], walk)
        if kind == _CALLABLE and n + 1 < len(parts):
            raise Undecided(f"'{'.'.join(parts)}' is an attribute of a class or function: only running it tells")
    if kind == _MODULE and n + 1 < len(parts):  # a value, or a module whose source is unknown, has the rest
        raise Undecided(f"'{'.'.join(parts[: n + 1])}' is not a module read from source: only importing it tells")
    return kind


def _builtin_kind(parts: list[str]) -> str:
    obj: object = builtins
    for part in parts:
        if not hasattr(obj, part):
            return _MISSING
        obj = getattr(obj, part)
    return _MODULE if isinstance(obj, ModuleType) or not callable(obj) else _CALLABLE


def _check_imports(spec: ModuleSpec, walk: _Walk) -> None:
    """Undecided when the module imports, unconditionally, a top-level package that is not installed."""
    if source_path(spec) is None:
        return
    found = bindings_of(spec)
    for module in found.imports:
        top = module.split(".", 1)[0]
        if top and top != "__future__" and find_module(top) is None:
            raise Undecided(f"'{spec.name}' imports '{module}', which is not installed")


def _attribute(spec: ModuleSpec, name: str, walk: _Walk, no_submodule: bool = False
               ) -> tuple[str, ModuleSpec | None]:
    """Return (kind, the module's spec when it is one) of ``module.name``."""
    walk.step(spec.name, name)
    if spec.submodule_search_locations is not None and not no_submodule:
        sub = find_module(f"{spec.name}.{name}")
        if sub is not None:  # pydoc.locate (and `from pkg import sub`) import a submodule
            return _MODULE, sub
    if is_namespace(spec):
        return _MISSING, None
    loaded = sys.modules.get(spec.name)
    if loaded is not None and source_path(spec) is None:  # builtins, or a C module already imported: ask it
        if not hasattr(loaded, name):
            return _MISSING, None
        value = getattr(loaded, name)
        if isinstance(value, ModuleType):  # os.path: the module it names (posixpath), to look further into
            return _MODULE, getattr(value, "__spec__", None)
        return (_MODULE if not callable(value) else _CALLABLE), None
    found = bindings_of(spec)
    walk.files.add(found.path)
    _check_imports(spec, walk)
    if name in found.names:
        answers = [_binding_kind(spec, b, walk) for b in found.names[name]]
        if len({kind for kind, _ in answers}) == 1:
            return answers[-1]
        raise Undecided(f"'{spec.name}' binds '{name}' in several ways: only running it tells which")
    if name in found.typing_only and found.has_getattr:
        # the lazy pattern: __getattr__ imports on first use what the TYPE_CHECKING block names
        answers = [_binding_kind(spec, b, walk) for b in found.typing_only[name]]
        if len({kind for kind, _ in answers}) == 1:
            return answers[-1]
    for star in found.stars:
        kind = _star_kind(star, name, walk)
        if kind[0] != _MISSING:
            return kind
    if found.has_getattr:
        raise Undecided(f"'{spec.name}' has a module-level __getattr__: only importing it tells")
    if found.dynamic:
        raise Undecided(f"'{spec.name}' binds names at run time (globals(), setattr, exec)")
    return _MISSING, None


def _star_kind(module: str, name: str, walk: _Walk) -> tuple[str, ModuleSpec | None]:
    """What ``from module import *`` binds as ``name``."""
    spec = find_module(module)
    if spec is None:
        raise Undecided(f"a star import of '{module}', which is not found: importing reports it")
    if not is_namespace(spec):
        found = bindings_of(spec)
        walk.files.add(found.path)
        if found.all_dynamic:
            raise Undecided(f"'{module}' builds __all__ at run time: what its star import binds is unknown")
        if found.all_names is not None:
            if name not in found.all_names:
                return _MISSING, None
        elif name.startswith("_"):
            return _MISSING, None
    return _attribute(spec, name, walk)


def _binding_kind(spec: ModuleSpec, binding: Binding, walk: _Walk) -> tuple[str, ModuleSpec | None]:
    if binding.kind in ("def", "wrapped"):
        return _CALLABLE, None
    if binding.kind == "module":
        sub = find_module(binding.module)
        if sub is None:
            raise Undecided(f"'{spec.name}' imports '{binding.module}', which is not found: importing reports it")
        return _MODULE, sub
    if binding.kind == "from":
        source = find_module(binding.module)
        if source is None:
            raise Undecided(f"'{spec.name}' imports from '{binding.module}', which is not found")
        kind = _attribute(source, binding.name, walk)
        if kind[0] == _MISSING:  # importing the module raises ImportError: Python's words say it best
            raise Undecided(f"'{spec.name}' imports '{binding.name}' from '{binding.module}', which lacks it")
        return kind
    if binding.kind == "alias":
        return _attribute(spec, binding.name, walk)
    raise Undecided(f"a name of '{spec.name}' is computed when it runs: only importing it tells")


"""Optional packages that MONAI imports whenever they are installed, loaded here when first used instead.

``import monai`` imports every one of its submodules, and they call ``optional_import`` on what they might use: the
MLflow client and its entities (MLFlowHandler), matplotlib's pyplot (the notebook helpers), Optuna (Auto3DSeg's
search). Where they are installed (the tracking, report and tune extras) every job and every command that parses a
bundle paid for them whether it tracks, plots or tunes or not: ~1,000 of the ~4,700 modules ``import monai``
brought here, MLflow's with pydantic, FastAPI and OpenTelemetry the most (``bench/exit_time.py`` times a start both
ways).

``defer_optional_modules`` (called as MONAI's import begins: ``defer_when_monai_is_imported`` is among the entry
point's first calls, beside hpc_runner/heap.py's) puts an unexecuted module object for each of them in
``sys.modules``: what ``optional_import`` checks (that it imports, that it is not a
namespace package) finds the real spec and file, so MONAI records them as installed, and the package's own
code runs, under a lock, the first time anything asks the module for a name it does not have yet (``mlflow.
start_run``, ``from optuna import create_study``, ``import matplotlib.pyplot as plt; plt.figure()``), and before
any of its submodules is imported (``from optuna.storages import JournalStorage``), as an import would; only
``IMPORTED_BENEATH`` (mlflow.exceptions, which MONAI takes a name from) imports beneath it. A package whose code
fails is removed from ``sys.modules``, as a failed import is, and the error is raised where it was first used; a check
that the package works (``--tracking mlflow``'s) imports it with ``import_now``, which runs its code at once.

``importlib.util.LazyLoader`` (the standard library's version of this) loads on any attribute, ``__file__`` and
``__path__`` too, so MONAI's check and every deferred submodule would load the package at once: this module keeps
the spec's attributes but ``__path__`` readable and loads on any other name. Only a process whose entry point asked
is changed (``hpc-runner`` and ``python -m hpc_runner``, so every job): a caller of ``main()`` in-process keeps its
imports as they are, and a package already imported is left alone.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import sys
import threading
import types

# the packages MONAI imports eagerly through optional_import and uses only when a feature asks (a parent before its
# submodule); an optional_import with name= (pandas' DataFrame, requests.get, tensorboard's Summary, scipy's
# functions) takes an attribute at once, so deferring those would gain nothing
DEFERRED = ("mlflow", "mlflow.entities", "matplotlib", "matplotlib.pyplot", "optuna")
# submodules of a deferred package imported at once beneath it, its own code not run: what MONAI takes a name from
# as it is imported (MLFlowHandler's MlflowException); their code needs nothing of the package's. Any other
# submodule's import runs its package's code first, as an import does.
IMPORTED_BENEATH = ("mlflow.exceptions",)

_lock = threading.RLock()  # one package's code at a time; a package's code may load another (pyplot: matplotlib)
_pending: dict[str, types.ModuleType] = {}  # the deferred modules whose code has not run, by name
_loaded_meanwhile: set[str] = set()  # modules beneath its package a deferred module's code imported, not yet asked


class _Deferred(types.ModuleType):
    """A module whose code has not run yet: its spec's attributes are there, but for ``__path__``; any other name
    runs its code first. ``__path__`` is what the import system reads from a package to import a submodule of it,
    so such an import runs the package's code first, as it would without the deferral."""

    def __getattr__(self, attr: str):  # called only for a name the module does not have
        _load(self.__name__)
        if type(self) is _Deferred:  # its own code, still running in this thread, asks for a name not set yet
            raise AttributeError(f"partially initialized module {self.__name__!r} has no attribute {attr!r}")
        return getattr(self, attr)


def _load(name: str) -> None:
    """Run a deferred module's code, once, after its deferred parents' (the order of an import); other threads
    asking meanwhile wait for it."""
    with _lock:
        parent = name.rpartition(".")[0]
        if parent in _pending:
            _load(parent)
        module = _pending.pop(name, None)
        if module is None:  # loaded already, or being loaded by this very thread
            return
        spec = module.__spec__
        if spec.submodule_search_locations is not None:
            module.__path__ = spec.submodule_search_locations
        before = set(sys.modules)
        try:
            spec.loader.exec_module(module)
            # only the package's own: an import that reads its __path__ is one of a module beneath it
            package = name.partition(".")[0]
            _loaded_meanwhile.update(m for m in set(sys.modules) - before if m.startswith(f"{package}."))
        except BaseException:
            if sys.modules.get(name) is module:  # as a failed import: gone, so a later import tries again
                del sys.modules[name]
            raise
        finally:
            module.__class__ = types.ModuleType


class _LoadedMeanwhile:
    """First on ``sys.meta_path``: an import of ``a.b`` reads ``a.__path__`` after it checked that ``a.b`` is not in
    ``sys.modules``; if ``a`` was deferred, reading it ran ``a``'s code, which may have imported ``a.b`` itself. Then
    the import is given that module (run once), not a second copy."""

    @staticmethod
    def find_spec(fullname: str, path=None, target=None):
        if fullname not in _loaded_meanwhile:
            return None
        _loaded_meanwhile.discard(fullname)
        module = sys.modules.get(fullname)
        if module is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Existing(module), origin=getattr(module, "__file__", None))


class _Existing:
    """The loader of a module imported meanwhile: the import gets the module as it is, its own spec kept."""

    def __init__(self, module: types.ModuleType) -> None:
        self.module, self.spec = module, module.__spec__

    def create_module(self, spec):
        return self.module

    def exec_module(self, module: types.ModuleType) -> None:
        module.__spec__ = self.spec  # the import's set-up wrote this loader's spec over the module's own


def _defer(name: str) -> bool:
    """Put an unexecuted module for ``name`` in ``sys.modules``; return False (and change nothing) when it is imported
    already, not installed, or not plain Python source."""
    if name in sys.modules:
        return False
    parent_name, _, child = name.rpartition(".")
    parent = sys.modules.get(parent_name) if parent_name else None
    if parent_name and parent is None:  # a submodule only beneath its deferred (or imported) parent
        return False
    try:
        if parent_name in _pending:  # its locations from the parent's spec: reading its __path__ would load it
            locations = _pending[parent_name].__spec__.submodule_search_locations
            spec = importlib.machinery.PathFinder.find_spec(name, locations)
        else:
            spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return False
    if spec is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
        return False
    module = importlib.util.module_from_spec(spec)
    module.__dict__.pop("__path__", None)  # see _Deferred
    module.__class__ = _Deferred
    with _lock:
        if _LoadedMeanwhile not in sys.meta_path:
            sys.meta_path.insert(0, _LoadedMeanwhile)
        _pending[name] = module
        sys.modules[name] = module
        if parent is not None:
            setattr(parent, child, module)  # what an import of the submodule does: `import a.b as c` reads a.b
    return True


def _import_beneath(name: str) -> None:
    """Import ``name`` beneath its deferred package without running the package's code (see IMPORTED_BENEATH); if
    that fails, the package's code runs now, as an import of the submodule would (an error there is left for MONAI's
    own import of it to meet)."""
    parent = name.rpartition(".")[0]
    module = _pending.get(parent)
    if module is None or name in sys.modules:
        return
    module.__path__ = module.__spec__.submodule_search_locations
    try:
        importlib.import_module(name)
    except Exception:  # not alone: the package's code first, as an import would (its error, if any, MONAI's to see)
        with contextlib.suppress(Exception):
            import_now(parent)
    finally:
        if type(module) is _Deferred:
            del module.__path__


def defer_optional_modules(names: tuple[str, ...] | None = None) -> list[str]:
    """Defer each of ``names`` (``DEFERRED``, read now, when None) that is installed and not imported yet (see the
    module's docstring), then import those of ``IMPORTED_BENEATH`` whose package is deferred; return those deferred."""
    deferred = [name for name in (DEFERRED if names is None else names) if _defer(name)]
    for name in IMPORTED_BENEATH:
        _import_beneath(name)  # nothing when its package is not deferred
    return deferred


class _BeforeMonai:
    """First on ``sys.meta_path`` until MONAI's import begins: then defers ``DEFERRED`` and steps aside."""

    @staticmethod
    def find_spec(fullname: str, path=None, target=None):
        if fullname == "monai":
            with contextlib.suppress(ValueError):
                sys.meta_path.remove(_BeforeMonai)
            defer_optional_modules()
        return None


def defer_when_monai_is_imported() -> None:
    """The entry points' call: ``defer_optional_modules()`` the moment MONAI's import begins, so a command that never
    imports MONAI (``--help``, ``status``, a sweep's dry run) pays for nothing, not even the deferral's ~90 modules."""
    if "monai" not in sys.modules and _BeforeMonai not in sys.meta_path:
        sys.meta_path.insert(0, _BeforeMonai)


def import_now(name: str) -> types.ModuleType:
    """``import name`` with its code run now, deferred or not: what a check that the package works calls (a deferred
    one would otherwise pass the check and fail at its first use); raises what the import would."""
    module = importlib.import_module(name)
    # a name no module has: a deferred one runs its code first (deferred here, or by another copy of this file: the
    # tests' warm parent runs it under another name)
    getattr(module, "__hpc_runner_import_now__", None)
    return module


def pending() -> list[str]:
    """The deferred modules whose code has not run yet (for tests and reports)."""
    with _lock:
        return sorted(_pending)

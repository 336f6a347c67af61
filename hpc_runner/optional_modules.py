"""Optional packages that MONAI imports whenever they are installed, loaded here when first used instead.

``import monai`` imports every one of its submodules, and they call ``optional_import`` on what they might use: the
MLflow client and its entities (MLFlowHandler), matplotlib's pyplot (the notebook helpers), Optuna (Auto3DSeg's
search). Where they are installed (the tracking, report and tune extras) every job and every command that parses a
bundle paid for them whether it tracks, plots or tunes or not: ~1,000 of the ~4,700 modules ``import monai``
brought here, MLflow's with pydantic, FastAPI and OpenTelemetry the most (``bench/exit_time.py`` times a start both
ways).

``defer_optional_modules`` (the entry point's first calls, beside hpc_runner/heap.py's) puts an unexecuted module
object for each of them in ``sys.modules``: what ``optional_import`` checks (that it imports, that it is not a
namespace package) finds the real spec, file and path, so MONAI records them as installed, and the package's own
code runs, under a lock, the first time anything asks the module for a name it does not have yet (``mlflow.
start_run``, ``from optuna import create_study``, ``import matplotlib.pyplot as plt; plt.figure()``). A submodule
imported before that (``import mlflow.exceptions``) imports as usual beneath it. A package whose code then fails is
removed from ``sys.modules``, as a failed import is, and the error is raised where it was first used; a check
that the package works (``--tracking mlflow``'s) imports it with ``import_now``, which runs its code at once.

``importlib.util.LazyLoader`` (the standard library's version of this) loads on any attribute, ``__file__`` and
``__path__`` too, so MONAI's check and every submodule import would load the package at once: this module keeps the
spec's attributes readable and loads on the first other name. Only a process whose entry point asked is changed
(``hpc-runner`` and ``python -m hpc_runner``, so every job): a caller of ``main()`` in-process keeps its imports as
they are, and a package already imported is left alone.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import threading
import types

# the packages MONAI imports eagerly through optional_import and uses only when a feature asks (a parent before its
# submodule); an optional_import with name= (pandas' DataFrame, requests.get, tensorboard's Summary, scipy's
# functions, mlflow.exceptions' MlflowException) takes an attribute at once, so deferring those would gain nothing
DEFERRED = ("mlflow", "mlflow.entities", "matplotlib", "matplotlib.pyplot", "optuna")

_lock = threading.RLock()  # one package's code at a time; a package's code may load another (pyplot: matplotlib)
_pending: dict[str, types.ModuleType] = {}  # the deferred modules whose code has not run, by name


class _Deferred(types.ModuleType):
    """A module whose code has not run yet: its spec's attributes are there; any other name runs its code first."""

    def __getattr__(self, attr: str):  # called only for a name the module does not have
        _load(self.__name__)
        if type(self) is _Deferred:  # its own code, still running in this thread, asks for a name not set yet
            raise AttributeError(f"partially initialized module {self.__name__!r} has no attribute {attr!r}")
        return getattr(self, attr)


def _load(name: str) -> None:
    """Run a deferred module's code, once; other threads asking meanwhile wait for it."""
    with _lock:
        module = _pending.pop(name, None)
        if module is None:  # loaded already, or being loaded by this very thread
            return
        try:
            module.__spec__.loader.exec_module(module)
        except BaseException:
            if sys.modules.get(name) is module:  # as a failed import: gone, so a later import tries again
                del sys.modules[name]
            raise
        finally:
            module.__class__ = types.ModuleType


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
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return False
    if spec is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
        return False
    module = importlib.util.module_from_spec(spec)
    module.__class__ = _Deferred
    with _lock:
        _pending[name] = module
        sys.modules[name] = module
        if parent is not None:
            setattr(parent, child, module)  # what an import of the submodule does: `import a.b as c` reads a.b
    return True


def defer_optional_modules(names: tuple[str, ...] | None = None) -> list[str]:
    """Defer each of ``names`` (``DEFERRED``, read now, when None) that is installed and not imported yet (see the
    module's docstring); return those deferred."""
    return [name for name in (DEFERRED if names is None else names) if _defer(name)]


def import_now(name: str) -> types.ModuleType:
    """``import name`` with its code run now, deferred or not: what a check that the package works calls (a deferred
    one would otherwise pass the check and fail at its first use); raises what the import would."""
    module = importlib.import_module(name)
    _load(name)
    return module


def pending() -> list[str]:
    """The deferred modules whose code has not run yet (for tests and reports)."""
    with _lock:
        return sorted(_pending)

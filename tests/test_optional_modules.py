"""hpc_runner/optional_modules.py: an installed optional package is in ``sys.modules`` at once, its code runs when a
name of it is first used, once, also with threads asking together, and a failing one fails where it is used.

Each test writes its own packages (unique names) and puts its folder on ``sys.path``; what they add to
``sys.modules`` is taken out again. The entry point's real list (MLflow, pyplot, Optuna) under ``import monai`` is
the last test, in a fresh interpreter.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import threading
import uuid

import pytest

from hpc_runner import optional_modules


@pytest.fixture
def packages(tmp_path, monkeypatch):
    """Write packages on a fresh folder of ``sys.path``: ``make(files) -> prefix`` with {relative path: source};
    every module named with the prefix is taken out of ``sys.modules`` afterwards."""
    prefix = f"opt_{uuid.uuid4().hex[:8]}"
    monkeypatch.syspath_prepend(str(tmp_path))

    def make(files: dict[str, str]) -> str:
        for rel, source in files.items():
            path = tmp_path / rel.replace("PKG", prefix)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(source)
        return prefix

    yield make
    for name in [n for n in sys.modules if n.startswith(prefix)]:
        del sys.modules[name]
    for name in [n for n in optional_modules.pending() if n.startswith(prefix)]:
        optional_modules._pending.pop(name)


# a package that counts how often its code ran (in a module-level list of the test's own module)
ran: list[str] = []
COUNTING = "import tests.test_optional_modules as t\nt.ran.append(__name__)\nVALUE = 42\n"


def test_a_deferred_package_is_importable_and_runs_its_code_on_its_first_name_once(packages):
    pkg = packages({"PKG/__init__.py": COUNTING, "PKG/sub.py": "from . import VALUE as V\nTWICE = 2 * V\n"})
    ran.clear()
    assert optional_modules.defer_optional_modules((pkg, f"{pkg}.missing", "no_such_package_anywhere")) == [pkg]
    module = __import__(pkg)
    # what MONAI's optional_import reads (that it is no namespace package, its expression) runs nothing
    is_namespace = getattr(module, "__file__", None) is None and hasattr(module, "__path__")
    assert not is_namespace and module.__spec__.submodule_search_locations and not ran
    assert pkg in optional_modules.pending()
    assert module.VALUE == 42 and [pkg] == ran
    assert importlib.import_module(f"{pkg}.sub").TWICE == 84  # a submodule after it, as usual
    assert module.VALUE == 42 and [pkg] == ran and pkg not in optional_modules.pending()
    assert type(module).__name__ == "module"


def test_a_deferred_submodule_is_read_without_running_and_runs_after_its_package(packages):
    pkg = packages({"PKG/__init__.py": COUNTING, "PKG/leaf.py": COUNTING.replace("42", "'leaf'")})
    ran.clear()
    optional_modules.defer_optional_modules((pkg, f"{pkg}.leaf"))
    # `import pkg.leaf as leaf` reads pkg.leaf: the deferred submodule, no code run
    exec(f"import {pkg}.leaf as leaf", {})
    assert ran == [] and sys.modules[pkg].leaf is sys.modules[f"{pkg}.leaf"]
    assert sys.modules[f"{pkg}.leaf"].VALUE == "leaf" and ran == [pkg, f"{pkg}.leaf"]  # the package first


# optuna's shape: importing `storages` before the package's own code ran (its __init__ imports samplers, which
# import trial) runs trial first, whose `from . import log` then runs the package mid-way: a circular import
CIRCULAR = {
    "PKG/__init__.py": COUNTING + "from .samplers import S\nfrom . import storages\n",
    "PKG/samplers.py": "from .trial import T\nS = T\n",
    "PKG/trial.py": "from . import log\nT = 'trial'\n",
    "PKG/log.py": "",
    "PKG/storages.py": COUNTING.replace("42", "'storages'") + "from .trial import T\n",
}


def test_a_submodule_import_runs_the_package_first_and_gets_the_one_module_its_package_imported(packages):
    pkg = packages(CIRCULAR)
    ran.clear()
    optional_modules.defer_optional_modules((pkg,))
    storages = importlib.import_module(f"{pkg}.storages")  # reads the package's __path__: its code runs first
    assert ran == [pkg, f"{pkg}.storages"]  # each once: the package's own import of storages is the one returned
    assert storages is sys.modules[f"{pkg}.storages"] is sys.modules[pkg].storages
    assert storages.__spec__.origin.endswith("storages.py") and storages.T == "trial"


def test_imported_beneath_runs_only_that_submodule_and_the_package_stays_deferred(packages, monkeypatch):
    pkg = packages({"PKG/__init__.py": COUNTING, "PKG/exc.py": COUNTING.replace("42", "'exc'"),
                    "PKG/other.py": "OTHER = 1\n"})
    ran.clear()
    monkeypatch.setattr(optional_modules, "DEFERRED", (pkg,))
    monkeypatch.setattr(optional_modules, "IMPORTED_BENEATH", (f"{pkg}.exc",))
    assert optional_modules.defer_optional_modules() == [pkg]
    assert ran == [f"{pkg}.exc"] and pkg in optional_modules.pending()  # as MONAI takes MlflowException
    assert importlib.import_module(f"{pkg}.other").OTHER == 1 and ran == [f"{pkg}.exc", pkg]


def test_monai_optional_import_counts_a_deferred_package_as_installed_without_running_it(packages):
    from monai.utils import optional_import
    pkg = packages({"PKG/__init__.py": COUNTING})
    ran.clear()
    optional_modules.defer_optional_modules((pkg,))
    module, found = optional_import(pkg, descriptor="x")
    assert found and ran == []
    assert module.VALUE == 42 and [pkg] == ran


def test_threads_asking_at_once_run_the_code_once_and_all_get_the_names(packages):
    pkg = packages({"PKG/__init__.py": "import time\n" + COUNTING + "time.sleep(0.2)\nLATE = 'set last'\n"})
    ran.clear()
    optional_modules.defer_optional_modules((pkg,))
    module = sys.modules[pkg]
    seen: list[str] = []
    threads = [threading.Thread(target=lambda: seen.append(module.LATE)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == ["set last"] * 4 and [pkg] == ran


def test_its_own_code_asking_for_a_name_not_set_yet_gets_attribute_error_not_a_second_run(packages):
    pkg = packages({"PKG/__init__.py": COUNTING + "import sys\nHAS_LATER = hasattr(sys.modules[__name__], 'LATER')\n"
                                                  "LATER = 1\n"})
    ran.clear()
    optional_modules.defer_optional_modules((pkg,))
    assert sys.modules[pkg].HAS_LATER is False and [pkg] == ran


def test_a_package_whose_code_fails_raises_where_used_and_is_imported_again_next_time(packages):
    pkg = packages({"PKG/__init__.py": COUNTING + "raise RuntimeError('broken install')\n"})
    ran.clear()
    optional_modules.defer_optional_modules((pkg,))
    module = sys.modules[pkg]
    with pytest.raises(RuntimeError, match="broken install"):
        module.VALUE  # noqa: B018 -- the first use
    assert pkg not in sys.modules  # as a failed import
    with pytest.raises(RuntimeError, match="broken install"):
        __import__(pkg)
    assert [pkg, pkg] == ran


def test_an_imported_or_missing_package_is_left_alone(packages):
    pkg = packages({"PKG/__init__.py": COUNTING})
    ran.clear()
    real = __import__(pkg)
    assert optional_modules.defer_optional_modules((pkg, "json", "no_such_package_anywhere")) == []
    assert sys.modules[pkg] is real and type(real).__name__ == "module"


def test_the_entry_points_list_is_deferred_as_monai_is_imported_and_runs_when_used():
    """A fresh interpreter as a job starts: nothing before MONAI's import (torch's included), the list deferred as it
    begins, none of it run by ``import monai``, each run when used."""
    code = (
        "import sys\n"
        "from hpc_runner.optional_modules import defer_when_monai_is_imported, pending\n"
        "defer_when_monai_is_imported()\n"
        "import torch\n"
        "print('before', pending(), 'mlflow.exceptions' in sys.modules)\n"
        "import monai\n"
        "print('after', pending())\n"
        "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
        "plt.figure(); plt.close('all')\n"
        "from monai.handlers import MLFlowHandler\n"
        "import mlflow\n"
        "print('used', mlflow.get_tracking_uri().startswith(('file:', 'sqlite:', 'http')), pending())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd="/")
    assert out.returncode == 0, out.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    assert lines["before"] == "[] False"
    # the test extra installs MLflow's client, matplotlib and Optuna
    assert lines["after"] == "['matplotlib', 'matplotlib.pyplot', 'mlflow', 'mlflow.entities', 'optuna']"
    assert lines["used"] == "True ['optuna']"


def test_import_now_runs_a_deferred_package_at_once_and_raises_its_error_there(packages):
    pkg = packages({"PKG/__init__.py": COUNTING, "PKG/broken/__init__.py": "raise ImportError('half installed')\n"})
    ran.clear()
    optional_modules.defer_optional_modules((pkg, f"{pkg}.broken"))
    assert optional_modules.import_now(pkg).__dict__["VALUE"] == 42 and ran == [pkg]
    with pytest.raises(ImportError, match="half installed"):  # what --tracking mlflow's check catches
        optional_modules.import_now(f"{pkg}.broken")

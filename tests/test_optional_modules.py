"""hpc_runner/optional_modules.py: an installed optional package is in ``sys.modules`` at once, its code runs when a
name of it is first used, once, also with threads asking together, and a failing one fails where it is used.

Each test writes its own packages (unique names) and puts its folder on ``sys.path``; what they add to
``sys.modules`` is taken out again. The entry point's real list (MLflow, pyplot, Optuna) under ``import monai`` is
the last test, in a fresh interpreter.
"""

from __future__ import annotations

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
    # what MONAI's optional_import reads (its file, that it is no namespace package) runs nothing
    assert module.__file__.endswith("__init__.py") and hasattr(module, "__path__") and not ran
    assert pkg in optional_modules.pending()
    assert module.VALUE == 42 and [pkg] == ran
    from importlib import import_module
    assert import_module(f"{pkg}.sub").TWICE == 84  # a submodule after it, as usual
    assert module.VALUE == 42 and [pkg] == ran and pkg not in optional_modules.pending()
    assert type(module).__name__ == "module"


def test_a_submodule_imported_before_the_package_is_used_imports_beneath_it(packages):
    pkg = packages({"PKG/__init__.py": COUNTING, "PKG/leaf.py": "LEAF = 'leaf'\n"})
    ran.clear()
    optional_modules.defer_optional_modules((pkg, f"{pkg}.leaf"))
    # `import pkg.leaf as leaf` reads pkg.leaf: the deferred submodule, the package's code not run
    exec(f"import {pkg}.leaf as leaf\nassert leaf.LEAF == 'leaf'", {})
    assert ran == [] and sys.modules[pkg].leaf is sys.modules[f"{pkg}.leaf"]
    assert sys.modules[pkg].VALUE == 42 and [pkg] == ran


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


def test_the_entry_points_list_is_not_run_by_import_monai_and_runs_when_used():
    """A fresh interpreter as a job starts: the entry point's list deferred, ``import monai``, then each used."""
    code = (
        "import sys\n"
        "from hpc_runner.optional_modules import DEFERRED, defer_optional_modules, pending\n"
        "deferred = defer_optional_modules()\n"
        "import monai\n"
        "print('deferred', sorted(deferred), 'pending', pending())\n"
        "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
        "plt.figure(); plt.close('all')\n"
        "from monai.handlers import MLFlowHandler\n"
        "import mlflow\n"
        "print('used', mlflow.get_tracking_uri().startswith(('file:', 'sqlite:', 'http')), pending())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd="/")
    assert out.returncode == 0, out.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    deferred = lines["deferred"].split(" pending ")[0]
    assert "'mlflow'" in deferred and "'matplotlib.pyplot'" in deferred  # the test extra installs both
    assert lines["deferred"].split(" pending ")[1] == deferred  # none of them ran with `import monai`
    assert lines["used"].startswith("True") and "mlflow" not in lines["used"] and "pyplot" not in lines["used"]


def test_import_now_runs_a_deferred_package_at_once_and_raises_its_error_there(packages):
    pkg = packages({"PKG/__init__.py": COUNTING, "PKG/broken/__init__.py": "raise ImportError('half installed')\n"})
    ran.clear()
    optional_modules.defer_optional_modules((pkg, f"{pkg}.broken"))
    assert optional_modules.import_now(pkg).__dict__["VALUE"] == 42 and ran == [pkg]
    with pytest.raises(ImportError, match="half installed"):  # what --tracking mlflow's check catches
        optional_modules.import_now(f"{pkg}.broken")

"""Targets decided from source files, importing nothing: MONAI's real names, a real missing one, a made package."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hpc_runner.config.monai_names import MonaiNames, index_file
from hpc_runner.config.static_targets import static_verdict
from hpc_runner.config.target_verdicts import TargetVerdicts

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def names(tmp_path_factory: pytest.TempPathFactory) -> MonaiNames:
    """MONAI's component index, built once for this file into a private cache."""
    return MonaiNames(tmp_path_factory.mktemp("cache") / "monai-names.json")


@pytest.fixture
def made_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A package ``spkg`` on sys.path with re-exports, a star import, lazy and dynamic modules."""
    files = {
        "__init__.py": """\
            from .nets import *
            from .losses import Dice as DiceAlias
            from . import nets as nets_module
            import os as os_module
            Same = DiceAlias
            """,
        "nets.py": """\
            __all__ = ["Public"]
            class Public: ...
            class NotListed: ...
            """,
        "losses.py": "def Dice():\n    return 1\n",
        "lazy.py": """\
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from spkg.losses import Dice
            def __getattr__(name):
                raise AttributeError(name)
            """,
        "computed.py": "import functools\nMade = functools.partial(print)\n",
        "broken_dep.py": "import no_such_dependency_xyz\ndef F():\n    pass\n",
    }
    for name, text in files.items():
        path = tmp_path / "spkg" / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path / "spkg"
    for name in [m for m in sys.modules if m == "spkg" or m.startswith("spkg.")]:
        del sys.modules[name]


@pytest.mark.parametrize("target", ["UNet", "Compose", "LoadImaged", "Unet", "MedNeXtB", "monai.networks.nets.UNet",
                                    "monai.utils.set_determinism", "torch.optim.Adam", "hpc_runner.engine.Trainer"])
def test_monai_and_torch_names_that_exist_are_decided_from_source(names, target):
    verdict = static_verdict(target, names)
    assert verdict.decided and verdict.problem is None and verdict.files


def test_a_missing_name_is_refused_in_the_words_of_the_import_check(names):
    dotted = static_verdict("monai.networks.nets.NoSuchNet", names)
    assert dotted.decided and dotted.problem == (
        "_target_ 'monai.networks.nets.NoSuchNet' cannot be imported: cannot locate 'monai.networks.nets.NoSuchNet'")
    bare = static_verdict("NoSuchUNet", names)
    assert bare.decided and "not a MONAI component name" in bare.problem
    assert static_verdict("UNetz", names).problem.endswith("; did you mean UNet?")
    assert static_verdict("monai.networks.nets", names).problem == (
        "_target_ 'monai.networks.nets' is not a class or function")


def test_the_index_keeps_what_component_locator_keeps(names):
    assert names.module_of("Unet") == "monai.networks.nets.unet"  # an alias of a class defined there
    assert names.module_of("ProfileResult") == "monai.utils.profiling"  # a namedtuple's class
    assert names.module_of("pytorch_after") is None  # lru_cache: no plain function
    assert names.module_of("VideoFileDataset") is None  # its module is excluded from `import monai`
    assert names.module_of("DiceLoss") == "monai.losses.dice"  # defined there, re-exported by monai.losses
    assert index_file().name == "monai-names.json"


def test_reexports_star_imports_and_aliases_are_followed(made_package, names):
    for target in ["spkg.Public", "spkg.DiceAlias", "spkg.Same", "spkg.nets.Public", "spkg.lazy.Dice"]:
        verdict = static_verdict(target, names)
        assert (target, verdict.decided, verdict.problem) == (target, True, None)
    assert made_package / "losses.py" in static_verdict("spkg.Same", names).files
    not_starred = static_verdict("spkg.NotListed", names)  # nets' __all__ leaves it out of the star import
    assert not_starred.decided and "cannot locate 'spkg.NotListed'" in not_starred.problem
    assert "is not a class or function" in static_verdict("spkg.os_module", names).problem
    assert "is not a class or function" in static_verdict("spkg.nets_module", names).problem
    assert "spkg" not in sys.modules  # nothing was imported


def test_what_only_running_code_tells_is_left_to_the_import(made_package, names):
    assert "__getattr__" in static_verdict("spkg.lazy.Other", names).why
    assert not static_verdict("spkg.computed.Made", names).decided
    assert "no_such_dependency_xyz" in static_verdict("spkg.broken_dep.F", names).why
    assert not static_verdict("numpy.zeros", names).decided  # defined in a C extension


def test_a_static_verdict_is_forgotten_when_a_file_it_read_changes(made_package, tmp_path, names):
    verdicts = TargetVerdicts(tmp_path / "targets.json")
    verdict = static_verdict("spkg.DiceAlias", names)
    verdicts.remember("spkg.DiceAlias", None, verdict.files)
    verdicts.save()
    assert TargetVerdicts(tmp_path / "targets.json").known("spkg.DiceAlias", None)
    losses = made_package / "losses.py"
    losses.write_text("def Dice():\n    return 2\n")
    later = losses.stat().st_mtime_ns + 10**9
    os.utime(losses, ns=(later, later))
    assert not TargetVerdicts(tmp_path / "targets.json").known("spkg.DiceAlias", None)


def test_the_example_bundles_targets_are_checked_without_importing_torch_or_monai(tmp_path):
    code = textwrap.dedent("""\
        import sys
        from hpc_runner.config.bundle_config import load_bundle_config
        from hpc_runner.config.preflight import PreflightCache, config_problems
        cache = PreflightCache()
        assert config_problems(load_bundle_config("bundles/synthetic_seg"), cache, cwd=sys.argv[1]) == []
        print(cache.resolved, cache.imported, "torch" in sys.modules, "monai" in sys.modules)
        """)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    resolved, imported, torch, monai = done.stdout.split()
    assert int(resolved) > 10 and (imported, torch, monai) == ("0", "False", "False")

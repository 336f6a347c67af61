"""The pre-flight remembers targets that resolved, per unchanged package, and forgets them when it changes."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from hpc_runner.config.bundle_config import load_bundle_config
from hpc_runner.config.preflight import PreflightCache, config_problems
from hpc_runner.config.target_verdicts import MAX_ENTRIES, TargetVerdicts, cache_file, package_stamp

META = json.loads((Path(__file__).resolve().parents[2] / "bundles" / "synthetic_seg" / "configs" /
                   "metadata.json").read_text())


def bundle(root: Path, train_yaml: str, scripts: dict[str, str] | None = None) -> Path:
    """A bundle with the given train.yaml and optional scripts/ modules."""
    (root / "configs").mkdir(parents=True)
    (root / "configs" / "train.yaml").write_text(train_yaml)
    (root / "configs" / "metadata.json").write_text(json.dumps(META))
    for name, text in (scripts or {}).items():
        (root / "scripts").mkdir(exist_ok=True)
        (root / "scripts" / "__init__.py").write_text("")
        (root / "scripts" / f"{name}.py").write_text(text)
    return root


@pytest.fixture
def own_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A source-tree package ``vpkg`` on sys.path (as an editable install is), and a private verdict file."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    src = tmp_path / "src"
    (src / "vpkg").mkdir(parents=True)
    (src / "vpkg" / "__init__.py").write_text("")
    (src / "vpkg" / "nets.py").write_text("def Net():\n    return 1\n")
    monkeypatch.syspath_prepend(str(src))
    yield src / "vpkg"
    for name in [m for m in sys.modules if m == "vpkg" or m.startswith(("vpkg.", "scripts"))]:
        del sys.modules[name]


def preflight(b: Path) -> PreflightCache:
    """One command's pre-flight of the bundle ``b``: a fresh cache, as a new process has."""
    cache = PreflightCache()
    assert config_problems(load_bundle_config(b), cache) == []
    return cache


def test_a_target_resolved_once_is_not_imported_by_the_next_command(own_package, tmp_path):
    b = bundle(tmp_path / "b", "net:\n  _target_: vpkg.nets.Net\n")
    first = preflight(b)
    assert (first.resolved, first.remembered) == (1, 0)
    assert cache_file() == tmp_path / "cache" / "hpc-runner" / "targets.json" and cache_file().is_file()
    assert "vpkg.nets" not in sys.modules  # read from its source, never imported
    second = preflight(b)
    assert (second.resolved, second.remembered) == (0, 1)
    assert "vpkg.nets" not in sys.modules


def test_editing_any_module_of_a_source_tree_forgets_its_verdicts(own_package, tmp_path):
    b = bundle(tmp_path / "b", "net:\n  _target_: vpkg.nets.Net\n")
    preflight(b)
    nets = own_package / "nets.py"
    nets.write_text("Other = 1\n")  # Net is gone: the next pre-flight must import and refuse
    later = nets.stat().st_mtime_ns + 10**9
    os.utime(nets, ns=(later, later))
    problems = config_problems(load_bundle_config(b), PreflightCache())
    assert len(problems) == 1 and "vpkg.nets.Net" in problems[0].message


def test_a_failure_is_never_remembered(own_package, tmp_path):
    b = bundle(tmp_path / "b", "net:\n  _target_: vpkg.nets.Missing\n")
    for _ in range(2):
        cache = PreflightCache()
        assert len(config_problems(load_bundle_config(b), cache)) == 1
        assert cache.resolved == 1 and cache.remembered == 0
    assert not cache_file().exists()


def test_the_bundles_own_modules_are_always_imported(own_package, tmp_path):
    b = bundle(tmp_path / "b", "net:\n  _target_: scripts.nets.Net\n", {"nets": "def Net():\n    return 1\n"})
    for _ in range(2):
        assert preflight(b).resolved == 1
    assert package_stamp("scripts.nets.Net", b) is None


def test_an_installed_package_is_stamped_by_its_init_and_a_bare_name_by_monai(own_package):
    import monai

    stamp = package_stamp("UNet", None)
    assert stamp is not None and stamp.startswith("installed:") and str(Path(monai.__file__).resolve()) in stamp
    assert package_stamp("no_such_top_level_module.X", None) is None


def test_a_damaged_or_huge_verdict_file_is_ignored_and_the_file_stays_bounded(own_package, tmp_path):
    path = cache_file()
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    verdicts = TargetVerdicts()
    assert not verdicts.known("vpkg.nets.Net", None)
    verdicts.remember("vpkg.nets.Net", None)
    verdicts.save()
    assert TargetVerdicts().known("vpkg.nets.Net", None)
    path.write_text(json.dumps({f"{n:032x}": 1 for n in range(MAX_ENTRIES)}))
    verdicts = TargetVerdicts()
    verdicts.remember("vpkg.nets.Net", None)
    verdicts.save()
    kept = json.loads(path.read_text())
    assert len(kept) == MAX_ENTRIES and TargetVerdicts().known("vpkg.nets.Net", None)

"""Two bundles with their own ``scripts`` package in one process (a pipeline's stages, a test session):
each imports its own code, and an installed module is never dropped."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

from hpc_runner.config.monai_bridge import bundle_on_sys_path


def _bundle(root: Path, word: str) -> Path:
    (root / "configs").mkdir(parents=True)
    (root / "configs" / "metadata.json").write_text(json.dumps({"name": root.name, "version": "0.1"}))
    (root / "scripts").mkdir()
    (root / "scripts" / "__init__.py").write_text("")
    (root / "scripts" / "work.py").write_text(f"def act():\n    return {word!r}\n")
    return root


@pytest.fixture
def clean_scripts():
    """Leave no ``scripts`` module of these tmp bundles behind for later tests."""
    yield
    for name in [m for m in sys.modules if m == "scripts" or m.startswith("scripts.")]:
        del sys.modules[name]


def test_the_second_bundle_imports_its_own_scripts_not_the_first_ones(tmp_path: Path, clean_scripts) -> None:
    first, second = _bundle(tmp_path / "a", "first"), _bundle(tmp_path / "b", "second")
    with bundle_on_sys_path(first):
        assert importlib.import_module("scripts.work").act() == "first"
    with bundle_on_sys_path(second):  # before the fix: 'first' (the cached package), or no scripts.work
        assert importlib.import_module("scripts.work").act() == "second"
    with bundle_on_sys_path(first):
        assert importlib.import_module("scripts.work").act() == "first"


def test_an_installed_module_of_the_same_name_as_a_bundle_file_is_kept(tmp_path: Path) -> None:
    import json as installed

    bundle = _bundle(tmp_path / "c", "x")
    (bundle / "json.py").write_text("raise SystemExit('the bundle hid the standard library')\n")
    with bundle_on_sys_path(bundle):
        assert sys.modules["json"] is installed and importlib.import_module("json") is installed

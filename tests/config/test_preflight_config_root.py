"""Without --bundle the pre-flight looks for a bundle's ``scripts/`` where the run will: in MONAI's bundle
root, the folder above ``configs/`` (``pathology_nuclick_annotation``'s ``scripts.TensorBoardImageHandler``,
run as its README says with the ``hpc-runner`` command, whose ``sys.path`` does not hold the working folder)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from hpc_runner.config.bundle_config import load_bundle_config
from hpc_runner.config.preflight import check_config, config_problems


@pytest.fixture
def forget_scripts():
    """Bundle-local `scripts` packages must not leak from one test into another."""
    yield
    for name in [m for m in sys.modules if m == "scripts" or m.startswith("scripts.")]:
        del sys.modules[name]


def _bundle_with_scripts(root: Path) -> Path:
    (root / "configs").mkdir(parents=True)
    (root / "configs" / "train.json").write_text('{"handler": {"_target_": "scripts.ImageHandler"}}')
    (root / "scripts").mkdir()
    (root / "scripts" / "__init__.py").write_text("from .handlers import ImageHandler\n")
    (root / "scripts" / "handlers.py").write_text("class ImageHandler:\n    pass\n")
    return root


def test_a_scripts_target_passes_the_preflight_with_config_files_only_from_another_folder(
        tmp_path, monkeypatch, forget_scripts):
    bundle = _bundle_with_scripts(tmp_path / "zoo_bundle")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # neither the bundle nor the working folder is on sys.path
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(bundle), str(elsewhere))])
    cfg = load_bundle_config(None, [str(bundle / "configs" / "train.json")], check=False)
    assert cfg.bundle_dir is None and cfg.code_dir == bundle
    assert config_problems(cfg, entry="handler") == []  # before: cannot locate 'scripts.ImageHandler'
    check_config(cfg, entry="handler")
    assert str(bundle.resolve()) not in sys.path  # only while checking

"""MANIFEST: sha256sum format, what is left out, and how a folder differs from it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from registry_helpers import EXAMPLE, copy_bundle

from hpc_runner.errors import BundleError
from hpc_runner.registry.manifest import (
    compute_manifest,
    diff_manifest,
    format_manifest,
    is_excluded,
    parse_manifest,
)


def test_left_out_of_a_bundle() -> None:
    assert is_excluded("data/img000.nii.gz") and is_excluded("runs/x/log.txt") and is_excluded("eval/out.nii.gz")
    assert is_excluded("scripts/__pycache__/a.cpython-311.pyc") and is_excluded("MANIFEST")
    assert is_excluded(".git", is_dir=True) and is_excluded("scripts/.ipynb_checkpoints/x.py")
    assert not is_excluded("configs/data.json") and not is_excluded("docs/MANIFEST")
    assert not is_excluded("scripts/data/reader.py")  # only the top-level data/ holds data


def test_manifest_round_trip_and_sha256sum(tmp_path: Path) -> None:
    bundle = copy_bundle(EXAMPLE, tmp_path / "b")
    (bundle / "data").mkdir(exist_ok=True)
    (bundle / "data" / "img.nii.gz").write_bytes(b"x")
    (bundle / "scripts" / "__pycache__").mkdir(parents=True)
    (bundle / "scripts" / "__pycache__" / "m.pyc").write_bytes(b"x")
    (bundle / "scripts" / "util.py").write_text("X = 1\n")
    manifest = compute_manifest(bundle)
    assert {"configs/metadata.json", "configs/train.yaml", "scripts/util.py"} <= set(manifest)
    assert not any(rel.startswith("data/") or rel.endswith(".pyc") for rel in manifest)
    text = format_manifest(manifest)
    assert parse_manifest(text, "MANIFEST") == manifest
    (bundle / "MANIFEST").write_text(text)
    if shutil.which("sha256sum"):
        res = subprocess.run(["sha256sum", "-c", "MANIFEST"], cwd=bundle, capture_output=True, text=True)
        assert res.returncode == 0, res.stdout + res.stderr
    assert diff_manifest(bundle, manifest).ok


def test_diff_names_changed_missing_added_and_links(tmp_path: Path) -> None:
    bundle = copy_bundle(EXAMPLE, tmp_path / "b")
    (bundle / "docs").mkdir(exist_ok=True)
    (bundle / "docs" / "README.md").write_text("# b\n")
    manifest = compute_manifest(bundle)
    with open(bundle / "configs" / "train.yaml", "a") as f:
        f.write("# edited\n")
    (bundle / "docs" / "README.md").unlink()
    (bundle / "configs" / "extra.yaml").write_text("a: 1\n")
    os.symlink("/etc/hostname", bundle / "configs" / "link.yaml")
    diff = diff_manifest(bundle, manifest)
    assert (diff.changed, diff.missing, diff.added) == (
        ["configs/train.yaml"], ["docs/README.md"], ["configs/extra.yaml", "configs/link.yaml"])
    assert diff.describe() == ("changed: configs/train.yaml; missing: docs/README.md; "
                               "added: configs/extra.yaml, configs/link.yaml")
    with pytest.raises(BundleError, match=r"symbolic links: configs/link\.yaml"):
        compute_manifest(bundle)


@pytest.mark.parametrize("line", ["abc  configs/train.yaml", f"{'0' * 64}  ../etc/passwd", f"{'0' * 64}  /abs"])
def test_malformed_manifest_names_the_line(line: str) -> None:
    with pytest.raises(BundleError) as info:
        parse_manifest(f"{'1' * 64}  configs/a.yaml\n{line}\n", "b/MANIFEST")
    assert info.value.where == "b/MANIFEST:2"

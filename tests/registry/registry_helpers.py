"""Helpers shared by the registry tests (imported by name: this folder is on sys.path under pytest)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "bundles" / "synthetic_seg"
ZOO = Path(__file__).resolve().parent / "data" / "zoo_spleen_like"
# ids of bundles/synthetic_seg/configs/train.yaml: a run of a few seconds on a CPU
TINY = ["--num_train", "2", "--num_val", "1", "--image_size", "16", "--max_epochs", "1", "--val_interval", "1"]


def clean_env(tmp_path: Path, bundle_path: str | None = None, **extra: str) -> dict[str, str]:
    """The ambient environment without HPCR settings, a private user config dir, and ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HPCR")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")  # never the developer's own ~/.config/hpc-runner
    if bundle_path is not None:
        env["HPCR_BUNDLE_PATH"] = bundle_path
    env.update(extra)
    return env


def copy_bundle(src: Path, dest: Path, *, version: str | None = None, name: str | None = None,
                description: str | None = None) -> Path:
    """Copy a bundle (no data/runs) and optionally change its metadata's version, name or description."""
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("data", "runs", "__pycache__", "MANIFEST"))
    meta_path = dest / "configs" / "metadata.json"
    meta = json.loads(meta_path.read_text())
    if version:
        meta["version"] = version
        meta.setdefault("changelog", {})[version] = "test version"
    if name:
        meta["name"] = name
    if description:
        meta["description"] = description
    meta_path.write_text(json.dumps(meta, indent=4))
    return dest


def out(proc: subprocess.CompletedProcess) -> str:
    """stdout and stderr together (for assertion messages and searches)."""
    return proc.stdout + proc.stderr


def make_decathlon_folder(root: Path, cases: int = 4, size: int = 32, *, validation: int = 0,
                          modality: dict | None = None, shapes: list[tuple[int, int, int]] | None = None,
                          affine: list[list[float]] | None = None) -> Path:
    """A Decathlon-style folder: ``cases`` noisy spheres of ``size``^3 (1.5 mm voxels) with their labels.

    The last ``validation`` cases go to dataset.json's "validation" list; the rest to "training". ``shapes``
    gives each case its own shape (voxels, as stored) instead; ``affine`` the voxel-to-world matrix of every file.
    """
    import nibabel as nib
    import numpy as np

    rng = np.random.default_rng(0)
    (root / "imagesTr").mkdir(parents=True)
    (root / "labelsTr").mkdir()
    shapes = shapes or [(size,) * 3] * cases
    cases = len(shapes)
    matrix = np.array(affine, dtype=float) if affine is not None else np.diag([1.5, 1.5, 1.5, 1.0])
    entries = []
    for i, shape in enumerate(shapes):
        grid = np.indices(shape).transpose(1, 2, 3, 0)
        centre = rng.uniform(0.35, 0.65, 3) * np.array(shape)
        label = (np.linalg.norm(grid - centre, axis=-1) < min(shape) * rng.uniform(0.15, 0.3)).astype(np.uint8)
        image = (100 + 200 * label + rng.normal(0, 30, label.shape)).astype(np.float32)
        name = f"case_{i:03d}.nii.gz"
        nib.save(nib.Nifti1Image(image, matrix), root / "imagesTr" / name)
        nib.save(nib.Nifti1Image(label, matrix), root / "labelsTr" / name)
        entries.append({"image": f"./imagesTr/{name}", "label": f"./labelsTr/{name}"})
    kept = cases - validation
    dataset = {"name": "Spheres", "modality": modality or {"0": "MRI"},
               "labels": {"0": "background", "1": "sphere"}, "numTraining": kept, "training": entries[:kept]}
    if validation:
        dataset["validation"] = entries[kept:]
    (root / "dataset.json").write_text(json.dumps(dataset, indent=2))
    return root

"""Synthetic 3D segmentation data for the example bundle: noisy spheres saved as NIfTI volumes."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from hpc_runner.records.read import RecordError, parse_json_text, read_record_text

SPLITS = ("train", "val")


def _volume_paths(dataset_dir: Path, index: int) -> tuple[Path, Path]:
    return dataset_dir / f"img{index:03d}.nii.gz", dataset_dir / f"seg{index:03d}.nii.gz"


def _save_nifti_atomic(array: np.ndarray, path: Path) -> None:
    import nibabel as nib

    # the temp name keeps the .nii.gz suffix so nibabel picks the format; rename makes it appear whole
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".nii.gz", dir=path.parent)
    os.close(fd)
    try:
        nib.save(nib.Nifti1Image(array, np.eye(4)), tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


PARAMS_FILE = "synthetic.json"


def _publish_once(path: Path, text: str) -> bool:
    """Make ``path`` hold ``text`` unless it exists; return False when it already did.

    The file appears whole or not at all (a hard link of a finished temp file), so a job killed
    mid-write cannot leave an empty file that every later job would misread.
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        try:
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False
        except OSError:  # a file system without hard links: exclusive create, then write
            pass
    finally:
        os.unlink(tmp)
    try:
        with open(path, "x", encoding="utf-8") as f:
            f.write(text)
        return True
    except FileExistsError:
        return False


def _check_params(folder: Path, params: dict) -> None:
    """Record the generation parameters once; refuse a folder that holds volumes made differently."""
    path = folder / PARAMS_FILE
    # the first job to get here writes it, others compare (reading only: a dataset made before may be read-only,
    # as inside run --safe's sandbox)
    if not path.exists() and _publish_once(path, json.dumps(params)):
        return
    for _ in range(50):  # without hard links, another job may be between creating and writing the file
        try:
            text = read_record_text(path, "synthetic dataset's params", limit=1 << 20)
            if text is not None:
                existing = parse_json_text(text, path, "synthetic dataset's params")
                break
        except RecordError:  # being written: cut short, or not there yet
            pass
        time.sleep(0.1)
    else:
        existing = {}
    if existing != params:
        raise ValueError(
            f"{folder} holds synthetic volumes made with {existing}, not {params}; "
            "use another dataset_dir for other sizes, noise or seed"
        )


def ensure_synthetic_volumes(
    dataset_dir: str | os.PathLike,
    num_train: int = 16,
    num_val: int = 4,
    size: int = 64,
    noise_max: float = 0.5,
    seed: int = 0,
    num_objs: int = 12,
) -> list[dict[str, str]]:
    """Create the volumes that are missing in ``dataset_dir`` and return the whole datalist.

    Volume ``i`` depends only on ``(seed, i)``, so every job that shares the folder writes the same
    files; each file appears atomically, so concurrent jobs never read half a volume. The folder
    remembers size, noise and seed, and refuses to mix volumes made with other ones.
    """
    from monai.data import create_test_image_3d

    folder = Path(dataset_dir)
    folder.mkdir(parents=True, exist_ok=True)
    _check_params(folder, {"size": int(size), "noise_max": float(noise_max), "seed": int(seed),
                           "num_objs": int(num_objs)})
    datalist = []
    for i in range(int(num_train) + int(num_val)):
        img_path, seg_path = _volume_paths(folder, i)
        if not (img_path.exists() and seg_path.exists()):
            image, seg = create_test_image_3d(
                size, size, size, num_objs=num_objs, rad_max=max(4, size // 5), rad_min=max(2, size // 16),
                noise_max=noise_max, num_seg_classes=1, random_state=np.random.RandomState(seed * 100003 + i),
            )
            _save_nifti_atomic(seg.astype(np.uint8), seg_path)
            _save_nifti_atomic(image.astype(np.float32), img_path)
        datalist.append({"image": str(img_path), "label": str(seg_path)})
    return datalist


def synthetic_datalist(
    dataset_dir: str | os.PathLike, split: str = "train", num_train: int = 16, num_val: int = 4
) -> list[dict[str, str]]:
    """Return a split of the volumes: ``val`` is volumes [0, num_val), ``train`` the next ``num_train``.

    The validation set stays the same whatever ``num_train`` a run (or a sweep point) asks for.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    folder = Path(dataset_dir)
    indices = range(num_val) if split == "val" else range(num_val, num_val + num_train)
    pairs = []
    for i in indices:
        img_path, seg_path = _volume_paths(folder, i)
        if not (img_path.exists() and seg_path.exists()):
            raise FileNotFoundError(f"{img_path} is missing; the bundle's initialize step creates the volumes")
        pairs.append({"image": str(img_path), "label": str(seg_path)})
    return pairs

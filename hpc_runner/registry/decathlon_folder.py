"""A Medical Segmentation Decathlon-style folder, checked before a bundle is written for it.

The folder holds ``dataset.json`` (``training``: image/label pairs, optional ``validation``, ``labels``,
``modality``) with the volumes in ``imagesTr/`` and ``labelsTr/``. Every path it names must be a file
inside the folder: a hostile or mistaken ``../`` or absolute path is refused by name, never followed.
"""

from __future__ import annotations

import json
import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpc_runner.errors import BundleError

DATASET_JSON = "dataset.json"
SPLITS = ("training", "validation")
KEYS = ("image", "label")
EXPECTED = (f"a Decathlon-style folder: {DATASET_JSON} whose \"training\" list holds "
            "{\"image\": \"./imagesTr/x.nii.gz\", \"label\": \"./labelsTr/x.nii.gz\"} entries, every one a file "
            "inside the folder")
DEFAULT_LABELS = {"0": "background", "1": "foreground"}
DEFAULT_MODALITY = {"0": "image"}


@dataclass
class DecathlonFolder:
    """What a bundle needs to know about a checked Decathlon-style folder."""

    root: Path                      # absolute
    name: str                       # dataset.json "name", else the folder's name
    num_training: int
    num_validation: int             # 0: no "validation" list, the bundle splits "training"
    labels: dict[str, str]
    modality: dict[str, str]
    spacing: list[float]            # the median voxel size of the training images, mm
    notes: list[str] = field(default_factory=list)  # defaults taken, for the user to read

    @property
    def dataset_json(self) -> Path:
        """Return the path of dataset.json."""
        return self.root / DATASET_JSON

    @property
    def is_ct(self) -> bool:
        """Return whether the only modality is CT (Hounsfield units: a fixed intensity window fits)."""
        return [m.strip().upper() for m in self.modality.values()] == ["CT"]


def _refuse(where: Path, message: str) -> BundleError:
    return BundleError(message, where=str(where), expected=EXPECTED)


def _inside(root: Path, raw: str) -> Path | None:
    """Return the path ``raw`` names relative to ``root`` if it stays inside ``root``, else None.

    The check is on the path as written (normalised, not resolved): a symlink the owner placed inside the
    folder is theirs to place, while ``../`` and absolute paths elsewhere are what a hostile file would use.
    """
    path = Path(os.path.normpath(os.path.join(root, raw)))
    try:
        path.relative_to(root)
    except ValueError:
        return None
    return path


def _entry_files(root: Path, where: Path, entry_id: str, entry: Any) -> list[Path]:
    """Return the image and label files of one datalist entry, refusing what is missing or outside."""
    if not isinstance(entry, dict):
        raise _refuse(where, f"{entry_id} is {type(entry).__name__} {entry!r:.60}, not an object with "
                      "\"image\" and \"label\"")
    files = []
    for key in KEYS:
        value = entry.get(key)
        values = value if isinstance(value, list) else [value]
        if value is None or not values:
            raise _refuse(where, f"{entry_id} has no \"{key}\"")
        for n, raw in enumerate(values):
            ref = f"{entry_id}.{key}" + (f"[{n}]" if isinstance(value, list) else "")
            if not isinstance(raw, str) or not raw.strip():
                raise _refuse(where, f"{ref} is {raw!r:.60}, not a file path")
            path = _inside(root, raw)
            if path is None:
                raise _refuse(where, f"{ref} names '{raw}', which is outside the folder {root}; paths in "
                              f"{DATASET_JSON} must stay inside it (no '../', no absolute path elsewhere)")
            if not path.is_file():
                raise _refuse(where, f"{ref} names '{raw}', which does not exist (looked for {path})"
                              if not path.exists() else f"{ref} names '{raw}', which is not a file ({path})")
            files.append(path)
    return files


def _names(where: Path, meta: dict, key: str, default: dict[str, str], notes: list[str]) -> dict[str, str]:
    value = meta.get(key)
    if value is None:
        notes.append(f"{DATASET_JSON} has no \"{key}\"; assumed {json.dumps(default)}")
        return dict(default)
    if not isinstance(value, dict) or not value or not all(str(k).isdigit() for k in value):
        raise _refuse(where, f"\"{key}\" is {json.dumps(value)[:80]}, not an object of numbered names "
                      f"like {json.dumps(default)}")
    return {str(k): str(v) for k, v in sorted(value.items(), key=lambda kv: int(kv[0]))}


def _median_spacing(images: list[Path], where: Path) -> list[float]:
    """Return the median voxel size (x, y, z) of ``images``, read from their headers only."""
    import nibabel as nib

    zooms = []
    for path in images:
        try:
            header = nib.load(str(path)).header
        except Exception as exc:  # nibabel raises several types for a file it cannot read
            raise BundleError(f"cannot read the image header: {exc}", where=str(path),
                              expected="NIfTI volumes (.nii or .nii.gz) as dataset.json says") from None
        zoom = [float(z) for z in header.get_zooms()[:3]]
        zooms.append(zoom + [1.0] * (3 - len(zoom)))
    return [round(statistics.median(axis), 3) for axis in zip(*zooms)]


def check_decathlon_folder(folder: str | Path) -> DecathlonFolder:
    """Return the checked folder, or raise BundleError naming the file and entry that is wrong."""
    root = Path(os.path.abspath(Path(folder).expanduser()))
    if not root.is_dir():
        raise _refuse(root, "this is not a folder" if root.exists() else "this folder does not exist")
    where = root / DATASET_JSON
    if not where.is_file():
        raise _refuse(where, f"the folder has no {DATASET_JSON}")
    try:
        meta = json.loads(where.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _refuse(where, f"cannot read it as JSON: {exc}") from None
    if not isinstance(meta, dict):
        raise _refuse(where, f"it holds a JSON {type(meta).__name__}, not an object")
    counts = {}
    first_images: list[Path] = []
    for split in SPLITS:
        entries = meta.get(split)
        if entries is None and split == "validation":
            counts[split] = 0
            continue
        if not isinstance(entries, list) or not entries:
            raise _refuse(where, f"\"{split}\" is missing or empty" if not entries else
                          f"\"{split}\" is {type(entries).__name__}, not a list of image/label entries")
        for i, entry in enumerate(entries):
            files = _entry_files(root, where, f"{split}[{i}]", entry)
            if split == "training":
                first_images.append(files[0])
        counts[split] = len(entries)
    if counts["validation"] == 0 and counts["training"] < 2:
        raise _refuse(where, "\"training\" has one entry and there is no \"validation\" list, so no case is "
                      "left to validate on")
    notes: list[str] = []
    labels = _names(where, meta, "labels", DEFAULT_LABELS, notes)
    if len(labels) < 2:
        raise _refuse(where, f"\"labels\" names {len(labels)} class; a segmentation needs the background and "
                      "at least one more, e.g. {\"0\": \"background\", \"1\": \"spleen\"}")
    modality = _names(where, meta, "modality", DEFAULT_MODALITY, notes)
    name = meta.get("name") if isinstance(meta.get("name"), str) and meta.get("name") else root.name
    return DecathlonFolder(root=root, name=str(name), num_training=counts["training"],
                           num_validation=counts["validation"], labels=labels, modality=modality,
                           spacing=_median_spacing(first_images, where), notes=notes)

"""A Medical Segmentation Decathlon-style folder, checked before a bundle is written for it.

The folder holds ``dataset.json`` (``training``: image/label pairs, optional ``validation``, ``labels``,
``modality``) with the volumes in ``imagesTr/`` and ``labelsTr/``. Every path it names must be a file
inside the folder: a hostile or mistaken ``../`` or absolute path is refused by name, never followed.

dataset.json is someone else's file: it is read through records/read.py (size, file type and nesting bounded),
and every value a bundle takes from it is checked here, so that the rest of init only sees typed, sane values:
names are text without control characters that MONAI's config parser would not read as code or a reference
(``$``, ``@``, ``%`` first), class numbers are 0..n-1 in ASCII digits, no validation case is a training case,
and every voxel size is a finite, positive number. A refusal names dataset.json, the field and what was wanted.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpc_runner.control_chars import find_control_character
from hpc_runner.errors import BundleError
from hpc_runner.records.read import parse_json_text, read_record_text

DATASET_JSON = "dataset.json"
SPLITS = ("training", "validation")
KEYS = ("image", "label")
EXPECTED = (f"a Decathlon-style folder: {DATASET_JSON} whose \"training\" list holds "
            "{\"image\": \"./imagesTr/x.nii.gz\", \"label\": \"./labelsTr/x.nii.gz\"} entries, every one a file "
            "inside the folder")
DEFAULT_LABELS = {"0": "background", "1": "foreground"}
DEFAULT_MODALITY = {"0": "image"}
MAX_BYTES = 64 << 20  # a dataset.json of 100,000 cases is ~15 MB
CONFIG_SIGILS = ("$", "@", "%")  # MONAI's config parser: an expression, a reference, a macro
MAX_SAID = 20  # bad entries named in one refusal
_CLASS_NUMBER = re.compile(r"(?:0|[1-9][0-9]{0,5})")


@dataclass(frozen=True)
class Volume:
    """One image of the datalist as its header says, in the axis order of the bundle's ``Orientationd`` (RAS)."""

    ref: str                        # "training[3].image"
    path: Path
    shape: tuple[int, int, int]     # voxels per axis
    zoom: tuple[float, float, float]  # mm per voxel, each finite and positive

    def sides(self, spacing: list[float]) -> list[int]:
        """Return the voxels per axis once resampled to ``spacing`` (as ``Spacingd`` does)."""
        return [max(1, round(d * z / s)) for d, z, s in zip(self.shape, self.zoom, spacing)]


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
    volumes: list[Volume] = field(default_factory=list)  # every image, training and validation

    @property
    def training_volumes(self) -> list[Volume]:
        """Return the volumes of the "training" list: the ones cropped (a validation volume smaller than the crop is
        padded by the sliding window, which is harmless)."""
        return [v for v in self.volumes if v.ref.startswith("training[")]

    @property
    def smallest(self) -> list[int]:
        """Return the smallest size per axis over the training volumes, in voxels of ``spacing`` (RAS axis order)."""
        return [min(axis) for axis in zip(*(v.sides(self.spacing) for v in self.training_volumes))] or [0, 0, 0]

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
            if find_control_character(raw) is not None:
                raise _refuse(where, f"{ref} names {raw!r:.80}, a path with a control character")
            path = _inside(root, raw)
            if path is None:
                raise _refuse(where, f"{ref} names {raw!r:.200}, which is outside the folder {root}; paths in "
                              f"{DATASET_JSON} must stay inside it (no '../', no absolute path elsewhere)")
            try:
                is_file, exists = path.is_file(), path.exists()
            except (OSError, ValueError) as exc:  # a name too long for the filesystem
                raise _refuse(where, f"{ref} names {raw!r:.80}, which cannot be looked up ({exc})") from None
            if not is_file:
                raise _refuse(where, f"{ref} names {raw!r:.200}, which does not exist (looked for {path})"
                              if not exists else f"{ref} names {raw!r:.200}, which is not a file ({path})")
            files.append(path)
    return files


def checked_text(where: Path, field_name: str, value: Any) -> str:
    """Return ``value`` when it is text a bundle may carry: a string without control characters that MONAI's
    config parser reads as plain text (not starting with ``$``, ``@`` or ``%``); else refuse naming the field."""
    if not isinstance(value, str) or not value.strip():
        raise _refuse(where, f"{field_name} is {json.dumps(value)[:60]}, not a name (non-empty text)")
    if find_control_character(value) is not None:
        raise _refuse(where, f"{field_name} is {value!r:.80}, a name with a control character (a line break, an "
                      "escape sequence)")
    if value.lstrip().startswith(CONFIG_SIGILS):
        raise _refuse(where, f"{field_name} is {value!r:.80}: a name starting with '$', '@' or '%' is code, a "
                      "reference or a macro to MONAI's config parser, and a bundle's configs carry this name")
    return value


def _names(where: Path, meta: dict, key: str, default: dict[str, str], notes: list[str]) -> dict[str, str]:
    value = meta.get(key)
    if value is None:
        notes.append(f"{DATASET_JSON} has no \"{key}\"; assumed {json.dumps(default)}")
        return dict(default)
    if not isinstance(value, dict) or not value or not all(_CLASS_NUMBER.fullmatch(str(k)) for k in value):
        raise _refuse(where, f"\"{key}\" is {json.dumps(value, ensure_ascii=True)[:80]}, not an object of numbered "
                      f"names like {json.dumps(default)}")
    numbers = sorted(int(k) for k in value)
    if numbers != list(range(len(numbers))):
        raise _refuse(where, f"\"{key}\" numbers its entries {numbers[:10]}, not 0, 1, ..., {len(numbers) - 1}: "
                      "each number is a channel or a class value, counted from 0 without a gap")
    return {str(k): checked_text(where, f"\"{key}\".\"{k}\"", v)
            for k, v in sorted(value.items(), key=lambda kv: int(kv[0]))}


def _check_disjoint(where: Path, cases: dict[str, list[Path]]) -> None:
    """Refuse a validation case that is also a training case (the same image file, as written or normalised)."""
    training = {path: n for n, path in enumerate(cases.get("training", []))}
    for n, path in enumerate(cases.get("validation", [])):
        if path in training:
            raise _refuse(where, f"validation[{n}].image is training[{training[path]}].image ({path}): a case "
                          "validated on must not be trained on, or the validation score says nothing")


def _read_volumes(where: Path, cases: dict[str, list[Path]]) -> list[Volume]:
    """Return every image's shape and voxel size from its header (nibabel reads no voxel data), reordered to the
    RAS axes ``Orientationd`` gives the bundle's volumes; refuse naming every image whose header cannot be read
    or holds a voxel size that is not finite and positive."""
    import nibabel as nib

    volumes, bad = [], []
    quiet = logging.getLogger("nibabel.global")  # it logs, and "fixes", a zero or negative size: refused below
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        for split, images in cases.items():
            for n, path in enumerate(images):
                try:
                    volumes.append(_volume(nib, f"{split}[{n}].image", path))
                except ValueError as exc:
                    bad.append(str(exc))
    finally:
        quiet.setLevel(level)
    if bad:
        raise BundleError((f"{len(bad)} images cannot be used: " if len(bad) > 1 else "") + "; ".join(bad[:MAX_SAID])
                          + (f" (and {len(bad) - MAX_SAID} more)" if len(bad) > MAX_SAID else ""), where=str(where),
                          expected="NIfTI volumes (.nii or .nii.gz) whose header's voxel size (pixdim) is a finite, "
                          "positive size in mm for every axis")
    return volumes


def _volume(nib: Any, ref: str, path: Path) -> Volume:
    """The header of one image as a Volume; ValueError naming ``ref`` when it cannot be read or its size is bad."""
    try:
        image = nib.load(str(path))
        header = image.header
        rank = max(1, min(3, int(header["dim"][0])))
        zoom = [float(z) for z in header["pixdim"][1:rank + 1]] if "pixdim" in header else \
            [float(z) for z in header.get_zooms()[:rank]]
        shape = [int(d) for d in header.get_data_shape()[:rank]]
        axes = nib.orientations.io_orientation(image.affine)[:rank, 0]
    except Exception as exc:  # nibabel raises several types for a file it cannot read
        raise ValueError(f"{ref} ({path}): cannot read the image header ({exc})") from None
    if not all(math.isfinite(z) and z > 0 for z in zoom):
        raise ValueError(f"{ref} ({path}) has the voxel size {zoom} in its header, which is not a finite, positive "
                         "size in mm for every axis; fix the header (pixdim)")
    shape += [1] * (3 - len(shape))
    zoom += [1.0] * (3 - len(zoom))
    order = [int(a) for a in axes] if all(math.isfinite(a) for a in axes) else []
    order += [a for a in range(3) if a not in order]  # an axis the affine leaves undefined keeps its place
    ras_shape, ras_zoom = [1] * 3, [1.0] * 3
    for voxel_axis, ras_axis in enumerate(order[:3]):
        ras_shape[ras_axis], ras_zoom[ras_axis] = shape[voxel_axis], zoom[voxel_axis]
    return Volume(ref, path, (ras_shape[0], ras_shape[1], ras_shape[2]), (ras_zoom[0], ras_zoom[1], ras_zoom[2]))


def _median_spacing(volumes: list[Volume]) -> list[float]:
    """Return the median voxel size (RAS axes) of the training images."""
    zooms = [v.zoom for v in volumes if v.ref.startswith("training[")]
    return [round(statistics.median(axis), 3) for axis in zip(*zooms)]


def check_decathlon_folder(folder: str | Path) -> DecathlonFolder:
    """Return the checked folder, or raise BundleError naming the file and entry that is wrong."""
    root = Path(os.path.abspath(Path(folder).expanduser()))
    if not root.is_dir():
        raise _refuse(root, "this is not a folder" if root.exists() else "this folder does not exist")
    where = root / DATASET_JSON
    if not where.is_file():
        raise _refuse(where, f"the folder has no {DATASET_JSON}")
    text = read_record_text(where, DATASET_JSON, limit=MAX_BYTES, error=BundleError)
    if text is None:
        raise _refuse(where, f"the folder has no {DATASET_JSON}")
    meta = parse_json_text(text, where, DATASET_JSON, error=BundleError)
    if not isinstance(meta, dict):
        raise _refuse(where, f"it holds a JSON {type(meta).__name__}, not an object")
    counts = {}
    cases: dict[str, list[Path]] = {}
    bad: list[str] = []  # every bad entry, said at once: a user fixes the list in one go
    for split in SPLITS:
        entries = meta.get(split)
        if entries is None and split == "validation":
            counts[split] = 0
            continue
        if not isinstance(entries, list) or not entries:
            raise _refuse(where, f"\"{split}\" is missing or empty" if not entries else
                          f"\"{split}\" is {type(entries).__name__}, not a list of image/label entries")
        for i, entry in enumerate(entries):
            try:
                files = _entry_files(root, where, f"{split}[{i}]", entry)
            except BundleError as exc:
                bad.append(exc.message)
                continue
            cases.setdefault(split, []).append(files[0])
        counts[split] = len(entries)
    if bad:
        more = f" (and {len(bad) - MAX_SAID} more)" if len(bad) > MAX_SAID else ""
        raise _refuse(where, f"{len(bad)} bad entr{'y' if len(bad) == 1 else 'ies'}: " + "; ".join(bad[:MAX_SAID])
                      + more if len(bad) > 1 else bad[0])
    _check_disjoint(where, cases)
    if counts["validation"] == 0 and counts["training"] < 2:
        raise _refuse(where, "\"training\" has one entry and there is no \"validation\" list, so no case is "
                      "left to validate on")
    notes: list[str] = []
    labels = _names(where, meta, "labels", DEFAULT_LABELS, notes)
    if len(labels) < 2:
        raise _refuse(where, f"\"labels\" names {len(labels)} class; a segmentation needs the background and "
                      "at least one more, e.g. {\"0\": \"background\", \"1\": \"spleen\"}")
    modality = _names(where, meta, "modality", DEFAULT_MODALITY, notes)
    name = checked_text(where, "\"name\"", meta["name"]) if meta.get("name") is not None else root.name
    volumes = _read_volumes(where, cases)
    return DecathlonFolder(root=root, name=str(name), num_training=counts["training"],
                           num_validation=counts["validation"], labels=labels, modality=modality,
                           spacing=_median_spacing(volumes), notes=notes, volumes=volumes)

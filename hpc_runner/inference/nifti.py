"""NIfTI-1 bytes of an array, reproducibly: equal input gives equal bytes (gzip with mtime 0)."""

from __future__ import annotations

import gzip
import os

import numpy as np


def encode_nifti(array: np.ndarray, affine: np.ndarray, compress_level: int = 1) -> bytes:
    """NIfTI-1 bytes of a 3D (or 4D) array; gzip (mtime 0) when compress_level > 0, so equal input gives equal bytes."""
    import nibabel as nib

    array = np.asarray(array)
    if array.ndim not in (3, 4):
        raise ValueError(f"a NIfTI output must be 3D or 4D, got shape {array.shape}")
    if not 0 <= compress_level <= 9:
        raise ValueError(f"compress_level must be 0..9, got {compress_level}")
    if array.dtype == np.bool_:
        array = array.astype(np.uint8)  # NIfTI has no boolean type
    image = nib.Nifti1Image(array, np.asarray(affine, dtype=np.float64))
    image.header.set_xyzt_units("mm", "sec")
    raw = image.to_bytes()
    if compress_level == 0:
        return raw
    return gzip.compress(raw, compresslevel=compress_level, mtime=0)


def read_nifti(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """Return (array, affine) of a .nii or .nii.gz file, for tests and checks."""
    import nibabel as nib

    image = nib.load(os.fspath(path))
    return np.asarray(image.dataobj), np.asarray(image.affine)

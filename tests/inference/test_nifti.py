"""encode_nifti: reproducible bytes that nibabel and MONAI's LoadImage read back voxel-equal."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from hpc_runner.inference.nifti import encode_nifti, read_nifti

AFFINE = np.array([[1.5, 0, 0, -10.0], [0, 1.5, 0, 4.0], [0, 0, 2.0, 7.5], [0, 0, 0, 1]])


def _labels(shape=(20, 24, 28)) -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.integers(0, 3, size=shape).astype(np.uint8)


@pytest.mark.parametrize("level", [0, 1, 6, 9])
def test_equal_input_gives_equal_bytes(level: int):
    a = _labels()
    assert encode_nifti(a, AFFINE, level) == encode_nifti(a.copy(), AFFINE.copy(), level)


def test_different_input_gives_different_bytes():
    a = _labels()
    b = a.copy()
    b[0, 0, 0] += 1
    assert encode_nifti(a, AFFINE) != encode_nifti(b, AFFINE)


def test_level_zero_is_plain_nifti_and_others_are_gzip():
    a = _labels()
    plain, packed = encode_nifti(a, AFFINE, 0), encode_nifti(a, AFFINE, 1)
    assert int.from_bytes(plain[:4], "little") == 348  # sizeof_hdr of NIfTI-1
    assert packed[:2] == b"\x1f\x8b"
    assert gzip.decompress(packed) == plain


@pytest.mark.parametrize("dtype", [np.uint8, np.float32, np.int16])
@pytest.mark.parametrize("shape", [(16, 18, 20), (16, 18, 20, 2)])
def test_nibabel_reads_back_voxel_equal_with_the_affine(tmp_path, dtype, shape):
    a = (np.random.default_rng(1).random(shape) * 100).astype(dtype)
    path = tmp_path / "out.nii.gz"
    path.write_bytes(encode_nifti(a, AFFINE, 1))
    back, affine = read_nifti(path)
    assert back.dtype == a.dtype
    np.testing.assert_array_equal(back, a)
    np.testing.assert_allclose(affine, AFFINE)


def test_monai_load_image_reads_back_voxel_equal(tmp_path):
    from monai.transforms import LoadImage

    a = _labels()
    path = tmp_path / "out.nii.gz"
    path.write_bytes(encode_nifti(a, AFFINE, 1))
    image = LoadImage(image_only=True)(str(path))
    np.testing.assert_array_equal(np.asarray(image), a)
    np.testing.assert_allclose(np.asarray(image.affine), AFFINE)


def test_bool_is_written_as_uint8(tmp_path):
    path = tmp_path / "mask.nii"
    path.write_bytes(encode_nifti(_labels() > 0, AFFINE, 0))
    back, _ = read_nifti(path)
    assert back.dtype == np.uint8
    np.testing.assert_array_equal(back, _labels() > 0)


@pytest.mark.parametrize("bad", [np.zeros((4, 4), np.uint8), np.zeros((2, 2, 2, 2, 2), np.uint8)])
def test_not_3d_or_4d_is_refused(bad):
    with pytest.raises(ValueError, match="3D or 4D"):
        encode_nifti(bad, AFFINE)

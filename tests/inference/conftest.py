"""Real NIfTI volumes and a real (randomly initialised) UNet saved as model.pt, for the inference tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

# a non-identity affine, so a test can see that outputs keep the input's
AFFINE = np.array([[1.5, 0, 0, -10.0], [0, 1.5, 0, 4.0], [0, 0, 2.0, 7.5], [0, 0, 0, 1]])
NETWORK = {"spatial_dims": 3, "in_channels": 1, "out_channels": 2, "channels": [8, 16, 32, 64],
           "strides": [2, 2, 2], "num_res_units": 2}  # train.yaml's network_def


def make_volumes(folder: Path, count: int, size: int = 32, seed: int = 0, label_folder: Path | None = None
                 ) -> tuple[Path, Path]:
    """Write ``count`` image volumes ``case_NNN.nii.gz`` to ``folder``/images and labels of the same names."""
    import nibabel as nib
    from monai.data import create_test_image_3d

    images, labels = folder / "images", label_folder or folder / "labels"
    images.mkdir(parents=True, exist_ok=True)
    labels.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        image, seg = create_test_image_3d(size, size, size, num_objs=4, rad_max=max(4, size // 5), rad_min=2,
                                          noise_max=0.3, num_seg_classes=1,
                                          random_state=np.random.RandomState(seed * 1000 + i))
        nib.save(nib.Nifti1Image(image.astype(np.float32), AFFINE), images / f"case_{i:03d}.nii.gz")
        nib.save(nib.Nifti1Image(seg.astype(np.uint8), AFFINE), labels / f"case_{i:03d}.nii.gz")
    return images, labels


def make_unet(seed: int = 0):
    """Return train.yaml's UNet with seeded random weights, in eval mode."""
    import torch
    from monai.networks.nets import UNet

    torch.manual_seed(seed)
    return UNet(**NETWORK).eval()


@pytest.fixture
def model_pt(tmp_path: Path) -> Path:
    """A run dir holding model.pt: the state dict of a seeded random UNet."""
    import torch

    run = tmp_path / "runs" / "train-1"
    run.mkdir(parents=True)
    torch.save(make_unet(0).state_dict(), run / "model.pt")
    return run / "model.pt"

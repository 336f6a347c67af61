"""A small bundle on disk for the config tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

TRAIN_YAML = """\
dataset_dir: /data/x
lr: 0.001
batch-size: 2
epochs: 3
use_amp: false
network_def:
  _target_: UNet
  spatial_dims: 3
  channels: [8, 16]
  strides: [2]
optimizer:
  _target_: torch.optim.Adam
  lr: "@lr"
network: "$@network_def.to('cpu')"
run:
  - "$print('hello')"
"""

META = {
    "name": "tiny",
    "version": "0.1.0",
    "monai_version": "1.6.1",
    "pytorch_version": "2.13.0",
    "numpy_version": "2.4.6",
    "task": "test",
    "description": "a tiny bundle for tests",
    "authors": "tests",
    "copyright": "none",
    "network_data_format": {
        "inputs": {"image": {"type": "image", "format": "magnitude", "num_channels": 1,
                             "spatial_shape": [16, 16, 16], "dtype": "float32"}},
        "outputs": {"pred": {"type": "image", "format": "segmentation", "num_channels": 2,
                             "spatial_shape": [16, 16, 16], "dtype": "float32"}},
    },
}


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    """A bundle folder with configs/train.yaml and configs/metadata.json."""
    root = tmp_path / "tiny"
    (root / "configs").mkdir(parents=True)
    (root / "configs" / "train.yaml").write_text(TRAIN_YAML)
    (root / "configs" / "metadata.json").write_text(json.dumps(META, indent=2))
    return root

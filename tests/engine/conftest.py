"""A tiny real bundle (2D UNet on 16x16 images) that trains in seconds on a CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

SCRIPT = '''
import os
import signal

import torch


class RandomSegDataset(torch.utils.data.Dataset):
    """Squares on noise; a random flip per item draws from torch's global RNG, like many transforms.

    ``stop_after=k`` sends this process SIGUSR2 while it loads its k-th item (once: ``stop_marker`` is
    created then), so a stop lands at a known step, not wherever a test's polling happened to be.
    """

    def __init__(self, n: int, size: int, seed: int, stop_after: int = 0, stop_marker: str = "") -> None:
        self.stop_after, self.stop_marker, self.calls = stop_after, stop_marker, 0
        g = torch.Generator().manual_seed(seed)
        self.images, self.labels = [], []
        for _ in range(n):
            label = torch.zeros(1, size, size, dtype=torch.long)
            x, y = torch.randint(0, size // 2, (2,), generator=g).tolist()
            label[0, x : x + size // 2, y : y + size // 2] = 1
            self.images.append(label.float() + 0.5 * torch.randn(1, size, size, generator=g))
            self.labels.append(label)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> dict:
        self.calls += 1
        if self.calls == self.stop_after and self.stop_marker and not os.path.exists(self.stop_marker):
            open(self.stop_marker, "w").close()
            os.kill(os.getpid(), signal.SIGUSR2)
        image, label = self.images[i], self.labels[i]
        if torch.rand(()) < 0.5:
            image, label = image.flip(-1), label.flip(-1)
        return {"image": image, "label": label}
'''

TRAIN = """\
seed: 0
output_dir: runs/tiny
max_epochs: 3
checkpoint_interval: 2
amp: false
network_def:
  _target_: UNet
  spatial_dims: 2
  in_channels: 1
  out_channels: 2
  channels: [4, 8]
  strides: [2]
  num_res_units: 1
  dropout: 0.2
train_dataset:
  _target_: scripts.tiny.RandomSegDataset
  n: 12
  size: 16
  seed: 1
val_dataset:
  _target_: scripts.tiny.RandomSegDataset
  n: 4
  size: 16
  seed: 2
train_loader:
  _target_: torch.utils.data.DataLoader
  dataset: "@train_dataset"
  batch_size: 2
  shuffle: true
val_loader:
  _target_: torch.utils.data.DataLoader
  dataset: "@val_dataset"
  batch_size: 2
optimizer:
  _target_: torch.optim.SGD
  _mode_: callable
  lr: 0.05
  momentum: 0.9
lr_scheduler:
  _target_: torch.optim.lr_scheduler.StepLR
  _mode_: callable
  step_size: 1
  gamma: 0.9
loss:
  _target_: DiceCELoss
  to_onehot_y: true
  softmax: true
trainer:
  _target_: hpc_runner.engine.Trainer
  network: "@network_def"
  optimizer: "@optimizer"
  lr_scheduler: "@lr_scheduler"
  loss_function: "@loss"
  train_loader: "@train_loader"
  val_loader: "@val_loader"
  metric: {_target_: DiceMetric, include_background: false}
  metric_name: val_dice
  post_pred: {_target_: AsDiscrete, argmax: true, to_onehot: 2}
  post_label: {_target_: AsDiscrete, to_onehot: 2}
  max_epochs: "@max_epochs"
  seed: "@seed"
  amp: "@amp"
  checkpoint_interval: "@checkpoint_interval"
  output_dir: "@output_dir"
finalize:
  - "$print('finalize ran')"
run:
  - "$@trainer.run()"
training: "$@trainer.run()"
"""

META = {
    "name": "tiny2d", "version": "0.1.0", "monai_version": "1.6.1", "pytorch_version": "2.13.0",
    "numpy_version": "2.4.6", "task": "test", "description": "tiny 2D bundle for engine tests",
    "authors": "tests", "copyright": "none",
    "network_data_format": {
        "inputs": {"image": {"type": "image", "format": "magnitude", "num_channels": 1,
                             "spatial_shape": [16, 16], "dtype": "float32"}},
        "outputs": {"pred": {"type": "image", "format": "segmentation", "num_channels": 2,
                             "spatial_shape": [16, 16], "dtype": "float32"}},
    },
}


@pytest.fixture
def tiny_bundle(tmp_path: Path) -> Path:
    """A bundle dir with configs/, metadata and a scripts/ package (MONAI's layout)."""
    root = tmp_path / "tiny2d"
    (root / "configs").mkdir(parents=True)
    (root / "scripts").mkdir()
    (root / "scripts" / "__init__.py").write_text("")
    (root / "scripts" / "tiny.py").write_text(SCRIPT)
    (root / "configs" / "train.yaml").write_text(TRAIN)
    (root / "configs" / "metadata.json").write_text(json.dumps(META))
    return root

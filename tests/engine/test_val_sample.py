"""The validation sample the trainer keeps: one bounded slice of the first item, written atomically."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from hpc_runner.engine.val_sample import MAX_SIDE, middle_slice, write_val_sample
from hpc_runner.pages.val_sample import plot_val_sample, read_val_sample
from hpc_runner.records.rundir import VAL_SAMPLE_FILE


def test_a_big_volume_gives_a_slice_of_at_most_max_side_and_a_few_kb(tmp_path: Path) -> None:
    inputs = torch.rand(2, 1, 300, 260, 40)
    labels = torch.zeros(2, 1, 300, 260, 40)
    labels[0, 0, 100:200, 100:200, 20] = 1
    outputs = torch.stack([1 - labels, labels], dim=1)[:, :, 0]  # two channels: argmax is the label
    sample = middle_slice(inputs, labels, outputs, epoch=4)
    assert sample is not None and sample["image"].shape == (100, 87) and max(sample["label"].shape) <= MAX_SIDE
    assert int(sample["slice_index"]) == 20 and int(sample["stride"]) == 3 and list(sample["shape"]) == [300, 260, 40]
    assert (sample["label"] == sample["prediction"]).all() and sample["label"].max() == 1
    path = write_val_sample(tmp_path, sample)
    assert path == tmp_path / VAL_SAMPLE_FILE and path.stat().st_size < 20_000
    assert [p.name for p in tmp_path.iterdir()] == [VAL_SAMPLE_FILE]  # no temp file left beside it
    read = read_val_sample(tmp_path)
    assert read is not None and read.epoch == 4 and read.image.dtype == np.uint8
    assert abs(read.image_range[1] - float(inputs[0, 0, :, :, 20].max())) < 0.05


def test_2d_images_and_one_channel_logits(tmp_path: Path) -> None:
    outputs = torch.full((1, 1, 32, 32), -1.0)
    outputs[..., :8, :] = 3.0
    sample = middle_slice(torch.rand(1, 1, 32, 32), torch.zeros(1, 1, 32, 32), outputs, epoch=0)
    assert sample is not None and int(sample["slice_index"]) == -1
    assert sample["prediction"].sum() == 8 * 32  # logit > 0
    write_val_sample(tmp_path, sample)
    read = read_val_sample(tmp_path)
    assert read is not None and plot_val_sample(read, tmp_path / "sample.png", "2d")[:4] == b"\x89PNG"


def test_outputs_that_are_not_images_give_no_sample() -> None:
    volume = torch.rand(1, 1, 8, 8, 8)
    assert middle_slice(volume, volume, torch.rand(1, 2), epoch=0) is None  # a classifier
    assert middle_slice(volume, volume, (volume, volume), epoch=0) is None  # deep supervision
    assert middle_slice(volume, torch.rand(1, 1, 4, 4, 4), volume, epoch=0) is None


def test_a_damaged_or_foreign_file_is_no_sample(tmp_path: Path) -> None:
    (tmp_path / VAL_SAMPLE_FILE).write_bytes(b"PK\x03\x04 not really")
    assert read_val_sample(tmp_path) is None
    np.savez(tmp_path / VAL_SAMPLE_FILE, image=np.zeros((4, 4)))
    assert read_val_sample(tmp_path) is None

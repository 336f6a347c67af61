"""One image / label / prediction slice of a validation, kept in the run dir for its report (val_sample.npz).

The trainer hands over the first batch of a validation after its forward pass: only the middle axial slice of
the first item is cut out and reduced on the device (argmax over the channels, strided down to at most
``MAX_SIDE`` pixels a side) before one small copy to the host, so it costs no extra forward pass and never
moves a whole volume. Each validation overwrites the file atomically, so a run stopped early keeps its latest.
The file format is read back by ``hpc_runner.pages.val_sample``.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hpc_runner.records.atomic import write_bytes_atomic
from hpc_runner.records.rundir import VAL_SAMPLE_FILE

MAX_SIDE = 128  # pixels a side: 128 x 128 x (1 + 2 + 2 bytes) stays under 100 KB before compression


def _plane(batch: torch.Tensor) -> torch.Tensor:
    """Return item 0 as (C, H, W): the middle of its last spatial axis (axial in MONAI's layout), strided down."""
    item = batch[0].detach().as_subclass(torch.Tensor)  # a MetaTensor's metadata is not needed for a picture
    if item.ndim == 4:
        item = item[..., item.shape[-1] // 2]
    stride = max(1, -(-max(item.shape[-2:]) // MAX_SIDE))
    return item[:, ::stride, ::stride]


def _classes(plane: torch.Tensor) -> torch.Tensor:
    """Return (H, W) class indices: argmax over channels, or a single channel as it is (labels) or > 0 (logits)."""
    return plane.argmax(0) if plane.shape[0] > 1 else plane[0]


def middle_slice(inputs: Any, labels: Any, outputs: Any, epoch: int) -> dict[str, np.ndarray] | None:
    """Return the middle axial slice of the batch's first item (image, label, argmax prediction), or None.

    None when the batch is not channel-first 2D/3D images with a label and an output of the same spatial shape
    (a classification network, a deep-supervision tuple): there is then no picture to draw.
    """
    tensors = (inputs, labels, outputs)
    if not all(isinstance(t, torch.Tensor) and t.ndim in (4, 5) and t.ndim == inputs.ndim for t in tensors):
        return None
    if not labels.shape[2:] == outputs.shape[2:] == inputs.shape[2:] or len(inputs) == 0:
        return None
    image = _plane(inputs)[0].float()
    lo, hi = image.min(), image.max()
    # 8 bits are plenty for a picture; the range is kept so the colour bar can say what they mean
    scaled = ((image - lo) / (hi - lo).clamp_min(1e-12) * 255).round().to(torch.uint8)
    label = _classes(_plane(labels)).float().round().to(torch.int16)
    out = _plane(outputs)
    pred = (out.argmax(0) if out.shape[0] > 1 else out[0] > 0).to(torch.int16)
    spatial = list(inputs.shape[2:])
    on_host = [t.cpu() for t in (scaled, label, pred, torch.stack([lo, hi]).float())]  # the only copies
    return {
        "image": on_host[0].numpy(), "label": on_host[1].numpy(), "prediction": on_host[2].numpy(),
        "image_range": on_host[3].numpy(), "shape": np.array(spatial, dtype=np.int32),
        "slice_index": np.int32(spatial[-1] // 2 if len(spatial) == 3 else -1), "epoch": np.int32(epoch),
        "stride": np.int32(max(1, -(-max(spatial[:2]) // MAX_SIDE))),
    }


def write_val_sample(folder: Path, sample: dict[str, np.ndarray]) -> Path:
    """Write ``sample`` as folder/val_sample.npz (compressed, atomically) and return its path."""
    buf = io.BytesIO()
    np.savez_compressed(buf, **sample)
    return write_bytes_atomic(Path(folder) / VAL_SAMPLE_FILE, buf.getvalue())

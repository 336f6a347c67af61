"""The report's validation sample: val_sample.npz (written by the trainer) read back and drawn as three panels.

image, label and the argmax prediction of the middle axial slice of the latest validation's first item.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any
from zipfile import BadZipFile

from hpc_runner.pages.figures import new_figure, save_png
from hpc_runner.records.rundir import VAL_SAMPLE_FILE

CHART_FILE = "val_sample.png"
MAX_BYTES = 2 * 1024 * 1024  # the trainer writes a few KB; anything bigger is not its file
MAX_SIDE = 512
ARRAYS = ("image", "label", "prediction")


@dataclass
class ValSample:
    """One slice: the image (0..255 over ``image_range``), the label and the prediction as class indices."""

    image: Any
    label: Any
    prediction: Any
    image_range: tuple[float, float]
    shape: list[int]
    slice_index: int
    epoch: int


def read_val_sample(run_dir: Path) -> ValSample | None:
    """Return the run dir's validation sample; None when there is none or it is not one this report can draw."""
    path = Path(run_dir) / VAL_SAMPLE_FILE
    try:
        if not path.is_file() or path.stat().st_size > MAX_BYTES:
            return None
        import numpy as np

        with np.load(path, allow_pickle=False) as data:
            arrays = [np.asarray(data[k]) for k in ARRAYS]
            lo, hi = (float(v) for v in np.asarray(data["image_range"]).ravel()[:2])
            shape = [int(v) for v in np.asarray(data["shape"]).ravel()]
            index, epoch = int(data["slice_index"]), int(data["epoch"])
    except (OSError, ValueError, KeyError, TypeError, BadZipFile):  # half-written, hand-made or foreign: no picture
        return None
    first = arrays[0].shape
    if len(first) != 2 or max(first) > MAX_SIDE or any(a.shape != first for a in arrays):
        return None
    return ValSample(*arrays, image_range=(lo, hi), shape=shape, slice_index=index, epoch=epoch)


def plot_val_sample(sample: ValSample, path: Path, title: str = "") -> bytes:
    """Write image, label and prediction side by side (label and prediction as class colours) as a PNG."""
    import numpy as np

    fig = new_figure(11, 4)
    axes = fig.subplots(1, 3)
    lo, hi = sample.image_range
    image = lo + sample.image.astype(np.float32) / 255.0 * (hi - lo)
    classes = int(max(sample.label.max(), sample.prediction.max(), 1))
    shown = axes[0].imshow(image.T, cmap="gray", origin="lower", vmin=lo, vmax=hi)
    fig.colorbar(shown, ax=axes[0], shrink=0.8)
    for ax, data, name in ((axes[1], sample.label, "label"), (axes[2], sample.prediction, "prediction (argmax)")):
        ax.imshow(data.T, cmap="viridis" if classes > 1 else "gray", origin="lower", vmin=0, vmax=classes,
                  interpolation="nearest")
        ax.set_title(f"{name}: classes {', '.join(str(c) for c in np.unique(data)[:8])}", fontsize="medium")
    axes[0].set_title("image", fontsize="medium")
    for ax in axes:
        ax.set_xticks([])
        ax.set_yticks([])
    agree = float((sample.label == sample.prediction).mean())
    where = (f"axial slice {sample.slice_index} of {sample.shape}" if sample.slice_index >= 0
             else f"2D image {sample.shape}")
    fig.suptitle(f"{title}\nvalidation after epoch {sample.epoch + 1}, first item, {where}; "
                 f"label and prediction agree on {agree:.1%} of pixels")
    return save_png(fig, path)


def write_val_sample_chart(run_dir: Path, folder: Path, title: str = "") -> tuple[Path, bytes, str] | None:
    """Write plots/val_sample.png from the run's val_sample.npz; return (path, PNG, caption), or None without one."""
    sample = read_val_sample(run_dir)
    if sample is None:
        return None
    path = folder / CHART_FILE
    caption = "image, label and the network's prediction on the middle slice of the latest validation's first item"
    return path, plot_val_sample(sample, path, title), caption

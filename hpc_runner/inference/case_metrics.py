"""Per-case segmentation metrics (MONAI's Dice and 95% Hausdorff) and their summary over cases."""

from __future__ import annotations

import math
import statistics
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import torch

METRICS = ("dice", "hd95")
# MONAI's own call inside compute_hausdorff_distance passes an argument it deprecated (monai 1.5): not ours to fix
warnings.filterwarnings("ignore", message=".*always_return_as_numpy.*", category=FutureWarning)


def _finite_or_none(values: torch.Tensor) -> float | None:
    """The mean of the finite values (classes), or None when no class gave one (an empty class)."""
    flat = [float(v) for v in values.flatten().tolist()]
    finite = [v for v in flat if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else None


def case_metrics(pred: torch.Tensor, label: torch.Tensor, num_classes: int,
                 metrics: Sequence[str] = METRICS, case: str = "") -> dict[str, float | None]:
    """Return one case's metrics, background excluded: label maps ``pred`` and ``label`` shaped (1, 1, *spatial).

    A metric MONAI cannot compute for a class (NaN/inf: the class is empty in the label or the
    prediction) gives None for that class; the value is the mean over the classes that have one.
    The case is scored on CPU copies: on a CUDA tensor MONAI's surface distance takes a dense
    distance transform of the volume (cuCIM's, or scipy's on a host copy without cuCIM) where on the
    CPU it queries a KD-tree of the edge voxels (``monai/metrics/utils.py``, ``get_surface_distance``).
    """
    pred, label = pred.detach().cpu(), label.detach().cpu()
    from monai.metrics import compute_dice, compute_hausdorff_distance
    from monai.networks.utils import one_hot

    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}; known: {', '.join(METRICS)}")
    low, high = int(label.min()), int(label.max())
    if low < 0 or high >= num_classes:
        # one_hot would fail with "index out of bounds", naming neither the case nor the cause
        raise ValueError(f"the label of case '{case}' has values {low}..{high}, but the network predicts "
                         f"{num_classes} classes (expected label values 0..{num_classes - 1})")
    y_pred = one_hot(pred.long(), num_classes)
    y = one_hot(label.long(), num_classes)
    out: dict[str, float | None] = {}
    for name in metrics:
        if name == "dice":
            value = compute_dice(y_pred, y, include_background=False)
        else:
            value = compute_hausdorff_distance(y_pred, y, include_background=False, percentile=95)
        out[name] = _finite_or_none(value)
        if num_classes > 2:  # one value per foreground class as well, so the mean hides nothing
            for c, v in enumerate(value.flatten().tolist(), start=1):
                out[f"{name}_{c}"] = float(v) if math.isfinite(v) else None
    return out


def summarize(rows: Iterable[dict[str, Any]], names: Sequence[str]) -> dict[str, Any]:
    """Return mean/median/missing of each metric over ``rows`` (None values left out, counted as missing)."""
    rows = list(rows)
    out: dict[str, Any] = {}
    for name in names:
        values = [r[name] for r in rows if r.get(name) is not None]
        out[name] = {
            "mean": statistics.fmean(values) if values else None,
            "median": statistics.median(values) if values else None,
            "missing": len(rows) - len(values),
        }
    return out

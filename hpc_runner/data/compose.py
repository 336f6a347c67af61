"""Declarative transform chains: one flat MONAI Compose from several lists, with no ``$`` needed."""

from __future__ import annotations

from collections.abc import Callable, Sequence


def chain(parts: Sequence[Sequence[Callable] | Callable]) -> object:
    """Return ``Compose`` of the transforms of every part, flattened (so CacheDataset can cache a prefix).

    In a bundle: ``{_target_: hpc_runner.data.compose.chain, parts: ["@preprocessing", "@augmentation"]}``.
    A nested Compose would hide the deterministic prefix from CacheDataset, so lists are concatenated.
    The chain times each transform (``hpc_runner.data.transform_timing``) unless HPCR_TRANSFORM_TIMING=0.
    """
    from monai.transforms import Compose

    from hpc_runner.data.transform_timing import timed  # deferred: imports monai

    transforms: list[Callable] = []
    for part in parts:
        if isinstance(part, Compose):
            transforms.extend(part.flatten().transforms)
        elif isinstance(part, Sequence):
            transforms.extend(part)
        else:
            transforms.append(part)
    return timed(Compose(transforms))

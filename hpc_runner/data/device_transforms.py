"""The random transforms of a dataset run on the device, after the host-to-device copy (``gpu_transforms``).

A dataset's chain is split at the *device point*: the loader threads run the transforms before it (the
cached deterministic prefix, and any transform that is not torch-backed together with everything before
it), and the training loop runs the rest per item on the device tensors of the batch: decollate, reseed a
private copy of the chain with the item's seed, run it from the device point, collate.

Same augmentation, whichever side runs it: the loader still derives each item's seeds from (seed, epoch,
position, index) (``hpc_runner.data.seeding.item_seeds``) and passes them along in the item under
``SEEDS_KEY``; the device side gives the chain the same seed, and MONAI's ``Compose.set_random_state``
then hands each random transform the same seed of its own, in chain order, as on the CPU path. A transform
therefore draws the same numbers whether it runs in a loader thread or on the device, and a resumed epoch
draws what the first one did.

Fall back, not refuse: a transform whose MONAI ``backend`` has no torch (or a callable that is not a MONAI
transform, which cannot say) would make the device side copy each item back to the host, so the device
point moves past it and it runs in the loader, as without ``gpu_transforms``; `DeviceTail.line` says which
transforms run where.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from monai.data.utils import decollate_batch, list_data_collate
from monai.transforms import Compose
from monai.transforms.transform import Transform
from monai.utils.enums import TransformBackends

from hpc_runner.data.cache_key import cache_split, transform_name
from hpc_runner.data.prefetch import move_to_device
from hpc_runner.data.seeding import copy_transform, isolate, random_targets

#: The item key that carries its seeds from the loader to the device side; a string, so that collation
#: keeps it on the host (a list of strings) and reading it never waits for the device.
SEEDS_KEY = "hpcr_item_seeds"


def encode_seeds(seeds: list[int]) -> str:
    """Return the item's seeds as the string carried under SEEDS_KEY."""
    return ",".join(str(int(s)) for s in seeds)


def decode_seeds(text: str) -> list[int]:
    """Return the seeds encode_seeds wrote."""
    return [int(s) for s in text.split(",")] if text else []


def on_device(transform: Any) -> bool:
    """Whether a transform can run on device tensors: a MONAI transform whose backend includes torch."""
    if isinstance(transform, Compose):
        return all(on_device(t) for t in transform.transforms)
    return isinstance(transform, Transform) and TransformBackends.TORCH in (getattr(transform, "backend", None) or [])


def device_point(chain: Compose) -> int:
    """Return the index from which every transform of ``chain`` runs on the device (never inside the cached prefix)."""
    point = cache_split(chain)
    for i in range(len(chain.transforms) - 1, point - 1, -1):
        if not on_device(chain.transforms[i]):
            return i + 1
    return point


def chain_of(dataset: Any) -> Compose:
    """Return the dataset's transform chain (its ``transform``, a Compose); ValueError without one."""
    chain = getattr(dataset, "transform", None)
    if not isinstance(chain, Compose):
        raise ValueError(
            f"gpu_transforms needs a map-style dataset with a MONAI Compose as its transform; "
            f"{type(dataset).__name__}.transform is {type(chain).__name__}"
        )
    return chain


class _CopyPoint:
    """The last step of the loader's part: it does nothing, but as a non-MONAI callable it makes MONAI's
    CacheDataset copy the cached item before it (``copy_cache``), as it does before the random transforms."""

    def __call__(self, data: Any) -> Any:
        return data


def loader_view(dataset: Any, point: int) -> Any:
    """Return a private view of ``dataset`` whose chain stops before transform ``point`` (its data and cache shared)."""
    view = isolate(dataset)
    chain = chain_of(view)
    # A Compose of the first `point` transforms reseeds them exactly as the whole chain does: it draws one
    # seed per random transform, in order, and the ones it no longer holds came after.
    view.transform = Compose(
        [*chain.transforms[:point], _CopyPoint()], map_items=chain.map_items, unpack_items=chain.unpack_items,
        log_stats=chain.log_stats, lazy=chain.lazy, overrides=chain.overrides,
    )
    return view


def with_seeds(item: Any, seeds: list[int]) -> Any:
    """Return the loader's part of an item with its seeds under SEEDS_KEY; ValueError for an item that is not a dict."""
    if not isinstance(item, Mapping):
        raise ValueError(
            f"gpu_transforms needs dataset items that are dicts (MONAI dictionary transforms); an item is a "
            f"{type(item).__name__}"
        )
    out = dict(item)
    out[SEEDS_KEY] = encode_seeds(seeds)
    return out


class DeviceTail:
    """The transforms after a dataset's device point, run per item on the batch wherever its tensors are.

    Built once from the loader's dataset; it holds a private copy of the chain (the loader threads keep
    theirs), so it must be called from one thread: the training loop's.
    """

    def __init__(self, dataset: Any, collate_fn: Callable[[list[Any]], Any] | None = None) -> None:
        chain = chain_of(dataset)
        targets = random_targets(dataset)
        index = next((i for i, t in enumerate(targets) if t is chain), None)
        if index is None:
            raise ValueError("gpu_transforms: the dataset's transform chain is not among its reseeded random parts")
        self.point = device_point(chain)
        view_targets = random_targets(loader_view(dataset, self.point))
        if len(view_targets) != len(targets):  # the seeds the loader sends must be the ones the CPU path uses
            raise ValueError("gpu_transforms: the loader's view of the dataset reseeds other parts than the dataset")
        self.target_index = index
        self.chain = copy_transform(chain)  # private random states; deterministic transforms shared
        self.collate_fn = collate_fn or list_data_collate
        names = [transform_name(t) for t in chain.transforms]
        self.on_loader = names[cache_split(chain) : self.point]
        self.on_device = names[self.point :]

    def line(self, device: torch.device | str) -> str:
        """Say which transforms run on the device and which stay in the loader."""
        text = f"gpu_transforms: {', '.join(self.on_device) or 'no transform'} run on {device} after the copy"
        if self.on_loader:
            text += (f"; {', '.join(self.on_loader)} and the transforms before stay in the loader (not torch-backed, "
                     "or before one that is not)")
        return text

    def _item(self, item: Any, seeds: str) -> Any:
        item = dict(item)
        item.pop(SEEDS_KEY, None)  # a decollated item may still hold its share of the key
        self.chain.set_random_state(seed=decode_seeds(seeds)[self.target_index])
        return self.chain(item, start=self.point)

    def __call__(self, batch: Any) -> Any:
        """Return the batch with each item's transforms after the device point applied, with that item's seeds."""
        if not isinstance(batch, Mapping) or SEEDS_KEY not in batch:
            raise ValueError(f"gpu_transforms: the batch carries no {SEEDS_KEY} (was the loader told to defer?)")
        seeds = batch[SEEDS_KEY]
        rest = {k: v for k, v in batch.items() if k != SEEDS_KEY}  # the batch object itself may be yielded again
        if isinstance(seeds, str):  # no auto-collation: the batch is one item
            return self._item(rest, seeds)
        # detach=False: a 0-d tensor stays a tensor (decollate would make it a Python number) and collates as on the CPU
        items = decollate_batch(rest, detach=False)
        out: list[Any] = []
        for item, s in zip(items, seeds, strict=True):
            out.append(self._item(item, s))
        return self.collate_fn(out)

    def to_device(self, batch: Any, device: torch.device | str) -> Any:
        """Copy the batch to ``device`` (a no-op for tensors already there) and apply the tail there."""
        return self(move_to_device(batch, device, non_blocking=False))

"""Fetching one seeded item from a dataset, and the error that names the item and the transform."""

from __future__ import annotations

import operator
import re
from typing import Any

from hpc_runner.data.device_transforms import loader_view, with_seeds
from hpc_runner.data.seeding import describe, isolate, item_seeds, random_targets, reseed

_MONAI_APPLY = re.compile(r"^applying transform (.*)\Z", re.S)
_OBJECT_REPR = re.compile(r"^<([\w.]+) object at 0x[0-9a-fA-F]+>\Z")


class DataItemError(RuntimeError):
    """A data item failed to load or transform; the message names the item and the transform.

    The original exception, with its traceback, is the ``__cause__``.
    """

    def __init__(
        self,
        message: str,
        *,
        position: int | None = None,
        index: Any = None,
        transform: str | None = None,
    ) -> None:
        super().__init__(message)
        self.position = position
        self.index = index
        self.transform = transform

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_item_error, (str(self), self.position, self.index, self.transform))


def _rebuild_item_error(message: str, position: Any, index: Any, transform: Any) -> DataItemError:
    return DataItemError(message, position=position, index=index, transform=transform)


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        out.append(cur)
        cur = cur.__cause__ if cur.__cause__ is not None else cur.__context__
    return out


def failing_transform(exc: BaseException, fallback: str) -> tuple[str, BaseException]:
    """Return (name of the innermost transform MONAI reports in the chain, root exception)."""
    chain = _chain(exc)
    name = fallback
    for e in chain:
        if isinstance(e, RuntimeError) and e.args and isinstance(e.args[0], str):
            m = _MONAI_APPLY.match(e.args[0])
            if m:
                text = m.group(1).strip()
                obj = _OBJECT_REPR.match(text)
                name = obj.group(1).rsplit(".", 1)[-1] if obj else text
    return name, chain[-1]


def item_error(
    exc: BaseException, *, position: int, index: Any, epoch: int | None, fallback: str
) -> DataItemError:
    """Build the DataItemError for item `position` (dataset `index`) that raised `exc`."""
    name, root = failing_transform(exc, fallback)
    where = f"data item {position}" + (f" of epoch {epoch}" if epoch is not None else "")
    if index is not None and index != position:
        where += f" (dataset index {index})"
    msg = f"{where} failed in transform {name}: {type(root).__name__}: {root}"
    err = DataItemError(msg, position=position, index=index, transform=name)
    return err


class ItemFetcher:
    """Fetch dataset items with per-item random states, from a private (per-thread) view of the dataset.

    With ``device_point`` (``gpu_transforms``) the chain stops before that transform and each item carries
    its seeds to the device side (``hpc_runner.data.device_transforms``).
    """

    def __init__(self, dataset: Any, seed: int, *, private: bool = True, device_point: int | None = None) -> None:
        if device_point is not None:
            self.dataset = loader_view(dataset, device_point)  # always a private copy: its chain is replaced
        else:
            self.dataset = isolate(dataset) if private else dataset
        self.device_point = device_point
        self.seed = int(seed)
        self.targets = random_targets(self.dataset)
        transform = getattr(self.dataset, "transform", None)
        self._fallback = describe(transform) if transform is not None else f"{type(dataset).__name__}[index]"

    def __call__(self, epoch: int, position: int, index: Any) -> Any:
        """Return dataset[index], transformed with the random states of (seed, epoch, position, index)."""
        seeds: list[int] = []
        if self.targets:
            try:
                key = operator.index(index)  # numpy integers from custom samplers seed like ints
            except TypeError:
                key = position
            seeds = item_seeds(self.seed, epoch, position, key, len(self.targets))
            reseed(self.targets, seeds)
        try:
            item = self.dataset[index]
        except Exception as exc:
            raise item_error(exc, position=position, index=index, epoch=epoch, fallback=self._fallback) from exc
        return item if self.device_point is None else with_seeds(item, seeds)

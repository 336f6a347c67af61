"""The key hyper-parameters of a run, read from its resolved config.yaml: each value with the ids it was found at.

The trainer that the run's entry calls is found by its ``_target_`` (``...Trainer``); its arguments lead to the
optimizer, the training loader, the network and the seed, following ``@id`` references. A value computed by a
``$`` expression is shown as written: a report never evaluates config code. Without a trainer, the usual
top-level ids (``learning_rate``, ``batch_size``, ...) are shown where they exist.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from hpc_runner.config.ids import has_id, join_id
from hpc_runner.config.input_paths import follow

MAX_ARGS = 8  # the network's arguments shown after its class: the rest are in config.yaml
MAX_NODES = 2000  # a trainer deeper than this in the config is not searched for
SPECIAL_KEYS = ("_target_", "_mode_", "_requires_", "_disabled_", "_desc_")


@dataclass
class HyperParam:
    """One row: what it is, its value as text, and where in config.yaml it was found (ids, references followed)."""

    name: str
    value: str
    where: str


def _short(value: Any) -> str:
    if isinstance(value, dict) and "_target_" in value:
        return str(value["_target_"])
    text = str(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _resolve(config: dict, id_path: str) -> tuple[Any, str]:
    """Return the value at ``id_path`` with references followed, and the ids on the way (``a -> b``)."""
    try:
        value, chain = follow(config, id_path, None)
    except (KeyError, IndexError, TypeError):
        return None, id_path
    return value, " -> ".join(chain)


def _is_trainer(value: Any) -> bool:
    return isinstance(value, dict) and str(value.get("_target_", "")).rsplit(".", 1)[-1].endswith("Trainer")


def _search(config: dict, starts: list[str]) -> str | None:
    """Return the id of the first trainer reached from ``starts``, breadth first, references followed."""
    queue, seen = deque(starts), set()
    while queue and len(seen) < MAX_NODES:
        id_path = queue.popleft()
        if id_path in seen:
            continue
        seen.add(id_path)
        value, chain = _resolve(config, id_path)
        reached = chain.split(" -> ")[-1]
        if _is_trainer(value):
            return reached
        children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        queue.extend(join_id(reached, k) for k, _ in children)
    return None


def find_trainer(config: dict, entry: str | None) -> str | None:
    """Return the id of the trainer the entry runs (a component whose ``_target_`` ends in Trainer), or None."""
    found = _search(config, [entry]) if entry and has_id(config, entry) else None
    return found or _search(config, list(config))  # an entry that names no trainer: any trainer in the config


def _component_args(config: dict, node: dict) -> str:
    """Return ``Class(arg=value, ...)`` of a component, references followed, at most MAX_ARGS arguments."""
    args = [(k, v) for k, v in node.items() if k not in SPECIAL_KEYS]
    shown = []
    for key, value in args[:MAX_ARGS]:
        if isinstance(value, str) and value.startswith("@") and has_id(config, value[1:]):
            value = follow(config, value[1:], None)[0]
        shown.append(f"{key}={_short(value)}")
    more = ", ..." if len(args) > MAX_ARGS else ""
    return f"{node.get('_target_')}({', '.join(shown)}{more})"


def _argument(config: dict, component: str, *keys: str) -> tuple[Any, str] | None:
    """Return the first of ``keys`` that ``component`` has, references followed, with where it was found."""
    for key in keys:
        if has_id(config, join_id(component, key)):
            return _resolve(config, join_id(component, key))
    return None


def _from_trainer(config: dict, trainer: str) -> list[HyperParam]:
    """Return the rows found from the trainer's arguments."""
    rows: list[HyperParam] = []

    def add(name: str, found: tuple[Any, str] | None) -> None:
        if found is not None and found[0] is not None:
            value, where = found
            text = _component_args(config, value) if name == "network" and isinstance(value, dict) else _short(value)
            rows.append(HyperParam(name, text, where))

    def inner(found: tuple[Any, str] | None, key: str) -> tuple[Any, str] | None:
        """The argument ``key`` of the component found (the optimizer's lr, the loader's batch_size)."""
        if found is None or not isinstance(found[0], dict):
            return None
        return _argument(config, found[1].split(" -> ")[-1], key)

    optimizer = _argument(config, trainer, "optimizer")
    add("learning rate", inner(optimizer, "lr"))
    add("batch size", inner(_argument(config, trainer, "train_loader", "train_data_loader"), "batch_size"))
    add("epochs", _argument(config, trainer, "max_epochs", "epochs"))
    add("validation every (epochs)", _argument(config, trainer, "val_interval"))
    add("network", _argument(config, trainer, "network"))
    add("optimizer", optimizer)
    add("loss", _argument(config, trainer, "loss_function"))
    seed = _argument(config, trainer, "seed")
    add("seed", seed if seed is not None and seed[0] is not None else _top_level(config, "seed"))
    return rows


def _top_level(config: dict, *ids: str) -> tuple[Any, str] | None:
    for id_path in ids:
        if has_id(config, id_path):
            return _resolve(config, id_path)
    return None


TOP_LEVEL = (
    ("learning rate", ("learning_rate", "lr")), ("batch size", ("batch_size",)),
    ("epochs", ("max_epochs", "num_epochs", "epochs")), ("network", ("network_def", "network")),
    ("optimizer", ("optimizer",)), ("seed", ("seed",)),
)


def key_hyperparams(config: dict, entry: str | None) -> list[HyperParam]:
    """Return the run's learning rate, batch size, epochs, network, optimizer, loss and seed that config.yaml names."""
    if not isinstance(config, dict) or not config:
        return []
    trainer = find_trainer(config, entry)
    if trainer is not None:
        rows = _from_trainer(config, trainer)
        if rows:
            return rows
    rows = []
    for name, ids in TOP_LEVEL:
        found = _top_level(config, *ids)
        if found is None:
            continue
        value, where = found
        text = _component_args(config, value) if isinstance(value, dict) and "_target_" in value else _short(value)
        rows.append(HyperParam(name, text, where))
    return rows

"""Which ids of a config build a network that wants a GPU: MONAI's networks (``monai.networks.nets.UNet`` or
the bare ``UNet``), found without importing anything, for the warning of a job that asks for no GPU."""

from __future__ import annotations

from typing import Any

from hpc_runner.config.ids import iter_ids
from hpc_runner.config.module_source import Undecided
from hpc_runner.config.monai_names import MonaiNames

NETS = "monai.networks.nets"
MAX_IDS = 100_000  # a config is walked once; a bomb of ids is refused elsewhere, this only bounds the walk


def network_ids(config: Any, names: MonaiNames | None = None) -> list[tuple[str, str]]:
    """Return (id, _target_) of each component that builds one of MONAI's networks."""
    found: list[tuple[str, str]] = []
    names = names or MonaiNames()
    for n, (id_path, value) in enumerate(iter_ids(config)):
        if n >= MAX_IDS:
            break
        if not (id_path == "_target_" or id_path.endswith("::_target_")) or not isinstance(value, str):
            continue
        target = value.strip()
        if "." not in target:
            try:
                module = names.module_of(target)
            except Undecided:
                continue
            target = f"{module}.{target}" if module else target
        if target.startswith(NETS + "."):
            found.append((id_path.removesuffix("_target_").removesuffix("::") or "(top)", value))
    return found


def runs_on_cpu(config: Any) -> bool:
    """True when the config says its device is the CPU (a top-level ``device: cpu``): no GPU is wanted."""
    device = config.get("device") if isinstance(config, dict) else None
    return isinstance(device, str) and device.strip().strip("'\"").lower() == "cpu"

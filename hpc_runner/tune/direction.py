"""Which way a tune's metric is better, decided once: from ``--direction`` or the trainers' ``metric_mode``.

Optuna's direction, the trainers' best checkpoint and every report must agree. A trainer that states
``metric_mode`` decides; ``--direction`` that disagrees with it is refused. A trainer that states
nothing is told the tune's direction (an override of ``<trainer>::metric_mode``), so a minimised loss
does not keep the checkpoint with the highest loss as "best".
"""

from __future__ import annotations

from typing import Any

from hpc_runner.errors import UserError

MODE_OF = {"maximize": "max", "minimize": "min"}
DIRECTION_OF = {v: k for k, v in MODE_OF.items()}
DEFAULT_DIRECTION = "maximize"


def _trainers(node: Any, metric: str, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Return (id path, node) of each component that reports ``metric`` (its ``metric_name``)."""
    found: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        if node.get("metric_name") == metric:
            found.append((path, node))
        for k, v in node.items():
            found += _trainers(v, metric, f"{path}::{k}" if path else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            found += _trainers(v, metric, f"{path}::{i}" if path else str(i))
    return found


def settle_direction(config: Any, metric: str, given: str | None) -> tuple[str, list[str]]:
    """Return the tune's direction and the trainer ids that must be told it (they state no metric_mode)."""
    trainers = [(p, n) for p, n in _trainers(config, metric) if p]
    stated = {p: n["metric_mode"] for p, n in trainers if "metric_mode" in n}
    plain = {p: m for p, m in stated.items() if m in DIRECTION_OF}
    if len(set(plain.values())) > 1:
        raise UserError(f"the trainers reporting {metric} disagree on which way is better",
                        id_path=", ".join(f"{p}::metric_mode={m}" for p, m in sorted(plain.items())),
                        expected="one metric_mode (max or min) for the metric a tune optimises")
    if plain:
        path, mode = next(iter(plain.items()))
        if given is not None and MODE_OF[given] != mode:
            raise UserError(f"--direction {given} contradicts the trainer, which keeps the checkpoint with the "
                            f"{'highest' if mode == 'max' else 'lowest'} {metric}",
                            id_path=f"{path}::metric_mode",
                            expected=f"--direction {DIRECTION_OF[mode]}, or --{path}::metric_mode "
                            f"{MODE_OF[given]}")
        return DIRECTION_OF[mode], []
    direction = given or DEFAULT_DIRECTION
    unstated = [p for p, n in trainers if "metric_mode" not in n]
    return direction, (unstated if direction != DEFAULT_DIRECTION else [])

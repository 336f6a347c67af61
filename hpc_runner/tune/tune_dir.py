"""Write a tune's sweep dir: the shared base config and sweep.yaml with its ``tune`` section, no points yet.

Points are appended by the workers, one per trial they ask for (worker.py). The space is checked
before anything is written: its corners (each bound, each choice) against the config's ids and
types, and through the pre-flight (paths, references), so no worker meets a config error that could
have been seen before queueing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hpc_runner.config import preflight as config_preflight
from hpc_runner.config.bundle_config import apply_overrides
from hpc_runner.config.monai_bridge import warn_code_once
from hpc_runner.config.overrides import Override, point_override
from hpc_runner.engine.runner import check_entry, prepare_run
from hpc_runner.errors import UserError
from hpc_runner.jobs import ledger as sr
from hpc_runner.records.rundir import command_line, now_iso
from hpc_runner.sweep.check import check_points
from hpc_runner.tune.direction import MODE_OF, settle_direction
from hpc_runner.tune.settings import TUNE_KEY, TuneSettings
from hpc_runner.tune.space import parse_space, space_corners
from hpc_runner.tune.study import rehearse


def check_space(cfg: Any, settings: TuneSettings, preflight: bool = True, entry: str | None = None) -> str:
    """Raise a UserError when a corner of the space is not a valid config; return what was checked."""
    _decide_direction(cfg, settings)
    settings.check()
    _check_metric(cfg.config, settings.metric)
    space = parse_space(settings.space)
    rehearse(settings, space.distributions())
    corners = space_corners(space)
    note = f"{len(corners)} corner point(s) of the space: " + check_points(cfg, corners)
    if preflight:
        note += "; " + config_preflight.check_points(
            cfg, [[point_override(k, v) for k, v in p.items()] for p in corners], entry=entry or "run")

    warn_code_once(cfg, trusted=bool(getattr(cfg, "trusted", False)))  # once for the tune, not in each worker
    return note


def _decide_direction(cfg: Any, settings: TuneSettings) -> None:
    """Settle ``settings.direction`` once and tell the trainers that state no metric_mode (tune/direction.py)."""
    given = settings.direction
    settings.direction, untold = settle_direction(cfg.config, settings.metric, given)
    overrides = [Override(f"{p}::metric_mode", MODE_OF[settings.direction], "hpc-runner",
                          f"hpc-runner tune --direction {settings.direction}", add=True) for p in untold]
    apply_overrides(cfg, overrides, {})


def _metric_names(node: Any, path: str = "") -> dict[str, Any]:
    """Return every ``metric_name`` set in the config (id path: value): what the trainers report."""
    found: dict[str, Any] = {}
    if isinstance(node, dict):
        for k, v in node.items():
            here = f"{path}::{k}" if path else str(k)
            if k == "metric_name":
                found[here] = v
            else:
                found.update(_metric_names(v, here))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            found.update(_metric_names(v, f"{path}::{i}" if path else str(i)))
    return found


def _check_metric(config: Any, metric: str) -> None:
    """Refuse a --metric that no trainer of the config reports (when the config names its metrics plainly)."""
    names = _metric_names(config)
    plain = {k: v for k, v in names.items() if isinstance(v, str) and not v.startswith(("@", "$", "%"))}
    if plain and len(plain) == len(names) and metric not in plain.values():
        raise UserError(f"--metric {metric} is not what the trainer reports at validation",
                        id_path=next(iter(plain)),
                        expected=f"--metric {' or '.join(sorted(set(plain.values())))} (the config's metric_name)")


def create_tune_dir(
    cfg: Any,
    directory: str | Path,
    entry: str | None,
    settings: TuneSettings,
    *,
    argv: Sequence[str] | None = None,
    cluster: dict[str, Any] | None = None,
    preflight: bool = True,
) -> Any:
    """Check the space, then write ``directory`` (base/ and sweep.yaml); return the SweepRecord."""
    check_entry(cfg, entry)
    note = check_space(cfg, settings, preflight, entry)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    data = {
        "kind": sr.KIND,
        "version": 1,
        "created": now_iso(),
        "bundle": cfg.name,
        "bundle_dir": str(cfg.bundle_dir.resolve()) if cfg.bundle_dir else None,
        "entry": entry,
        "command": command_line(argv),
        "spec": [],
        "params": parse_space(settings.space).ids,
        "checked": note,
        "cluster": cluster,
        "base": sr.BASE_DIR,
        "job_folder": sr.JOB_FOLDER,
        "state": "tune",
        "error": None,
        "submissions": [],
        TUNE_KEY: settings.to_record(),
    }
    base, _ = prepare_run(cfg, entry, directory / sr.BASE_DIR, argv)
    base.update_record(status="sweep-base", note="the shared config of the tune; points/NNNN are its trials")
    record = sr.SweepRecord(directory, data, sr.new_trials(settings.trials))  # listed by status from the start
    sr.write_new(record)
    return record

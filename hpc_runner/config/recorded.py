"""Load the config recorded in a run directory, to resume it or re-run it exactly."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hpc_runner.config.bundle_config import META_KEY, BundleConfig, apply_overrides
from hpc_runner.config.loader import load_file
from hpc_runner.config.overrides import Override
from hpc_runner.errors import ConfigError
from hpc_runner.records.rundir import CONFIG_FILE, RunDir


def load_recorded_config(run_dir: str | Path, cli_overrides: Sequence[Override] = ()) -> tuple[BundleConfig, dict]:
    """Return the config that ran in ``run_dir`` (plus explicit overrides) and its run.yaml record.

    The environment is not read again: the record already holds the values it gave.
    """
    rd = RunDir(run_dir)
    path = rd.file(CONFIG_FILE)
    if not path.is_file():
        raise ConfigError(
            "not a run directory (no config.yaml)", where=str(run_dir), expected="a folder written by hpc-runner run"
        )
    loaded = load_file(path)
    record = rd.record()
    bundle = record.get("bundle") or {}
    bundle_dir = Path(bundle["dir"]) if bundle.get("dir") else None
    where = {k: f"{path}:{v}" for k, v in loaded.lines.items()}
    cfg = BundleConfig(
        name=str(bundle.get("name") or loaded.data.get(META_KEY, {}).get("name") or rd.path.name),
        bundle_dir=bundle_dir if bundle_dir and bundle_dir.is_dir() else None,
        config_files=[path],
        meta_file=None,
        config=loaded.data,
        where=where,
        trusted=bool(record.get("trusted", False)),
        safe=bool(record.get("safe", False)),
        recorded=True,
    )
    apply_overrides(cfg, cli_overrides, {})
    cfg.check()
    return cfg, record

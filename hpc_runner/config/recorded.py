"""Load the config recorded in a run directory, to resume it or re-run it exactly."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hpc_runner.config.bundle_config import (
    DEFAULT_FINAL_ID,
    DEFAULT_INIT_ID,
    META_KEY,
    BundleConfig,
    apply_overrides,
)
from hpc_runner.config.ids import OUTPUT_DIR_ID
from hpc_runner.config.loader import load_file
from hpc_runner.config.overrides import Override
from hpc_runner.config.safe_mode import check_safe
from hpc_runner.config.sandbox_marks import static_check_skipped
from hpc_runner.errors import ConfigError
from hpc_runner.records.rundir import CONFIG_FILE, RunDir
from hpc_runner.records.safe_mark import read_mark
from hpc_runner.records.shape import first_non_string_key
from hpc_runner.registry.trust import check_trust


def load_recorded_config(run_dir: str | Path, cli_overrides: Sequence[Override] = ()) -> tuple[BundleConfig, dict]:
    """Return the config that ran in ``run_dir`` (plus explicit overrides) and its run.yaml record.

    The environment is not read again: the record already holds the values it gave. A run dir that
    was moved or copied has its config.yaml's ``output_dir`` set to where it is now.
    """
    rd = RunDir(run_dir)
    path = rd.file(CONFIG_FILE)
    if not path.is_file():
        raise ConfigError(
            "not a run directory (no config.yaml)", where=str(run_dir), expected="a folder written by hpc-runner run"
        )
    loaded = load_file(path)
    bad = first_non_string_key(loaded.data)  # ids are text: a hand-edited `1.5: x` or `.nan: x` is no id
    if bad is not None:
        raise ConfigError(f"the recorded config has a key that is not text: {bad}", where=str(path),
                          expected="config.yaml as hpc-runner wrote it (every key text)")
    # in memory only: loading never writes (rerun reads a run dir it must leave as it is); prepare_run
    # accepts a recorded config that differs from config.yaml in output_dir alone and records the new one
    _follow_moved_run_dir(loaded.data, rd.path)
    record = rd.record()
    mark = read_mark(rd.path)  # a run made with --safe stays safe whatever its (writable) record says
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
        safe=bool(record.get("safe", False)) or mark is not None,
        # a mark keeps a run safe and grants nothing: the sandbox's folders come from each command line or job call
        container=record.get("container") if isinstance(record.get("container"), dict) else None,
        recorded=True,
        init_id=str(record.get("init_id") or DEFAULT_INIT_ID),
        final_id=str(record.get("final_id") or DEFAULT_FINAL_ID),
    )
    apply_overrides(cfg, cli_overrides, {})
    cfg.check()
    return cfg, record


def _follow_moved_run_dir(config: dict, run_dir: Path) -> bool:
    """Make the recorded ``output_dir`` the run dir's path now; return whether it changed.

    Users move or copy run dirs (scratch to project storage). The config recorded the old path, so a
    resume compared it with the new one and refused a "different config" (or would have written to
    the old folder). The run dir is where it is now.
    """
    recorded = config.get(OUTPUT_DIR_ID)
    now = str(run_dir.resolve())
    if isinstance(recorded, str) and recorded != now:
        config[OUTPUT_DIR_ID] = now
        return True
    return False


def check_recorded_bundle(cfg: BundleConfig, record: dict, *, trust: bool = False, safe: bool = False) -> None:
    """Check a recorded config before its bundle's code is imported again (resume, jobs, re-runs).

    The bundle's files must still match its MANIFEST unless ``trust`` (or the run was started with
    --trust); with ``safe`` (or a run started with --safe) the config must pass --safe. Raises BundleError.
    """
    cfg.trusted = bool(trust or record.get("trusted", False))
    cfg.safe = bool(safe or cfg.safe or record.get("safe", False))
    if cfg.bundle_dir is not None:
        check_trust(cfg.bundle_dir, trust=cfg.trusted)
    if cfg.safe and not static_check_skipped():  # the switch is test-only, honoured only inside the sandbox
        if cfg.logging_file is None and (record.get("bundle") or {}).get("logging_file"):
            cfg.logging_file = Path(record["bundle"]["logging_file"])  # the run applies it again: check it again
        check_safe(cfg)

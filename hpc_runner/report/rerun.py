"""Run a recorded run again, exactly, in a new run dir: its config.yaml (overrides and ${env:} values already
applied, macros expanded) and its run.yaml's entry, with a warning for each package version or git state
that differs from the record. The new run starts fresh: it never resumes from the source's checkpoints."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpc_runner.config.bundle_config import apply_overrides
from hpc_runner.config.ids import get_by_id, has_id
from hpc_runner.config.overrides import Override, parse_cli_overrides
from hpc_runner.config.recorded import load_recorded_config
from hpc_runner.config.safe_mode import check_safe
from hpc_runner.engine.runner import BUNDLE_ROOT_ID, execute_run, prepare_run
from hpc_runner.errors import UserError
from hpc_runner.records import environment
from hpc_runner.records.compare import Difference, describe, git_differences, version_differences
from hpc_runner.records.rundir import OVERRIDES_FILE, RunDir, timestamp_name
from hpc_runner.registry.trust import check_trust, manifest_record


class RerunWarning(UserWarning):
    """The environment differs from the one recorded: the re-run may not give the same numbers."""


@dataclass
class RerunPlan:
    """What a re-run will do: the recorded config (plus overrides), where, and what differs from the record."""

    source: Path
    output_dir: Path
    cfg: Any  # BundleConfig
    record: dict[str, Any]
    entry: str | None
    differences: list[Difference] = field(default_factory=list)

    def warning(self) -> str | None:
        """Return the warning text, or None when nothing differs."""
        if not self.differences:
            return None
        return (
            f"the environment differs from the one recorded in {self.source / 'run.yaml'}; "
            f"the re-run may not reproduce it:\n{describe(self.differences)}"
        )


def default_rerun_dir(source: Path) -> Path:
    """Return ``<source>-rerun-<timestamp>`` beside the source, made unique with a suffix."""
    source = Path(source)
    base = source.with_name(f"{source.name}-rerun-{timestamp_name()}")
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}_{n}")
    return path


def environment_differences(record: dict[str, Any], bundle_dir: Path | None) -> list[Difference]:
    """Return how package versions and the bundle's git state now differ from run.yaml's."""
    out = version_differences(record.get("versions"), environment.package_versions())
    recorded_dir = (record.get("bundle") or {}).get("dir")
    if recorded_dir and bundle_dir is None:
        out.append(Difference("bundle dir", recorded_dir, "(no longer exists)"))
    if "git" in record:
        out += git_differences(record.get("git"), environment.git_state(bundle_dir))
    if "manifest" in (record.get("bundle") or {}):
        out += _manifest_differences(record["bundle"]["manifest"], bundle_dir)
    return out


def _manifest_differences(recorded: dict[str, Any] | None, bundle_dir: Path | None) -> list[Difference]:
    """How the bundle's MANIFEST (an installed bundle's file hashes) and its match differ from the record."""
    now = manifest_record(bundle_dir) if bundle_dir is not None else None
    if not recorded and not now:
        return []
    recorded, now = recorded or {}, now or {}
    labels = {"sha256": "bundle MANIFEST sha256", "matches": "bundle files match their MANIFEST"}
    return [Difference(label, recorded.get(k), now.get(k)) for k, label in labels.items()
            if recorded.get(k) != now.get(k)]


def _check_bundle(cfg: Any, record: dict[str, Any], trust: bool) -> None:
    cfg.trusted = bool(trust or record.get("trusted", False))  # recorded in the new run.yaml
    if cfg.bundle_dir is not None:
        check_trust(cfg.bundle_dir, trust=cfg.trusted)
    if cfg.safe or record.get("safe"):  # its mark (records/safe_mark.py) or its record

        check_safe(cfg)


def _pin_bundle_root(cfg: Any) -> None:
    """Keep the recorded bundle_root: prepare_run would reset it to the bundle dir unless an override set it."""
    if cfg.bundle_dir is None or not has_id(cfg.config, BUNDLE_ROOT_ID):
        return
    recorded = get_by_id(cfg.config, BUNDLE_ROOT_ID)
    if recorded != str(cfg.bundle_dir.resolve()) and not any(o.id == BUNDLE_ROOT_ID for o in cfg.overrides):
        apply_overrides(cfg, [Override(BUNDLE_ROOT_ID, recorded, "hpc-runner", "recorded config.yaml")], {})


def plan_rerun(
    source: str | Path,
    output_dir: str | Path | None = None,
    override_tokens: Sequence[str] = (),
    entry: str | None = None,
    trust: bool = False,
) -> RerunPlan:
    """Load and check what re-running ``source`` means; nothing is written.

    The bundle's scripts are imported again now, so its files are checked against its MANIFEST as for
    ``run`` (``trust``, or the run's own recorded ``--trust``, accepts a mismatch) and a run recorded
    with ``--safe`` is checked again.
    """
    source = Path(source)
    cfg, record = load_recorded_config(source, parse_cli_overrides(list(override_tokens)))
    if not record.get("versions"):
        raise UserError(
            "this run never started, so there is nothing to reproduce",
            where=str(source / "run.yaml"),
            expected="a run dir whose run.yaml records versions (written when the run starts)",
            hint=f"run it with: hpc-runner run --resume {source}",
        )
    target = Path(output_dir) if output_dir else default_rerun_dir(source)
    if target.resolve() == source.resolve():
        raise UserError("a re-run never writes into the run it repeats", where=str(target),
                        expected="another --output_dir (default: a new folder beside the run)")
    if target.exists() and any(target.iterdir()):
        raise UserError("the output dir is not empty", where=str(target),
                        expected="a new or empty folder, so the re-run starts fresh (no checkpoints to resume)")
    _check_bundle(cfg, record, trust)
    _pin_bundle_root(cfg)
    differences = environment_differences(record, cfg.bundle_dir)
    return RerunPlan(source, target, cfg, record, entry or record.get("entry"), differences)


def _keep_source_overrides(plan: RerunPlan, run_dir: RunDir) -> None:
    """overrides.yaml: the source's overrides (already in config.yaml), then this re-run's."""
    new = run_dir.read_yaml(OVERRIDES_FILE) or []
    new_ids = {o.get("id") for o in new}
    old = RunDir(plan.source).read_yaml(OVERRIDES_FILE) or []
    kept = [{**o, "from": "source run"} for o in old if isinstance(o, dict) and o.get("id") not in new_ids]
    run_dir.write_yaml(OVERRIDES_FILE, kept + new)


def start_rerun(plan: RerunPlan, argv: Sequence[str] | None = None) -> tuple[RunDir, dict]:
    """Create the new run dir (config.yaml, overrides.yaml, run.yaml with ``rerun_of``); warn on differences."""
    text = plan.warning()
    if text:
        warnings.warn(text, RerunWarning, stacklevel=2)
    run_dir, expanded = prepare_run(plan.cfg, plan.entry, plan.output_dir, argv)
    _keep_source_overrides(plan, run_dir)
    run_dir.update_record(
        rerun_of=str(plan.source.resolve()),
        rerun_differences=[d.line() for d in plan.differences],
    )
    return run_dir, expanded


def rerun(
    source: str | Path,
    output_dir: str | Path | None = None,
    override_tokens: Sequence[str] = (),
    entry: str | None = None,
    argv: Sequence[str] | None = None,
    trust: bool = False,
) -> Any:
    """Re-run the recorded run ``source`` in a new dir and return its RunOutcome (Python API of ``rerun``)."""
    plan = plan_rerun(source, output_dir, override_tokens, entry, trust)
    run_dir, expanded = start_rerun(plan, argv)
    return execute_run(plan.cfg, run_dir, expanded, plan.entry)

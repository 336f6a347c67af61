"""The runner's side of MLflow tracking: open the run dir's MLflow run before the entry runs, hand it to the
Trainer (``current_run``) or to MONAI's own ``MLFlowHandler`` (ignite workflows), and at the end upload the
artefacts, set the status and say what could not be sent. Rank 0 only; a tracking problem never fails a run.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

from hpc_runner.tracking.settings import UNSENT_FILE, load_settings

_current: Any = None  # the MlflowRun of the run executing in this process
OPEN_WAIT_S = 15.0  # how long an ignite bundle waits for the run to exist before running untracked


def _say(text: str) -> None:
    print(f"hpc-runner: {text}", flush=True)


def current_run() -> Any:
    """Return the MlflowRun of the run executing in this process, or None."""
    return _current


def record_for_run(run_dir: Path, cfg: Any) -> None:
    """Keep the ``--tracking`` choice carried by ``cfg`` (``cfg.tracking``) in the run dir, if there is one."""
    settings = getattr(cfg, "tracking", None)
    if settings:
        from hpc_runner.tracking.settings import record_settings

        record_settings(Path(run_dir), settings)


def _override_params(run_dir: Path) -> dict[str, Any]:
    import yaml

    try:
        entries = yaml.safe_load((run_dir / "overrides.yaml").read_text(encoding="utf-8")) or []
    except (OSError, yaml.YAMLError):
        return {}
    return {str(e["id"]): e.get("value") for e in entries
            if isinstance(e, dict) and e.get("id") and e.get("source") != "hpc-runner"}


def start_tracking(cfg: Any, run_dir: Path) -> Any:
    """Open the MLflow run of ``run_dir`` when it is tracked (never waits for the server); return it or None."""
    global _current
    run_dir = Path(run_dir)
    settings = load_settings(run_dir)
    if not settings:
        return None
    try:
        from hpc_runner.tracking.mlflow_run import MlflowRun
        from hpc_runner.tracking.settings import point_overrides

        run = MlflowRun(run_dir, settings, getattr(cfg, "name", None))
        if not run.resumed:
            run.log_params({**_override_params(run_dir), **(point_overrides(run_dir) or {})})
    except Exception as exc:  # e.g. mlflow missing in the job's environment: run untracked, say so
        _say(f"MLflow tracking is off for this run ({type(exc).__name__}: {exc})")
        return None
    _current = run
    again = " (continuing its run)" if run.resumed else ""
    _say(f"MLflow: experiment '{run.experiment}', run '{run.run_name}'{again} in {run.uri}")
    return run


def patch_monai_workflow(parser: Any) -> bool:
    """Add MONAI's MLFlowHandler to an ignite bundle's trainer/evaluator, logging into this run dir's run.

    As ``monai.bundle`` does for ``--tracking`` (``ConfigWorkflow.patch_bundle_tracking``), with the store,
    experiment and run name set to ours so the handler finds and continues our run. Return whether it patched.
    """
    run = _current
    if run is None:
        return False
    from monai.bundle.utils import DEFAULT_HANDLERS_ID, DEFAULT_MLFLOW_SETTINGS
    from monai.bundle.workflows import ConfigWorkflow

    # a settings file that names only the store still gets MONAI's default handlers
    settings = copy.deepcopy(DEFAULT_MLFLOW_SETTINGS)
    given = copy.deepcopy(run.settings.get("monai") or {})
    settings["configs"].update(given.get("configs") or {})
    handler_ids = given.get("handlers_id") or DEFAULT_HANDLERS_ID
    if not any(v["id"] in parser for v in handler_ids.values()):
        return False  # not an ignite workflow (our Trainer logs through current_run)
    if not run.wait_open(OPEN_WAIT_S):
        _say(f"MLflow at {run.uri} did not answer in {OPEN_WAIT_S:.0f} s; MONAI's MLflow handlers are not added "
             f"(they log synchronously and would stall or fail the run)")
        return False
    configs = settings.setdefault("configs", {})
    configs.update(tracking_uri=run.uri, experiment_name=run.experiment, run_name=run.run_name,
                   save_execute_config=False)  # config.yaml is uploaded at the end; MONAI would write a copy
    settings["handlers_id"] = handler_ids
    ConfigWorkflow.patch_bundle_tracking(parser=parser, settings=settings)
    _say("MLflow: MONAI's MLFlowHandler added to the bundle's ignite engines")
    return True


def _artefacts(run_dir: Path) -> list[Path]:
    """config.yaml, overrides.yaml, summary.json, and the report's plots (made now when matplotlib is here)."""
    try:
        from hpc_runner.report.run_report import report_run

        report = report_run(run_dir)
        made = [report.html, *report.pngs]
    except Exception:  # no matplotlib, or nothing to plot: the files above are still sent
        made = []
    return [p for p in (run_dir / "config.yaml", run_dir / "overrides.yaml", run_dir / "summary.json", *made)
            if Path(p).is_file()]


def finish_tracking(run: Any, outcome: str) -> dict[str, Any] | None:
    """Upload the artefacts, set the status, flush (bounded) and print what could not be sent."""
    global _current
    if run is None:
        return None
    _current = None
    run_dir = run.run_dir
    try:
        for path in _artefacts(run_dir):
            sub = "plots" if path.parent.name == "plots" else None
            run.log_artifacts([path], sub)
        run.set_status(outcome)
        stats = run.close()
    except Exception as exc:
        _say(f"MLflow: could not finish the run ({type(exc).__name__}: {exc})")
        return None
    left = stats["unsent"]
    text = f"MLflow: {stats['sent']} record(s) sent to {run.link()}"
    if left:
        why = f"; last error {stats['last_error']}" if stats.get("last_error") else ""
        text += (f"; {left} could not be sent{why}. They are kept in {run_dir / UNSENT_FILE}; "
                 f"send them later with: python -m hpc_runner.tracking send {run_dir}")
        print(f"hpc-runner: {text}", file=sys.stderr, flush=True)
    else:
        _say(text)
    return stats

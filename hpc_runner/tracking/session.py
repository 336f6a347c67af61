"""The runner's side of MLflow tracking: open the run dir's MLflow run before the entry runs, hand it to the
Trainer (``current_run``) or to MONAI's own ``MLFlowHandler`` (ignite workflows), and at the end upload the
artefacts, set the status and say what could not be sent. Rank 0 only; a tracking problem never fails a run.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

from hpc_runner.errors import UserError
from hpc_runner.pages.run_report import report_run
from hpc_runner.records.read import read_yaml_record
from hpc_runner.tracking.mlflow_run import MlflowRun
from hpc_runner.tracking.settings import UNSENT_FILE, load_settings, point_overrides, record_settings

_current: Any = None  # the MlflowRun of the run executing in this process
OPEN_WAIT_S = 15.0  # how long an ignite bundle waits for a tracking server's run before running untracked
LOCAL_OPEN_WAIT_S = 600.0  # a local store (sqlite, file) has no server to be down: only imports and a db to make


def _say(text: str) -> None:
    print(f"hpc-runner: {text}", flush=True)


def current_run() -> Any:
    """Return the MlflowRun of the run executing in this process, or None."""
    return _current


def record_for_run(run_dir: Path, cfg: Any) -> None:
    """Keep the ``--tracking`` choice carried by ``cfg`` (``cfg.tracking``) in the run dir, if there is one."""
    settings = getattr(cfg, "tracking", None)
    if settings:
        record_settings(Path(run_dir), settings)


def _override_params(run_dir: Path) -> dict[str, Any]:
    try:
        entries = read_yaml_record(run_dir / "overrides.yaml", "overrides record", kind=list) or []
    except UserError:
        return {}
    return {str(e["id"]): e.get("value") for e in entries
            if isinstance(e, dict) and e.get("id") and e.get("source") != "hpc-runner"}


# top-level ids MONAI's --tracking settings define; a config (or an override such as `--tracking_uri X`) that
# has one keeps it, so MONAI's handlers log there, and so does the run dir's own MLflow run
DESTINATION_IDS = ("tracking_uri", "experiment_name", "run_name")
HANDLER_KEYS = ("trainer", "validator", "evaluator")  # the handler configs of MONAI's settings format


def _resolve(config: dict, value: Any) -> str | None:
    """``value`` as MONAI's parser resolves it in ``config`` (``$``/``@`` included); None unless it is a string."""
    if not isinstance(value, str) or not value:
        return None
    if value[0] not in "$@%":
        return value
    try:
        from monai.bundle import ConfigParser

        content = {k: v for k, v in config.items() if k != "_meta_"}
        content["__hpcr_value__"] = value
        found = ConfigParser(content).get_parsed_content("__hpcr_value__")
    except Exception:  # an expression that needs the run (or fails): the settings' or the default store
        return None
    return found if isinstance(found, str) and found else None


def config_destination(config: dict, settings: dict[str, Any]) -> dict[str, str]:
    """Return the store, experiment and run name MONAI's handlers will log to, where the run says so.

    First match wins for each: the config's own top-level id (``--tracking_uri X`` adds it, and MONAI's
    ``patch_bundle_tracking`` never replaces it), then the MONAI settings' ``configs`` value, then (store
    only) the first handler config of the settings that names one. ``$`` expressions are resolved.
    """
    monai = settings.get("monai") or {}
    configs = monai.get("configs") if isinstance(monai.get("configs"), dict) else {}
    out: dict[str, str] = {}
    for key in DESTINATION_IDS:
        candidates = [config.get(key), configs.get(key)]
        if key == "tracking_uri":
            candidates += [h.get(key) for h in (configs.get(k) for k in HANDLER_KEYS) if isinstance(h, dict)]
        for value in candidates:
            found = _resolve(config, value)
            if found:
                out[key] = found
                break
    return out


def start_tracking(cfg: Any, run_dir: Path) -> Any:
    """Open the MLflow run of ``run_dir`` when it is tracked (never waits for the server); return it or None.

    The store is the one MONAI's handlers use when the run names one (:func:`config_destination`): one run, one store.
    """
    global _current
    run_dir = Path(run_dir)
    settings = load_settings(run_dir)
    if not settings:
        return None
    try:
        settings = {**settings, **config_destination(cfg.expanded() if hasattr(cfg, "expanded") else {}, settings)}

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
    """Patch the parsed bundle for ``--tracking`` exactly as ``monai.bundle`` does (``patch_bundle_tracking``).

    MONAI's MLFlowHandler goes into an ignite bundle's engines, top-level ids the config lacks are added, and
    the executed config is saved as ``config_<time>.json`` in ``output_dir`` (the run dir; MONAI's
    ``save_execute_config``). With ``--tracking mlflow`` (or settings without ``handlers_id``) MONAI's default
    settings are used with the store, experiment and run name set to the run dir's MLflow run, so the handler
    finds and continues it; a MONAI settings file with ``handlers_id`` is used as MONAI uses it. Return whether
    handlers were added.
    """
    run = _current
    if run is None:
        return False
    from monai.bundle.utils import DEFAULT_HANDLERS_ID, DEFAULT_MLFLOW_SETTINGS
    from monai.bundle.workflows import ConfigWorkflow

    given = copy.deepcopy(run.settings.get("monai") or {})
    if given.get("handlers_id"):  # a complete MONAI settings file: as MONAI reads it, nothing merged in
        settings = given
        settings.setdefault("configs", {})
    else:  # `--tracking mlflow`, or a file naming only the store: MONAI's defaults into our run
        settings = copy.deepcopy(DEFAULT_MLFLOW_SETTINGS)
        settings["configs"].update(given.get("configs") or {})
        settings["configs"].update(tracking_uri=run.uri, experiment_name=run.experiment, run_name=run.run_name)
        settings["handlers_id"] = DEFAULT_HANDLERS_ID
    handler_ids = settings["handlers_id"]
    ignite = any(v.get("id") in parser for v in handler_ids.values() if isinstance(v, dict))
    wait = OPEN_WAIT_S if str(run.uri).startswith(("http://", "https://")) else LOCAL_OPEN_WAIT_S
    if ignite and not run.wait_open(wait):
        _say(f"MLflow at {run.uri} did not answer in {wait:.0f} s; MONAI's MLflow handlers are not added "
             f"(they log synchronously and would stall or fail the run)")
        settings["configs"] = {k: v for k, v in settings["configs"].items() if k not in handler_ids}
        ignite = False
    ConfigWorkflow.patch_bundle_tracking(parser=parser, settings=settings)
    if ignite:
        _say("MLflow: MONAI's MLFlowHandler added to the bundle's ignite engines")
    return ignite


def _artefacts(run_dir: Path) -> list[Path]:
    """config.yaml, overrides.yaml, summary.json, MONAI's config_<time>.json, and the report's plots (made now when
    matplotlib is here)."""
    try:
        report = report_run(run_dir)
        made = [report.html, *report.pngs]
    except Exception:  # no matplotlib, or nothing to plot: the files above are still sent
        made = []
    executed = sorted(run_dir.glob("config_*.json"))  # MONAI's save_execute_config, when it saved one here
    return [p for p in (run_dir / "config.yaml", run_dir / "overrides.yaml", run_dir / "summary.json", *executed,
                        *made) if Path(p).is_file()]


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

"""What ``--tracking`` asks for, where it is kept in the run dir, and which MLflow store and experiment a run uses.

``--tracking mlflow`` or ``--tracking FILE.json|yaml`` (MONAI's settings format, ``{"configs": {...}}``, or a
flat ``{tracking_uri, experiment_name, run_name}``). The choice is kept in the run dir (``tracking.json``) so
a job, a requeue and ``run --resume`` track the same way. The store and experiment are resolved when the run
starts, first match wins: the settings file, ``$MLFLOW_TRACKING_URI`` / ``$MLFLOW_EXPERIMENT_NAME`` (a
cluster profile sets them with ``env:``), the ``tracking:`` mapping of the user config, then the defaults (a
SQLite store ``mlflow.db`` beside the run dir, or in the sweep dir for a sweep's points; the bundle's name).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hpc_runner.config.loader import load_file
from hpc_runner.errors import UserError
from hpc_runner.optional_modules import import_now
from hpc_runner.records.atomic import write_text_atomic
from hpc_runner.records.json_out import dumps_json
from hpc_runner.records.read import RecordError, read_json_record
from hpc_runner.records.rundir import RunDir
from hpc_runner.registry.user_config import load_user_config

SETTINGS_FILE = "tracking.json"  # in the run dir (a sweep's: in base/)
RUN_FILE = "mlflow-run.json"  # in the run dir: the MLflow run it logs to, reused on resume
UNSENT_FILE = "mlflow-unsent.jsonl"  # in the run dir: what could not be sent
PARENT_FILE = "mlflow-parent.json"  # in a sweep dir: the parent run of its points
LOCK_FILE = "mlflow.lock"  # in a sweep dir: one point creates the parent
DEFAULT_DB = "mlflow.db"
EXTRA = "pip install 'hpc-bundle-runner[tracking]'"
USER_KEY = "tracking"
KINDS = ("mlflow",)


def check_mlflow() -> None:
    """Raise UserError naming the extra to install unless ``import mlflow`` works (its code run now: the entry point
    defers it, hpc_runner/optional_modules.py)."""
    try:
        import_now("mlflow")
    except ImportError as exc:
        raise UserError(
            f"--tracking mlflow needs the MLflow client, which cannot be imported here ({exc})",
            expected=f"the tracking extra: {EXTRA} (or pip install mlflow-skinny tensorboard)",
        ) from None


def _plain(value: Any) -> str | None:
    """A settings value usable without MONAI's parser: a plain string (not a ``$``/``@``/``%`` expression)."""
    return value if isinstance(value, str) and value and value[0] not in "$@%" else None


def parse_tracking_option(value: Any, where: str | None = None) -> dict[str, Any]:
    """Return the settings ``--tracking VALUE`` asks for; raise UserError for a bad value or a missing mlflow."""
    if isinstance(value, Mapping):
        data: Any = dict(value)
        source = "args_file"
    elif str(value) in KINDS:
        check_mlflow()
        return {"kind": str(value), "source": str(value), "tracking_uri": None, "experiment_name": None,
                "run_name": None, "monai": None}
    else:
        path = Path(str(value)).expanduser()
        if path.suffix.lower() not in (".json", ".yaml", ".yml") or not path.is_file():
            raise UserError(
                f"--tracking {value} is neither a tracking kind nor an existing settings file",
                where=where,
                expected="--tracking mlflow, or a .json/.yaml file of MONAI tracking settings",
            )

        # as MONAI reads it (ConfigParser.load_config_files): JSON or YAML, duplicate keys checked
        data = load_file(path, mapping=False).data
        source = str(path.resolve())
    if not isinstance(data, dict):
        raise UserError("the tracking settings are not a mapping", where=where or source,
                        expected="{configs: {tracking_uri: ..., experiment_name: ...}} as MONAI writes them")
    configs = data.get("configs") if isinstance(data.get("configs"), dict) else data
    check_mlflow()
    return {
        "kind": "mlflow",
        "source": source,
        "tracking_uri": _plain(configs.get("tracking_uri")),
        "experiment_name": _plain(configs.get("experiment_name")),
        "run_name": _plain(configs.get("run_name")),
        # MONAI-format settings, kept whole for bundles that use MONAI's ignite workflows
        "monai": data if "configs" in data else None,
    }


def record_settings(run_dir: Path, settings: dict[str, Any]) -> None:
    """Keep ``settings`` in the run dir so jobs and resumes track the same way."""
    write_text_atomic(Path(run_dir) / SETTINGS_FILE, dumps_json(settings, indent=2) + "\n")


def sweep_dir_of(run_dir: Path) -> Path | None:
    """Return the sweep dir when ``run_dir`` is one of its points (``SWEEP/points/NNNN``), else None."""
    run_dir = Path(run_dir).resolve()
    if run_dir.parent.name == "points" and (run_dir.parent.parent / "sweep.yaml").is_file():
        return run_dir.parent.parent
    return None


def _read_json(path: Path) -> dict[str, Any] | None:
    try:  # the one bounded reader; damaged or missing: None
        return read_json_record(path, "settings file")
    except UserError:
        return None


def load_settings(run_dir: Path) -> dict[str, Any] | None:
    """Return the run's tracking settings (a sweep point inherits its sweep's), or None when it is not tracked."""
    run_dir = Path(run_dir)
    found = _read_json(run_dir / SETTINGS_FILE)
    if found is None and (sweep := sweep_dir_of(run_dir)) is not None:
        found = _read_json(sweep / "base" / SETTINGS_FILE)
    return found


def point_overrides(run_dir: Path) -> dict[str, Any] | None:
    """Return the swept values of a sweep point, or None when ``run_dir`` is not a point.

    Read from the point's own run.yaml (written before it runs): a point's start-up never parses the
    sweep's whole record (7 s at 10,000 points in pure-Python YAML)."""
    if sweep_dir_of(run_dir) is None:
        return None

    try:
        sweep = RunDir(run_dir).record().get("sweep")
    except RecordError:
        return None
    if isinstance(sweep, dict) and isinstance(sweep.get("overrides"), dict):
        return dict(sweep["overrides"])
    return None


def overrides_label(values: Mapping[str, Any], limit: int = 120) -> str:
    """Return ``lr=0.001,batch_size=4``: the last part of each id, safe in a folder name."""
    parts = []
    for key, value in values.items():
        short = str(key).replace("#", "::").split("::")[-1]
        parts.append(f"{short}={value}")
    text = ",".join(parts) or "base"
    safe = "".join(c if c.isalnum() or c in "=,.-_+" else "_" for c in text)
    return safe[:limit]


def run_name(run_dir: Path) -> str:
    """Return the name a run shows in TensorBoard and MLflow: ``0007 lr=0.001`` for a point, else the dir's name."""
    run_dir = Path(run_dir).resolve()
    values = point_overrides(run_dir)
    if values is None:
        return run_dir.name
    return f"{run_dir.name} {overrides_label(values)}"


def _user_tracking(environ: Mapping[str, str]) -> dict[str, Any]:
    value = load_user_config(environ).get(USER_KEY) or {}
    return value if isinstance(value, dict) else {}


def resolve_destination(
    run_dir: Path, settings: Mapping[str, Any], bundle_name: str | None, environ: Mapping[str, str] | None = None
) -> tuple[str, str]:
    """Return (tracking URI, experiment name) for a run, first match wins (see the module's docstring)."""
    environ = os.environ if environ is None else environ
    user = _user_tracking(environ)
    uri = settings.get("tracking_uri") or environ.get("MLFLOW_TRACKING_URI") or _plain(user.get("tracking_uri"))
    if not uri:
        home = sweep_dir_of(run_dir) or Path(run_dir).resolve().parent
        uri = f"sqlite:///{(home / DEFAULT_DB).resolve()}"
    experiment = (
        settings.get("experiment_name")
        or environ.get("MLFLOW_EXPERIMENT_NAME")
        or _plain(user.get("experiment_name"))
        or bundle_name
        or "hpc-runner"
    )
    return str(uri), str(experiment)

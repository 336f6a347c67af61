"""One run dir's MLflow run: created once, its id kept in the run dir (a requeue or resume continues it),
a sweep point's run a child of the sweep's parent run; everything is sent from a background thread.

Records (the lines of ``mlflow-unsent.jsonl`` too): ``{"kind": "metric", "key", "value", "step", "timestamp"}``,
``{"kind": "param", "key", "value"}``, ``{"kind": "tag", "key", "value"}``, ``{"kind": "artifact", "path",
"artifact_path"}``, ``{"kind": "status", "status"}``.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from hpc_runner.errors import UserError
from hpc_runner.records.atomic import write_text_atomic
from hpc_runner.records.json_out import dumps_json
from hpc_runner.records.read import read_json_lines, read_json_record
from hpc_runner.records.rundir import RunDir
from hpc_runner.scheduler.job_env import job_id
from hpc_runner.tracking.background import BackgroundSender
from hpc_runner.tracking.settings import (
    LOCK_FILE,
    PARENT_FILE,
    RUN_FILE,
    UNSENT_FILE,
    load_settings,
    resolve_destination,
    run_name,
    sweep_dir_of,
)

# a dead server must fail a call in seconds, not after MLflow's default 7 retries with 2**n s back-off
QUICK_HTTP = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
              "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
STATUS = {"completed": "FINISHED", "failed": "FAILED", "preempted": "KILLED", "interrupted": "KILLED",
          "pruned": "KILLED"}


def param_key(id_path: str) -> str:
    """Return an MLflow-safe key for a config id (``optimizer::lr`` -> ``optimizer/lr``)."""
    key = str(id_path).replace("::", "/").replace("#", "/")
    return "".join(c if c.isalnum() or c in "/_.- " else "_" for c in key)[:250]


def param_value(value: Any) -> str:
    """Return a param value as MLflow keeps it (a string of at most 6000 characters)."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text[:6000]


def _read_json(path: Path) -> dict[str, Any] | None:
    try:  # the one bounded reader; damaged or missing: None
        return read_json_record(path, "settings file")
    except UserError:
        return None


def _write_json(path: Path, data: dict[str, Any]) -> None:
    write_text_atomic(path, dumps_json(data, indent=2) + "\n")


class _FileLock:
    """An exclusive flock on a file (the sweep's points start in separate jobs)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> _FileLock:
        self._fh = open(self.path, "a+b")  # closed in __exit__
        fcntl.flock(self._fh, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self._fh, fcntl.LOCK_UN)
        self._fh.close()


class MlflowRun:
    """The MLflow run of one run dir; ``log_*`` only queue, the background thread creates the run and sends."""

    def __init__(
        self,
        run_dir: Path,
        settings: Mapping[str, Any],
        bundle_name: str | None,
        *,
        background: bool = True,
        flush_timeout_s: float | None = None,
    ) -> None:
        for name, value in QUICK_HTTP.items():
            os.environ.setdefault(name, value)
        self.run_dir = Path(run_dir).resolve()
        self.settings = dict(settings)
        self.uri, self.experiment = resolve_destination(self.run_dir, settings, bundle_name)
        self.run_name = settings.get("run_name") or run_name(self.run_dir)
        recorded = _read_json(self.run_dir / RUN_FILE)
        self.run_id: str | None = None
        self.experiment_id: str | None = None
        self.parent_run_id: str | None = None
        self.resumed = False
        if recorded and recorded.get("run_id"):
            # the run id lives in the store it was made in: continue there even if the environment changed
            self.uri = recorded.get("tracking_uri") or self.uri
            self.run_id, self.experiment_id = recorded["run_id"], recorded.get("experiment_id")
            self.experiment = recorded.get("experiment_name") or self.experiment
            self.parent_run_id = recorded.get("parent_run_id")
            self.resumed = True
        self.flush_timeout_s = float(flush_timeout_s if flush_timeout_s is not None
                                     else settings.get("flush_timeout_s") or 10.0)
        self.ready = threading.Event()
        self._open_lock = threading.Lock()
        self._client: Any = None
        self.sender = (
            BackgroundSender(self._send, self.run_dir / UNSENT_FILE, name="hpcr-mlflow") if background else None
        )
        if self.sender is not None:
            self.sender.put({"kind": "open"})  # the thread creates (or reopens) the run at once

    # ---- the run ----------------------------------------------------------------------------
    @property
    def client(self) -> Any:
        """Return the MlflowClient of this run's store (made on first use, in the thread that sends)."""
        if self._client is None:
            from mlflow import MlflowClient

            self._client = MlflowClient(tracking_uri=self.uri)
        return self._client

    def _experiment_id(self) -> str:
        client = self.client
        found = client.get_experiment_by_name(self.experiment)
        if found is not None:
            return found.experiment_id
        location = None
        if self.uri.startswith("sqlite:///"):  # else MLflow puts artefacts in ./mlruns of whatever the cwd is
            location = (Path(self.uri[len("sqlite:///"):]).parent / "mlartifacts").resolve().as_uri()
        try:
            return client.create_experiment(self.experiment, artifact_location=location)
        except Exception:  # another point made it first
            found = client.get_experiment_by_name(self.experiment)
            if found is None:
                raise
            return found.experiment_id

    def _parent(self, sweep: Path, experiment_id: str) -> str:
        """Return the sweep's parent run id, made by the first point that gets here (under the sweep's lock)."""
        with _FileLock(sweep / LOCK_FILE):
            known = _read_json(sweep / PARENT_FILE)
            if known and known.get("tracking_uri") == self.uri and known.get("experiment_id") == experiment_id:
                return str(known["run_id"])
            run = self.client.create_run(
                experiment_id, run_name=sweep.name,
                tags={"hpcr.sweep_dir": str(sweep), "hpcr.kind": "sweep", "mlflow.source.name": "hpc-runner"},
            )
            _write_json(sweep / PARENT_FILE, {"tracking_uri": self.uri, "experiment_id": experiment_id,
                                              "experiment_name": self.experiment, "run_id": run.info.run_id,
                                              "run_name": sweep.name})
            return run.info.run_id

    def open(self) -> str:
        """Create the run (or reopen the recorded one as RUNNING) and keep its id in the run dir; return the id."""
        with self._open_lock:
            if self.ready.is_set():
                return str(self.run_id)
            client = self.client
            if self.run_id is not None:
                client.update_run(self.run_id, status="RUNNING")
            else:
                sweep = sweep_dir_of(self.run_dir)
                if sweep is not None:
                    with _FileLock(sweep / LOCK_FILE):  # points of a new sweep start together
                        self.experiment_id = self._experiment_id()
                    self.parent_run_id = self._parent(sweep, self.experiment_id)
                else:
                    self.experiment_id = self._experiment_id()
                tags = {"hpcr.run_dir": str(self.run_dir), "hpcr.kind": "point" if sweep else "run",
                        "mlflow.source.name": "hpc-runner"}
                if self.parent_run_id:
                    tags["mlflow.parentRunId"] = self.parent_run_id
                if job := job_id():  # the scheduler's job this run is in
                    tags["hpcr.slurm_job_id"] = job
                run = client.create_run(self.experiment_id, run_name=self.run_name, tags=tags)
                self.run_id = run.info.run_id
                _write_json(self.run_dir / RUN_FILE, self.describe())
            self.ready.set()
            return str(self.run_id)

    def describe(self) -> dict[str, Any]:
        """Return what ``mlflow-run.json`` keeps."""
        return {"tracking_uri": self.uri, "experiment_name": self.experiment, "experiment_id": self.experiment_id,
                "run_id": self.run_id, "run_name": self.run_name, "parent_run_id": self.parent_run_id}

    def wait_open(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the run to exist; return whether it does."""
        return self.ready.wait(timeout)

    # ---- queueing ------------------------------------------------------------------------------
    def _put(self, item: dict[str, Any]) -> None:
        if self.sender is not None:
            self.sender.put(item)
        else:
            self._send([item])

    def log_metrics(self, values: Mapping[str, Any], step: int, timestamp_ms: int | None = None) -> None:
        """Queue numeric metrics at ``step`` (non-finite values are skipped: MLflow refuses some of them)."""
        ts = int(timestamp_ms if timestamp_ms is not None else time.time() * 1000)
        for key, value in values.items():
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                continue
            self._put({"kind": "metric", "key": param_key(key), "value": float(value), "step": int(step),
                       "timestamp": ts})

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Queue params (a value MLflow already has for a key is not sent again by the server's rules)."""
        for key, value in params.items():
            self._put({"kind": "param", "key": param_key(key), "value": param_value(value)})

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        """Queue tags."""
        for key, value in tags.items():
            self._put({"kind": "tag", "key": str(key), "value": param_value(value)})

    def log_artifacts(self, paths: Iterable[Path], artifact_path: str | None = None) -> None:
        """Queue files to upload as artefacts."""
        for path in paths:
            self._put({"kind": "artifact", "path": str(Path(path).resolve()), "artifact_path": artifact_path})

    def set_status(self, outcome: str) -> None:
        """Queue the run's end status for an hpc-runner outcome (completed, failed, preempted, interrupted)."""
        self._put({"kind": "status", "status": STATUS.get(outcome, "FINISHED"), "outcome": outcome})

    # ---- sending -----------------------------------------------------------------------------
    def _send(self, batch: list[dict[str, Any]]) -> None:
        """Send records in order: params, tags and metrics in batches; artefacts and status one by one."""
        from mlflow.entities import Metric, Param, RunTag

        run_id = self.open()
        client = self.client
        metrics, params, tags = [], {}, {}
        for item in batch:
            kind = item.get("kind")
            if kind == "metric":
                metrics.append(Metric(item["key"], item["value"], item["timestamp"], item["step"]))
            elif kind == "param":
                params[item["key"]] = item["value"]
            elif kind == "tag":
                tags[item["key"]] = item["value"]
        for i in range(0, len(metrics), 1000):
            client.log_batch(run_id, metrics=metrics[i : i + 1000])
        plist = [Param(k, v) for k, v in params.items()]
        for i in range(0, len(plist), 100):
            client.log_batch(run_id, params=plist[i : i + 100])
        tlist = [RunTag(k, v) for k, v in tags.items()]
        for i in range(0, len(tlist), 100):
            client.log_batch(run_id, tags=tlist[i : i + 100])
        for item in batch:
            if item.get("kind") == "artifact" and Path(item["path"]).exists():
                client.log_artifact(run_id, item["path"], item.get("artifact_path"))
            elif item.get("kind") == "status":
                client.set_terminated(run_id, item["status"])

    def close(self) -> dict[str, Any]:
        """Send what is queued (at most ``flush_timeout_s``), keep the rest in the unsent file; return the stats."""
        if self.sender is None:
            return {"sent": 0, "unsent": 0, "overflow": 0, "failed_sends": 0}
        stats = self.sender.close(self.flush_timeout_s)
        stats["last_error"] = self.sender.last_error
        return stats

    def link(self) -> str:
        """Return where to look at the run: the UI address for an http store, else the store and run id."""
        if self.uri.startswith(("http://", "https://")) and self.experiment_id and self.run_id:
            return f"{self.uri.rstrip('/')}/#/experiments/{self.experiment_id}/runs/{self.run_id}"
        return f"{self.uri} (run {self.run_id or 'not created'})"


def send_unsent(run_dir: str | Path) -> tuple[int, int]:
    """Send a run dir's ``mlflow-unsent.jsonl`` now (normal MLflow timeouts); return (sent, left)."""
    run_dir = Path(run_dir).resolve()
    path = run_dir / UNSENT_FILE
    if not path.is_file():
        raise UserError("there is nothing unsent in this run dir", where=str(path),
                        expected=f"a run dir with {UNSENT_FILE} (written when MLflow could not be reached)")

    lines = read_json_lines(path, "unsent MLflow records")  # a device, or past the size bound: RecordError (exit 2)
    if lines.damaged:  # nothing is sent, and the file is kept: the lines it cannot read would be lost
        shown = ", ".join(map(str, lines.damaged[:10])) + (" ..." if len(lines.damaged) > 10 else "")
        raise UserError(f"{len(lines.damaged)} line(s) of the unsent MLflow records cannot be read (line {shown}); "
                        "nothing was sent", where=str(path),
                        expected=f"one JSON object a line, as hpc-runner writes {UNSENT_FILE} (remove or repair those "
                        "lines, then send again)")
    settings = load_settings(run_dir) or {"kind": "mlflow"}
    items = [item for item in lines.records if item.get("kind") != "open"]

    bundle = (RunDir(run_dir).record().get("bundle") or {}).get("name")
    run = MlflowRun(run_dir, settings, bundle or run_dir.parent.name, background=False)
    sent = 0
    try:
        run.open()
        for i in range(0, len(items), 500):
            run._send(items[i : i + 500])
            sent = i + len(items[i : i + 500])
    finally:
        left = items[sent:]
        if left:
            write_text_atomic(path, "".join(json.dumps(x) + "\n" for x in left))
        else:
            path.unlink()
    return sent, len(left)

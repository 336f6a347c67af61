"""A real MLflow tracking server on 127.0.0.1 and the tiny CPU bundle of tests/engine, for the tracking tests."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ENGINE_CONFTEST = Path(__file__).resolve().parents[1] / "engine" / "conftest.py"


def _engine_bundle_text() -> tuple[str, str, dict]:
    spec = importlib.util.spec_from_file_location("hpcr_engine_tiny", ENGINE_CONFTEST)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.SCRIPT, module.TRAIN, module.META


# --import-mode=importlib puts no test folder on sys.path; the test modules import tracking_helpers
sys.path.insert(0, str(Path(__file__).resolve().parent))
from tracking_helpers import free_port, need_mlflow  # noqa: E402


@pytest.fixture
def tiny_bundle(tmp_path: Path) -> Path:
    """The tiny 2D bundle of tests/engine (12 items, 6 steps an epoch, 3 epochs)."""
    script, train, meta = _engine_bundle_text()
    root = tmp_path / "tiny2d"
    (root / "configs").mkdir(parents=True)
    (root / "scripts").mkdir()
    (root / "scripts" / "__init__.py").write_text("")
    (root / "scripts" / "tiny.py").write_text(script)
    (root / "configs" / "train.yaml").write_text(train)
    (root / "configs" / "metadata.json").write_text(json.dumps(meta))
    return root


@pytest.fixture(autouse=True)
def clean_tracking_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No MLflow variables or user config from the machine; the run's cwd is the test's folder."""
    for name in list(os.environ):
        if name.startswith(("MLFLOW_", "HPCR_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config-home"))
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``mlflow server`` on 127.0.0.1 (SQLite store, proxied artefacts) in a temp dir; yields its URI."""
    need_mlflow("mlflow.server")
    folder = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    log = open(folder / "server.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
         "--backend-store-uri", f"sqlite:///{folder / 'db.sqlite'}", "--artifacts-destination",
         str(folder / "artifacts"), "--workers", "1"],
        cwd=folder, stdout=log, stderr=subprocess.STDOUT,
        # no job runner: its genai jobs need pandas, which the test environment leaves out (mlflow-skinny and the
        # server's own packages, pyproject.toml); these tests log runs and artefacts only
        env={**{k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")},
             "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
    )
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    try:
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                log.flush()
                pytest.fail(f"mlflow server did not start: {(folder / 'server.log').read_text()[-2000:]}")
            time.sleep(0.3)
        yield uri
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()

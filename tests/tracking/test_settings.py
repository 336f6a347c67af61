"""--tracking as MONAI takes it, where the store comes from, and the extra named when mlflow is missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpc_runner.errors import UserError
from hpc_runner.tracking.settings import overrides_label, parse_tracking_option, resolve_destination

ROOT = Path(__file__).resolve().parents[2]


def test_monai_settings_file_gives_store_experiment_and_run_name(tmp_path: Path) -> None:
    pytest.importorskip("mlflow")
    f = tmp_path / "mlflow.json"
    f.write_text(json.dumps({"handlers_id": {}, "configs": {"tracking_uri": "http://h:5000",
                                                            "experiment_name": "lungs", "run_name": "$@x"}}))
    s = parse_tracking_option(str(f))
    assert (s["tracking_uri"], s["experiment_name"], s["run_name"]) == ("http://h:5000", "lungs", None)
    assert s["monai"]["configs"]["tracking_uri"] == "http://h:5000"  # kept whole for ignite bundles


def test_a_value_that_is_neither_mlflow_nor_a_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="neither a tracking kind nor an existing settings file"):
        parse_tracking_option("wandb")


def test_file_beats_environment_beats_user_config_beats_the_default(tmp_path: Path) -> None:
    cfg = tmp_path / "user.yaml"
    cfg.write_text("tracking: {tracking_uri: 'http://user:1', experiment_name: fromuser}\n")
    run = tmp_path / "runs" / "b" / "r1"
    env = {"HPCR_CONFIG": str(cfg)}
    assert resolve_destination(run, {}, "b", env) == ("http://user:1", "fromuser")
    env["MLFLOW_TRACKING_URI"], env["MLFLOW_EXPERIMENT_NAME"] = "http://env:2", "fromenv"
    assert resolve_destination(run, {}, "b", env) == ("http://env:2", "fromenv")
    assert resolve_destination(run, {"tracking_uri": "http://file:3", "experiment_name": "x"}, "b", env) == (
        "http://file:3", "x")
    assert resolve_destination(run, {}, "b", {}) == (f"sqlite:///{(run.parent / 'mlflow.db').resolve()}", "b")


def test_point_names_keep_the_last_part_of_each_id() -> None:
    assert overrides_label({"optimizer::lr": 0.001, "train#dataloader#batch_size": 4}) == "lr=0.001,batch_size=4"


def _python(code_or_args: list[str], tmp_path: Path, extra_path: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "HPCR_"))}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (extra_path, ROOT) if p)
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config-home")
    return subprocess.run([sys.executable, *code_or_args], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)


def test_without_mlflow_tracking_exits_2_naming_the_extra_and_leaves_no_run_dir(tmp_path: Path,
                                                                                tiny_bundle: Path) -> None:
    blocked = tmp_path / "no-mlflow" / "mlflow"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text("raise ImportError('No module named mlflow (blocked by the test)')\n")
    proc = _python(["-m", "hpc_runner", "run", "--bundle", str(tiny_bundle), "--tracking", "mlflow",
                    "--output_dir", "r"], tmp_path, blocked.parent)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "pip install 'hpc-bundle-runner[tracking]'" in proc.stderr
    assert not (tmp_path / "r").exists()


def test_help_does_not_import_mlflow_or_tensorboard(tmp_path: Path) -> None:
    code = ("import sys; from hpc_runner.cli import main\n"
            "try:\n    main(['run', '--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mlflow', 'tensorboard', 'torch')))")
    proc = _python(["-c", code], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "--tracking mlflow|FILE" in proc.stdout
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_tracking_send_of_unreadable_lines_exits_2_naming_them_and_sends_and_removes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 32: binary garbage in mlflow-unsent.jsonl exited 0, made an MLflow run and removed the file."""
    from hpc_runner.tracking.__main__ import main

    run = tmp_path / "r"
    run.mkdir()
    unsent = run / "mlflow-unsent.jsonl"
    content = b'{"kind": "param", "key": "a", "value": 1}\n' + bytes(range(256)) * 4
    unsent.write_bytes(content)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'store.db'}")
    assert main(["send", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "Traceback" not in err
    assert str(unsent) in err and "line 2, 3, 4, 5" in err and "Expected one JSON object a line" in err
    assert unsent.read_bytes() == content and sorted(p.name for p in tmp_path.rglob("*")) == ["mlflow-unsent.jsonl",
                                                                                              "r"]

"""MONAI's "a config runs code" warning: once per bundle (per process, and not again in a later command for the
same files), never in a job, not with --trust."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from warm_python import WARM

from hpc_runner.config import monai_bridge
from hpc_runner.config.bundle_config import load_bundle_config

REPO = Path(__file__).resolve().parents[2]
CONFIG = {
    "inner": "$@bundle_root + '/inner.json'",
    "bundle_root": ".",
    # a bundle that parses a config through MONAI's create_workflow, which warns on every parse
    "run": ["$monai.bundle.create_workflow(config_file=@inner, workflow_type=None).run()",
            "$warnings.warn('a warning of the bundle itself')"],
    "imports": ["$import warnings"],
}


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process has not shown the warning yet."""
    monkeypatch.setattr(monai_bridge, "_code_warning_shown", False)


def _cfg(tmp_path: Path):
    (tmp_path / "train.json").write_text(json.dumps({"run": ["$print(1)"]}))
    return load_bundle_config(config_files=[str(tmp_path / "train.json")], environ={})


def test_the_warning_is_shown_once_per_process_and_not_for_a_trusted_or_safe_bundle(tmp_path, fresh) -> None:
    cfg = _cfg(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert monai_bridge.warn_code_once(cfg, trusted=True) is False
        assert monai_bridge.warn_code_once(cfg, trusted=False) is True
        assert monai_bridge.warn_code_once(cfg, trusted=False) is False  # the second sweep point, task, ...
    texts = [str(w.message) for w in caught]
    assert len(texts) == 1 and "GHSA-873f-pvrv-4x83" in texts[0] and "train.json" in texts[0] and "\n" not in texts[0]


def test_the_filter_drops_monais_warning_and_no_other(fresh) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        monai_bridge.silence_monai_code_warning()
        warnings.warn("parsing config_file a.json: any `\"_target_\"` value in it is resolved ...", UserWarning,
                      stacklevel=1)
        warnings.warn("Duplicate key: `a`", UserWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["Duplicate key: `a`"]


@pytest.mark.slow
def test_a_run_says_it_once_and_its_job_not_at_all_while_other_warnings_still_show(tmp_path: Path) -> None:
    (tmp_path / "train.json").write_text(json.dumps(CONFIG))
    (tmp_path / "inner.json").write_text(json.dumps({"run": ["$print('inner config ran')"]}))
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1",
           "XDG_CONFIG_HOME": str(tmp_path / "xdg"), "XDG_CACHE_HOME": str(tmp_path / "cache")}

    def python(*args: str) -> subprocess.CompletedProcess[str]:
        if args[0] == "-m":  # a fork of a process with torch and MONAI imported (tests/warm_python.py)
            return WARM.run(args[1], list(args[2:]), cwd=tmp_path, env=env, timeout=300)
        return subprocess.run([sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=300)

    run = python("-m", "hpc_runner", "run", "--config_file", "train.json", "--output_dir", "r")
    assert run.returncode == 0, run.stderr
    assert "inner config ran" in run.stdout and "a warning of the bundle itself" in run.stderr
    assert run.stderr.count("GHSA-873f-pvrv-4x83") == 1, run.stderr  # hpc-runner's line; MONAI's is silenced
    assert "parsing config_file" not in run.stderr

    again = python("-m", "hpc_runner", "run", "--config_file", "train.json", "--output_dir", "r2")
    assert again.returncode == 0 and "GHSA-873f-pvrv-4x83" not in again.stderr, again.stderr  # once per bundle
    (tmp_path / "train.json").write_text(json.dumps({**CONFIG, "changed": 1}))
    changed = python("-m", "hpc_runner", "run", "--config_file", "train.json", "--output_dir", "r3")
    assert changed.stderr.count("GHSA-873f-pvrv-4x83") == 1, changed.stderr  # its files changed: said again
    trusted = python("-m", "hpc_runner", "run", "--config_file", "train.json", "--output_dir", "t", "--trust")
    assert trusted.returncode == 0 and "GHSA-873f-pvrv-4x83" not in trusted.stderr, trusted.stderr

    # what every task of a submitted array runs: the recorded run dir, without the warning
    job = python("-c", "from hpc_runner.engine.runner import run_recorded; print(run_recorded('r').status)")
    assert job.returncode == 0 and "completed" in job.stdout, job.stderr
    assert "GHSA-873f-pvrv-4x83" not in job.stderr and "a warning of the bundle itself" in job.stderr

    monai = python("-m", "monai.bundle", "run", "--config_file", "train.json")  # the spec: MONAI warns per parse
    assert monai.returncode == 0 and monai.stderr.count("GHSA-873f-pvrv-4x83") == 2, monai.stderr

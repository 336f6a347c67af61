"""Fixtures for the report tests: one real tiny run shared by the session, headless Chromium."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

# pytest runs with --import-mode=importlib, which puts no test folder on sys.path; the tests here
# import their helpers module by its (unique) name
sys.path.insert(0, str(Path(__file__).resolve().parent))
from report_helpers import BUNDLE, CHROMIUM_NAMES, Chromium, find_chromium, hpc_runner, tiny_overrides


@pytest.fixture(scope="session")
def dataset_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny synthetic dataset's folder (written by the first run)."""
    return tmp_path_factory.mktemp("synthetic_seg_data")


@pytest.fixture(scope="session")
def report_run(tmp_path_factory: pytest.TempPathFactory, dataset_dir: Path) -> Path:
    """A real run dir of the example bundle (2 epochs, 4 steps), run once in this process; copy it to change it."""
    from hpc_runner.config.bundle_config import load_bundle_config
    from hpc_runner.config.overrides import parse_cli_overrides
    from hpc_runner.engine.runner import run_bundle

    cfg = load_bundle_config(bundle=BUNDLE, cli_overrides=parse_cli_overrides(tiny_overrides(dataset_dir)))
    out = tmp_path_factory.mktemp("runs") / "tiny run"  # a space: links must be URL-quoted
    outcome = run_bundle(cfg, None, out)
    assert outcome.status == "completed", outcome.error
    return out


@pytest.fixture
def run_copy(report_run: Path, tmp_path: Path) -> Path:
    """A private copy of the shared run dir (output_dir in its config.yaml still names the original)."""
    return Path(shutil.copytree(report_run, tmp_path / "copy"))


@pytest.fixture(scope="session")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> Chromium:
    """Headless Chromium; skipped without one (apt-get install chromium), a failure when CI=true."""
    binary = find_chromium()
    if binary is None:
        reason = f"no Chromium found ({', '.join(CHROMIUM_NAMES)} or $HPCR_CHROMIUM); apt-get install chromium"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but {reason}", pytrace=False)
        pytest.skip(reason)
    return Chromium(binary, tmp_path_factory.mktemp("chromium-profile"))



SWEEP_AXES = ("--sweep", "learning_rate=0.001,0.01", "--sweep", "batch_size=1,2")


@pytest.fixture(scope="session")
def local_sweep(tmp_path_factory: pytest.TempPathFactory, dataset_dir: Path) -> Path:
    """A real 4-point sweep dir (learning_rate x batch_size) run here with the `local` profile (no scheduler).

    The layout, sweep.yaml and the states come from the sweep code itself, exactly as on a cluster; only
    the job ids are ``local``, so no test needs SLURM to check the sweep report and the live view.
    """
    folder = tmp_path_factory.mktemp("sweeps")
    out = hpc_runner("sweep", "--bundle", str(BUNDLE), "--cluster", "local", "--output_dir", "sw", *SWEEP_AXES,
                     *tiny_overrides(dataset_dir), cwd=folder)
    assert out.returncode == 0, out.stdout + out.stderr
    return folder / "sw"

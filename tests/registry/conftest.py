"""Fixtures for the registry tests: the CLI as a subprocess in a clean environment."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from warm_python import WARM

# pytest runs with --import-mode=importlib, which puts no test folder on sys.path; the tests here
# import their helpers module by its (unique) name
sys.path.insert(0, str(Path(__file__).resolve().parent))
from registry_helpers import clean_env

Cli = Callable[..., subprocess.CompletedProcess]


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    """Run ``python -m hpc_runner ARGS`` (cwd: tmp_path unless given); returns the completed process."""

    def run(*args: str, cwd: Path | None = None, bundle_path: str | None = None, timeout: float = 300,
            **extra: str) -> subprocess.CompletedProcess:
        return WARM.run("hpc_runner", [str(a) for a in args], cwd=cwd or tmp_path,
                        env=clean_env(tmp_path, bundle_path, **extra), timeout=timeout)

    return run

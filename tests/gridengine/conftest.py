"""A real Grid Engine for the tests marked ``gridengine`` (scripts/local-sge.sh start): they skip without one,
and fail instead when CI=true (CI starts it)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

SGE_ROOT = "/var/lib/gridengine"  # where scripts/local-sge.sh (Debian's packages) puts it


def pytest_configure(config: pytest.Config) -> None:
    # until pyproject.toml lists it beside "slurm"
    config.addinivalue_line("markers", "gridengine: needs the local Grid Engine (scripts/local-sge.sh start)")


@pytest.fixture(scope="session")
def grid_engine() -> None:
    """The local Grid Engine answers (SGE_ROOT/SGE_CELL as scripts/local-sge.sh env prints them)."""
    os.environ.setdefault("SGE_ROOT", SGE_ROOT)
    os.environ.setdefault("SGE_CELL", "default")
    why = None
    if shutil.which("qsub") is None:
        why = "no qsub on PATH (scripts/local-sge.sh start installs Grid Engine)"
    else:
        try:
            out = subprocess.run(["qstat", "-u", "hpcr-nobody"], capture_output=True, timeout=20, check=False)
            if out.returncode != 0:
                why = f"no Grid Engine qmaster answers: {out.stderr.decode(errors='replace').strip()[:200]}"
        except (OSError, subprocess.SubprocessError) as exc:
            why = f"qstat failed: {exc}"
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and {why}")
        pytest.skip(why)

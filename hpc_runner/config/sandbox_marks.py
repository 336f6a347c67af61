"""What the environment says about where this process runs: inside the `--safe` sandbox or a container image
(engine/sandbox.py and engine/container.py set these marks), and the test-only switch of the allow-list
(honoured only inside the sandbox)."""

from __future__ import annotations

import os
from collections.abc import Mapping

INSIDE_ENV = "HPCR_SANDBOXED"  # set by the parent on the run it starts inside the sandbox
# Test-only: "off" skips the allow-list inside the sandbox, so tests show that the sandbox alone holds.
# Honoured only where INSIDE_ENV is set; never documented as a user setting.
STATIC_SWITCH = "HPCR_TEST_SAFE_STATIC"
INSIDE_CONTAINER_ENV = "HPCR_CONTAINED"  # set on the run hpc-runner starts inside a container image


def inside_sandbox(environ: Mapping[str, str] | None = None) -> bool:
    """Return whether this process is the run its parent started inside the sandbox."""
    return (os.environ if environ is None else environ).get(INSIDE_ENV) == "1"


def static_check_skipped(environ: Mapping[str, str] | None = None) -> bool:
    """Test-only: whether the allow-list is switched off (only inside the sandbox, never outside it)."""
    environ = os.environ if environ is None else environ
    return inside_sandbox(environ) and environ.get(STATIC_SWITCH) == "off"


def inside_container(environ: Mapping[str, str] | None = None) -> bool:
    """Return whether this process is the run hpc-runner started inside a container image."""
    return (os.environ if environ is None else environ).get(INSIDE_CONTAINER_ENV) == "1"


def scheduler_outside(environ: Mapping[str, str] | None = None) -> bool:
    """Return whether the scheduler is asked from outside this process (sandbox: no network; image: no SLURM)."""
    return inside_sandbox(environ) or inside_container(environ)

"""What the environment says about the `--safe` sandbox: whether this process runs inside it, and the
test-only switch of the allow-list (honoured only inside). engine/sandbox.py sets these marks."""

from __future__ import annotations

import os
from collections.abc import Mapping

INSIDE_ENV = "HPCR_SANDBOXED"  # set by the parent on the run it starts inside the sandbox
# Test-only: "off" skips the allow-list inside the sandbox, so tests show that the sandbox alone holds.
# Honoured only where INSIDE_ENV is set; never documented as a user setting.
STATIC_SWITCH = "HPCR_TEST_SAFE_STATIC"


def inside_sandbox(environ: Mapping[str, str] | None = None) -> bool:
    """Return whether this process is the run its parent started inside the sandbox."""
    return (os.environ if environ is None else environ).get(INSIDE_ENV) == "1"


def static_check_skipped(environ: Mapping[str, str] | None = None) -> bool:
    """Test-only: whether the allow-list is switched off (only inside the sandbox, never outside it)."""
    environ = os.environ if environ is None else environ
    return inside_sandbox(environ) and environ.get(STATIC_SWITCH) == "off"

"""The slowed, counting "shared storage" folder for the tests (scripts/slow_share.py, a FUSE view; docs/testing.md)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "slow_share.py"


def _module():
    spec = importlib.util.spec_from_file_location("slow_share", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("slow_share", module)
    spec.loader.exec_module(module)
    return module


slow_share = _module()


def missing() -> str | None:
    """Why the slow share cannot start here (None: it can)."""
    if importlib.util.find_spec("mfusepy") is None:
        return "mfusepy is not installed (pip install mfusepy; .ci/run installs it)"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse on this machine"
    return None


@contextlib.contextmanager
def mounted(src: Path, mnt: Path, latency_ms: float = 1.0, mbps: float = 0.0) -> Iterator[Path]:
    """``src`` seen through a counting, slowed FUSE view at ``mnt`` for the block (skips when FUSE is unavailable,
    fails under CI=true)."""
    why = missing()
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the slow share cannot start: {why}")
        pytest.skip(why)
    slow_share.start(str(src), str(mnt), latency_ms, mbps, log=str(mnt.parent / f"{mnt.name}.log"))
    try:
        yield mnt
    finally:
        slow_share.stop(str(mnt))


def read_bytes(mnt: Path) -> int:
    """The bytes read through the view so far."""
    return int(slow_share.stats(str(mnt))["read_bytes"])

"""Each data-path benchmark runs with --quick and prints its ratio lines (slow: real timing runs)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

EXPECTED = {
    "overlap": [r"overlap load=50ms .*ratio ours/monai=\d", r"overlap load=1ms .*ratio ours/monai=\d"],
    "notebook_workload": [r"notebook ours: .*speedup=\d.*efficiency=\d", r"notebook ratio ours/monai speed=\d"],
    "preprocess_throughput": [r"gaussian ratio: ours/best-peer\(.+\)=\d", r"fft ratio: ours/best-peer\(.+\)=\d"],
    "device_prefetch": [r"device_prefetch waits for data .*: plain .* prefetch .* speedup=\d",
                        r"device_prefetch compute-bound .*: plain .* prefetch .* speedup=\d"],
    "exit_time": [r"exit ratio ours/monai: last line to exit \d", r"start ratio ours/nothing deferred: wall \d"],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(EXPECTED))
def test_bench_quick_prints_ratio_lines(name: str):
    if name == "preprocess_throughput" and importlib.util.find_spec("scipy") is None:
        pytest.skip("needs the bench extra (scipy)")
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / f"{name}.py"), "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    for pattern in EXPECTED[name]:
        assert re.search(pattern, out.stdout), f"{pattern!r} not in:\n{out.stdout}"
    assert "# machine:" in out.stdout or name == "device_prefetch"

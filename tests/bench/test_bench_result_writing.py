"""bench/result_writing.py runs at tiny size, prints its ratio lines and finds both sides voxel-equal."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_result_writing_quick_prints_ratios_and_voxel_equal():
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "result_writing.py"), "--quick"], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    for pattern in [r"result_writing ours: \d+\.\d+ volumes/s", r"ratio ours/peer\(float32\)=\d",
                    r"ratio ours/peer\(uint8\)=\d", r"voxel-equal: yes", r"# machine:"]:
        assert re.search(pattern, out.stdout), f"{pattern!r} not in:\n{out.stdout}"


@pytest.mark.slow
def test_result_writing_levels_prints_every_level():
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "result_writing.py"), "--levels", "--size", "32",
                          "--repeats", "1"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    for level in (0, 1, 3, 6, 9):
        assert re.search(rf"\| uint8 label map \| {level} \| \d+ \|", out.stdout), out.stdout
        assert re.search(rf"\| float32 probability map \| {level} \| \d+ \|", out.stdout), out.stdout

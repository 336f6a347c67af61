"""`hpc-runner run` refuses a config that cannot start before its run dir exists (exit 2, one paragraph)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "bundles" / "synthetic_seg"
TINY = ["--num_train", "1", "--num_val", "1", "--image_size", "16", "--max_epochs", "1", "--batch_size", "1"]


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hpc_runner", "run", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})


def test_run_with_a_target_that_does_not_import_exits_2_and_leaves_no_run_dir(tmp_path):
    out = _run(tmp_path, "--bundle", str(EXAMPLE), "--output_dir", "r1", "--dataset_dir", str(tmp_path / "data"),
               "--network_def::_target_", "monai.networks.nets.NoSuchNet", *TINY)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    [paragraph] = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert "--network_def::_target_: at id 'network_def::_target_': pre-flight:" in paragraph
    assert "'monai.networks.nets.NoSuchNet' cannot be imported" in paragraph
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no run dir, no dataset, no runs/


def test_run_with_a_dollar_syntax_error_is_refused_before_anything_runs(tmp_path):
    (tmp_path / "data").mkdir()
    out = _run(tmp_path, "--bundle", str(EXAMPLE), "--output_dir", "r1", "--dataset_dir", str(tmp_path / "data"),
               "--initialize", "[\"$print('x'\"]", *TINY)
    assert out.returncode == 2 and "at id 'initialize::0'" in out.stderr and "not valid Python" in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"] and not any((tmp_path / "data").iterdir())


def test_no_preflight_lets_the_bad_target_fail_in_the_run_as_before(tmp_path):
    out = _run(tmp_path, "--bundle", str(EXAMPLE), "--output_dir", "r1", "--dataset_dir", str(tmp_path / "data"),
               "--network_def::_target_", "monai.networks.nets.NoSuchNet", "--no-preflight", *TINY)
    assert out.returncode == 1, out.stderr
    assert (tmp_path / "r1" / "error.txt").is_file()


@pytest.mark.slow
def test_run_resume_with_a_bad_target_override_is_refused_and_leaves_the_run_dir_as_it_was(tmp_path):
    done = _run(tmp_path, "--bundle", str(EXAMPLE), "--output_dir", "r1", "--dataset_dir", str(tmp_path / "data"),
                *TINY)
    assert done.returncode == 0, done.stderr
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "r1").rglob("*")}
    out = _run(tmp_path, "--resume", "r1", "--network_def::_target_", "monai.networks.nets.NoSuchNet")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert "at id 'network_def::_target_': pre-flight:" in out.stderr
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "r1").rglob("*")} == before

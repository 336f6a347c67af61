"""Sweep values are checked by type before anything is written or queued, and the space-separated form of
`--sweep` (`lr=1e-3 2e-3`) is answered with the comma form (issue 34)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpc_runner.cli import main

EXAMPLE = Path(__file__).resolve().parents[2] / "bundles" / "synthetic_seg"


def _sweep(tmp_path: Path, *args: str) -> list[str]:
    return ["sweep", "--bundle", str(EXAMPLE), "--cluster", "local", "--output_dir", str(tmp_path / "sw"),
            "--dry-run", *args]


@pytest.mark.parametrize("args, words", [
    (["--sweep", "batch_size=2,2.5"], ["sweep point 1 (batch_size=2.5) gives id 'batch_size' the fraction 2.5",
                                       "whole number (2)", "--batch_size 2.0"]),
    (["--sweep", "learning_rate=1e-3", "2e-3"], ["'2e-3' follows --sweep 'learning_rate=1e-3'",
                                                 "--sweep 'learning_rate=1e-3,2e-3'"]),
])
def test_a_sweep_value_that_would_fail_every_job_is_refused_naming_the_point(
        args: list[str], words: list[str], tmp_path: Path, capsys: pytest.CaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    code = main(_sweep(tmp_path, *args))
    err = capsys.readouterr().err
    assert code == 2 and err.count("error:") == 1 and "Traceback" not in err, err
    assert all(w in err for w in words), err
    assert not (tmp_path / "sw").exists()


def test_fractions_for_a_rate_held_as_0_and_whole_floats_pass(
        tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    code = main(_sweep(tmp_path, "--sweep", "batch_size=1,2.0", "--+weight_decay", "0",
                       "--sweep", "weight_decay=0,1e-4", "--no-preflight"))
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "4 points" in out.out


def test_json_says_what_a_sweep_would_submit_in_one_object(
        tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    code = main(_sweep(tmp_path, "--sweep", "learning_rate=1e-3,2e-3", "--no-preflight", "--json"))
    out = capsys.readouterr()
    assert code == 0, out.err
    found = json.loads(out.out)  # the whole of stdout is one JSON object
    assert found["dry_run"] is True and found["profile"] == "local" and found["dir"] == str(tmp_path / "sw")
    assert "2 points, all valid" in found["notes"][0]
    assert main(["submit", "--bundle", str(EXAMPLE), "--cluster", "local", "--json", "--wait"]) == 2
    assert "--json prints what was submitted at once" in capsys.readouterr().err

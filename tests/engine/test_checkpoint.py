"""Checkpoints appear whole even when the writer is killed mid-file; a damaged one is named, never skipped
silently; when none loads the run refuses to start over unless asked."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from hpc_runner.engine.checkpoint import (
    CheckpointError,
    CheckpointFallbackWarning,
    list_checkpoints,
    load_latest_checkpoint,
    save_checkpoint,
    set_aside_for_restart,
)

# Saves steps 1-3, then is killed half-way through the file of step 4.
KILLED_WRITER = """
import os, signal, sys, torch
from pathlib import Path
from hpc_runner.engine.checkpoint import save_checkpoint
from hpc_runner.records.atomic import save_atomic
import hpc_runner.engine.checkpoint as ckpt
folder = Path(sys.argv[1])
for step in (1, 2, 3):
    save_checkpoint(folder, step, {"w": torch.full((3,), float(step))}, keep=5)

def half_then_die(f):
    f.write(b"PK\\x03\\x04 half a zip file")
    f.flush()
    os.kill(os.getpid(), signal.SIGKILL)  # the node dies here

save_atomic(ckpt.checkpoint_path(folder, 4), half_then_die)
"""


def test_checkpoint_files_appear_whole_when_the_writer_is_killed_mid_file(tmp_path: Path):
    proc = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(tmp_path)], timeout=120)
    assert proc.returncode == -9
    assert [p.name for p in list_checkpoints(tmp_path)] == [f"ckpt_0000000{s}.pt" for s in (1, 2, 3)]
    assert len([p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]) == 1  # the half file, hidden
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing damaged is visible, so nothing to warn about
        path, state = load_latest_checkpoint(tmp_path)
    assert path.name == "ckpt_00000003.pt" and state["step"] == 3 and state["w"][0] == 3
    save_checkpoint(tmp_path, 4, {"w": torch.zeros(3)}, keep=2)  # the restarted run: its first write sweeps
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt_00000003.pt", "ckpt_00000004.pt"]


def test_a_damaged_newest_checkpoint_is_named_with_its_error_and_the_older_one_used(tmp_path: Path):
    for step in (2, 4):
        save_checkpoint(tmp_path, step, {"w": torch.full((3,), float(step))})
    newest = tmp_path / "ckpt_00000004.pt"
    newest.write_bytes(newest.read_bytes()[:100])  # damaged after it was written (disk, partial copy)
    with pytest.warns(CheckpointFallbackWarning) as caught:
        path, state = load_latest_checkpoint(tmp_path)
    assert path.name == "ckpt_00000002.pt" and state["step"] == 2
    (message,) = [str(w.message) for w in caught]
    assert str(newest) in message and str(path) in message and "step 2" in message
    assert "Error" in message  # why it could not be read


def test_when_no_checkpoint_loads_resuming_refuses_naming_every_file(tmp_path: Path):
    for step in (2, 4):
        save_checkpoint(tmp_path, step, {"w": torch.zeros(1)})
    (tmp_path / "ckpt_00000002.pt").write_bytes(b"")
    torch.save({"no": "step"}, tmp_path / "ckpt_00000004.pt")  # loads, but is not a checkpoint of ours
    with pytest.raises(CheckpointError) as info:
        load_latest_checkpoint(tmp_path)
    text = info.value.paragraph()
    assert "ckpt_00000002.pt" in text and "ckpt_00000004.pt" in text and "'step'" in text
    assert "--restart" in text and info.value.exit_code == 2


def test_an_empty_or_missing_folder_means_a_fresh_start(tmp_path: Path):
    assert load_latest_checkpoint(tmp_path / "checkpoints") is None
    assert load_latest_checkpoint(tmp_path) is None


def test_restart_moves_checkpoints_and_metrics_aside(tmp_path: Path):
    save_checkpoint(tmp_path / "checkpoints", 1, {"w": torch.zeros(1)})
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n')
    aside = set_aside_for_restart(tmp_path)
    assert aside.parent == tmp_path and aside.name.startswith("restarted-")
    assert (aside / "checkpoints" / "ckpt_00000001.pt").is_file() and (aside / "metrics.jsonl").is_file()
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "metrics.jsonl").exists()
    assert set_aside_for_restart(tmp_path) is None  # nothing left to move

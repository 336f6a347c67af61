"""ResultWriter with real files and real threads: atomic outputs, named errors, bounded memory."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path

import numpy as np
import pytest

from hpc_runner.inference.manifest import OutputManifest
from hpc_runner.inference.nifti import encode_nifti, read_nifti
from hpc_runner.inference.writer import ResultWriter, WriteError

AFFINE = np.diag([1.5, 1.5, 2.0, 1.0])


def _labels(seed: int, size: int = 24) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 3, size=(size,) * 3).astype(np.uint8)


def test_outputs_manifest_and_stats(tmp_path):
    manifest = OutputManifest(tmp_path)
    with ResultWriter(tmp_path, manifest, threads=2, queue_size=2) as writer:
        for i in range(6):
            writer.submit(f"case_{i}", f"case_{i}.nii.gz", _labels(i), AFFINE, {"dice": 0.5})
        writer.record_only("case_x", {"dice": None})
    assert writer.written == 6
    sizes = 0
    for i in range(6):
        data = (tmp_path / f"case_{i}.nii.gz").read_bytes()
        assert data == encode_nifti(_labels(i), AFFINE, 1)
        sizes += len(data)
        np.testing.assert_array_equal(read_nifti(tmp_path / f"case_{i}.nii.gz")[0], _labels(i))
        assert OutputManifest(tmp_path).completed(f"case_{i}").metrics == {"dice": 0.5}
    assert writer.bytes == sizes and writer.busy_s > 0
    assert OutputManifest.read_all(tmp_path)["case_x"].file is None
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_unencodable_array_reaches_close_with_the_file_named(tmp_path):
    writer = ResultWriter(tmp_path, OutputManifest(tmp_path), threads=1)
    writer.submit("bad", "bad.nii.gz", np.zeros((4, 4), np.uint8), AFFINE)
    with pytest.raises(WriteError, match=r"bad\.nii\.gz.*case 'bad'.*3D or 4D"):
        writer.close()
    with pytest.raises(WriteError):  # idempotent: the same answer again
        writer.close()
    assert not (tmp_path / "bad.nii.gz").exists()
    assert "bad" not in OutputManifest.read_all(tmp_path)


def test_earlier_failure_is_raised_by_the_next_submit(tmp_path):
    writer = ResultWriter(tmp_path, threads=1, queue_size=1)
    writer.submit("bad", "bad.nii.gz", np.zeros((2, 2, 2, 2, 2), np.uint8), AFFINE)
    with pytest.raises(WriteError, match=r"bad\.nii\.gz"):
        for i in range(20):  # queue_size 1: the failed write finishes before the second submit goes on
            writer.submit(f"c{i}", f"c{i}.nii.gz", _labels(i), AFFINE)
    with pytest.raises(WriteError):
        writer.close()


def test_folder_removed_mid_run_reaches_submit_or_close_with_the_file_named(tmp_path):
    out = tmp_path / "out"
    writer = ResultWriter(out, threads=1, queue_size=2)
    writer.submit("a", "a.nii.gz", _labels(0), AFFINE)
    time.sleep(0.2)
    os.rename(out, tmp_path / "moved")
    out.write_text("a file where the folder was")  # so the folder cannot be made again either
    with pytest.raises(WriteError, match=r"out/b\.nii\.gz"):
        writer.submit("b", "b.nii.gz", _labels(1), AFFINE)
        writer.close()


def test_body_error_waits_for_queued_writes_and_is_the_one_raised(tmp_path):
    writer = ResultWriter(tmp_path, OutputManifest(tmp_path), threads=1, queue_size=4)
    with pytest.raises(KeyError, match="body"), writer:
        for i in range(3):
            writer.submit(f"c{i}", f"c{i}.nii.gz", _labels(i, 48), AFFINE)
        raise KeyError("body")
    assert sorted(OutputManifest.read_all(tmp_path)) == ["c0", "c1", "c2"]


def test_queue_bounds_the_arrays_alive(tmp_path):
    queue_size, threads = 2, 1
    alive: list[weakref.ref] = []
    peak = 0
    with ResultWriter(tmp_path, threads=threads, queue_size=queue_size, compress_level=9) as writer:
        for i in range(8):
            # random floats at level 9: each write takes long enough that submit outruns the disk
            array = np.random.default_rng(i).random((64, 64, 64), dtype=np.float32)
            alive.append(weakref.ref(array))
            writer.submit(f"c{i}", f"c{i}.nii.gz", array, AFFINE)
            del array
            gc.collect()
            peak = max(peak, sum(r() is not None for r in alive))
    assert 2 <= peak <= queue_size + threads
    assert writer.wait_s > 0 and writer.written == 8
    gc.collect()
    assert not any(r() is not None for r in alive)


def test_default_threads_follow_the_cpu_budget(tmp_path, monkeypatch):
    monkeypatch.setenv("HPCR_CPUS", "1")
    writer = ResultWriter(tmp_path)
    assert writer.threads == 1
    writer.close()
    monkeypatch.setenv("HPCR_CPUS", "64")
    writer = ResultWriter(tmp_path)
    assert writer.threads <= 2
    writer.close()


KILLED_WRITER = """
import sys, numpy as np
from pathlib import Path
from hpc_runner.inference.writer import ResultWriter
array = np.random.default_rng(0).random((320, 320, 320), dtype=np.float32)  # 130 MB
with ResultWriter(Path(sys.argv[1]), threads=1, compress_level=0) as writer:
    print("writing", flush=True)
    for i in range(50):
        writer.submit(f"c{i}", f"c{i}.nii", array, np.eye(4))
"""


def test_killed_writer_leaves_no_final_named_partial_file(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    deadline = time.monotonic() + 60
    temps: list[Path] = []
    while not temps and time.monotonic() < deadline:  # kill it in the middle of a write
        temps = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert temps, "the writer never started a temp file"
    expected = len(encode_nifti(np.zeros((320, 320, 320), np.float32), np.eye(4), 0))
    for path in tmp_path.glob("*.nii"):  # writes that finished before the kill are whole
        assert path.stat().st_size == expected
    left = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert left and all(not p.name.endswith(".nii") for p in left)
    ResultWriter(tmp_path, threads=1).close()  # the next writer in the folder removes what the killed one left
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_writes_overlap_the_caller(tmp_path):
    # the caller keeps working while a pool thread writes: submit returns before the file exists
    array = np.random.default_rng(0).random((96, 96, 96), dtype=np.float32)
    with ResultWriter(tmp_path, threads=1, compress_level=9) as writer:
        writer.submit("c", "c.nii.gz", array, AFFINE)
        assert not (tmp_path / "c.nii.gz").exists()
        assert any(t.name.startswith("hpcr-writer") for t in threading.enumerate())
    assert (tmp_path / "c.nii.gz").exists()

"""Issue 46: the read bound for runs that read in place (hpc_runner/data/reads.py), loads counted per load, and
``stage clean: end`` (the last sweep task on a node removes its sweep's copy; data/staging.py), in-process."""

from __future__ import annotations

import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from hpc_runner.data import reads, staging
from hpc_runner.data.staging import StageSettings, prepare_run_data, record_io, record_loads


class SlowRead:
    """A file-reading transform (``reads_files``) that notes how many calls overlap."""

    reads_files = True

    def __init__(self) -> None:
        self.now = self.most = 0
        self.lock = threading.Lock()

    def __call__(self, path: str) -> str:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        time.sleep(0.02)
        with self.lock:
            self.now -= 1
        return path


@pytest.fixture(autouse=True)
def _no_policy():
    reads.configure(None)
    yield
    reads.configure(None)


def _files(folder: Path, n: int, size: int = 1000) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        (folder / f"f{i}.bin").write_bytes(b"x" * (size + i))
        out.append(str(folder / f"f{i}.bin"))
    return out


def test_in_place_loads_hold_a_read_slot_and_are_counted_per_load(tmp_path: Path) -> None:
    paths = _files(tmp_path / "shared", 8)
    reads.configure(reads.ReadPolicy(2, tmp_path / "slots"))
    (tmp_path / "slots").mkdir()
    t = SlowRead()
    with ThreadPoolExecutor(8) as pool:  # 8 transform threads, 2 read slots
        list(pool.map(lambda p: reads.call_reading(lambda: t(p), t, p), paths * 2))
    assert t.most == 2
    counts = reads.snapshot()
    size = sum(os.path.getsize(p) for p in paths)
    assert counts == {"loads": 16, "loaded_bytes": 2 * size, "shared_loads": 16, "shared_load_bytes": 2 * size}


def test_loads_of_a_staged_copy_are_local_neither_bounded_nor_shared(tmp_path: Path) -> None:
    paths = _files(tmp_path / "copy", 6)
    (tmp_path / "slots").mkdir()
    policy = reads.policy_for_run(StageSettings(read_slots=1), str(tmp_path / "slots"), [str(tmp_path / "copy")])
    reads.configure(policy)
    t = SlowRead()
    with ThreadPoolExecutor(6) as pool:
        list(pool.map(lambda p: reads.call_reading(lambda: t(p), t, p), paths))
    assert t.most > 1  # not bounded by the one slot
    counts = reads.snapshot()
    assert counts["loads"] == 6 and counts["shared_loads"] == 0 and counts["shared_load_bytes"] == 0


def test_a_loadimaged_call_counts_the_files_of_its_keys(tmp_path: Path) -> None:
    from monai.transforms import LoadImaged

    t = LoadImaged(keys=["image", "label"])
    item = {"image": str(tmp_path / "a.nii.gz"), "label": str(tmp_path / "b.nii.gz"), "other": "x"}
    assert reads.is_reader(t) and reads.paths_of(t, item) == [item["image"], item["label"]]
    assert reads.slots_from_env() == reads.DEFAULT_SLOTS


def test_the_bound_does_not_slow_a_local_run(tmp_path: Path) -> None:
    """A chain that loads small NIfTI volumes, with a generous read bound against none: within 1.5x (best of 3)."""
    import nibabel as nib
    import numpy as np
    from monai.transforms import Compose, EnsureChannelFirstd, LoadImaged, ScaleIntensityd

    from hpc_runner.data.transform_timing import timed

    items = []
    for i in range(24):
        path = tmp_path / f"v{i}.nii.gz"
        nib.save(nib.Nifti1Image(np.random.rand(16, 16, 16).astype("float32"), np.eye(4)), str(path))
        items.append({"image": str(path)})
    chain = timed(Compose([LoadImaged(keys="image"), EnsureChannelFirstd(keys="image"), ScaleIntensityd(keys="image")]))
    (tmp_path / "slots").mkdir()

    def epoch(policy: reads.ReadPolicy | None) -> float:
        reads.configure(policy)
        t0 = time.perf_counter()
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(chain, items))
        return time.perf_counter() - t0

    epoch(None)  # warm
    free = min(epoch(None) for _ in range(3))
    bounded = min(epoch(reads.ReadPolicy(64, tmp_path / "slots")) for _ in range(3))
    assert reads.snapshot()["loads"] == 24
    assert bounded <= 1.5 * free + 0.02, (bounded, free)


def _dataset(folder: Path) -> None:
    _files(folder, 3, 5000)


TASK = """import sys
from hpc_runner.data.staging import sweep_hold
with sweep_hold(sys.argv[1]):
    print("held", flush=True)
    sys.stdin.readline()
"""


def test_clean_end_waits_for_the_last_task_on_the_node_and_keeps_a_copy_still_read(tmp_path: Path,
                                                                                   monkeypatch) -> None:
    import subprocess
    import sys

    data = tmp_path / "shared" / "data"
    _dataset(data)
    root = tmp_path / "stage"
    monkeypatch.setenv(staging.ENV, StageSettings(where=str(root), clean="end").to_env())
    monkeypatch.delenv(staging.SWEEP_ENV, raising=False)
    cfg = {"dataset_dir": str(data)}
    sweep = tmp_path / "sweep"
    other = None
    try:
        with staging.sweep_hold(sweep) as key:  # task 1 of the sweep on this node
            assert key and os.environ[staging.SWEEP_ENV] == key
            first = prepare_run_data(cfg, staging.settings_from_env(), warn=lambda line: None)
            copy = Path(first.overrides["dataset_dir"])
            assert staging.clean_after_run(first) == []  # a point of a task leaves it to the task
            # task 2 (another process on the node) still runs a point when task 1 ends
            other = subprocess.Popen([sys.executable, "-c", TASK, str(sweep)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=dict(os.environ))
            assert other.stdout.readline().strip() == "held"
        assert copy.is_dir() and staging.SWEEP_ENV not in os.environ  # task 2 holds the sweep: kept
        with staging.in_use([str(copy)]):  # a run (of another sweep) reads the copy when task 2 ends
            other.communicate("\n", timeout=60)
            assert copy.is_dir()  # task 2 ended last, but a run still reads the copy: kept
    finally:
        if other is not None and other.poll() is None:
            other.kill()
            other.wait()


def test_clean_end_removes_the_copy_when_the_last_task_ends_and_nothing_reads_it(tmp_path: Path, monkeypatch) -> None:
    data = tmp_path / "shared" / "data"
    _dataset(data)
    root = tmp_path / "stage"
    monkeypatch.setenv(staging.ENV, StageSettings(where=str(root), clean="end").to_env())
    monkeypatch.delenv(staging.SWEEP_ENV, raising=False)
    cfg = {"dataset_dir": str(data)}
    with staging.sweep_hold(tmp_path / "sweep"):
        for _ in range(3):  # three points of one task: one copy, kept between them
            run = prepare_run_data(cfg, staging.settings_from_env(), warn=lambda line: None)
            with staging.in_use(list(run.overrides.values())):
                pass
            assert Path(run.overrides["dataset_dir"]).is_dir()
        with staging.sweep_hold(tmp_path / "sweep"):  # a nested task (in-process executor): leaves it to the outer
            pass
        assert Path(run.overrides["dataset_dir"]).is_dir()
    assert not Path(run.overrides["dataset_dir"]).exists()
    assert [p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")] == []


def test_clean_end_keeps_a_copy_another_running_sweep_marked(tmp_path: Path, monkeypatch) -> None:
    data = tmp_path / "shared" / "data"
    _dataset(data)
    root = tmp_path / "stage"
    monkeypatch.setenv(staging.ENV, StageSettings(where=str(root), clean="end").to_env())
    monkeypatch.delenv(staging.SWEEP_ENV, raising=False)
    cfg = {"dataset_dir": str(data)}
    held, release = threading.Event(), threading.Event()

    def sweep_b() -> None:
        with staging.sweep_hold(tmp_path / "b"):
            staging.mark_users(prepare_run_data(cfg, staging.settings_from_env(), environ={}, warn=print),
                               staging.sweep_key(tmp_path / "b"))
            held.set()
            release.wait(10)

    other = threading.Thread(target=sweep_b)
    with staging.sweep_hold(tmp_path / "a"):
        run = prepare_run_data(cfg, staging.settings_from_env(), warn=lambda line: None)
        other.start()
        held.wait(10)
    assert Path(run.overrides["dataset_dir"]).is_dir()  # sweep b still runs and uses the same copy
    release.set()
    other.join(10)


def test_a_run_on_its_own_with_clean_end_removes_its_copy(tmp_path: Path, monkeypatch) -> None:
    data = tmp_path / "shared" / "data"
    _dataset(data)
    monkeypatch.setenv(staging.ENV, StageSettings(where=str(tmp_path / "stage"), clean="end").to_env())
    monkeypatch.delenv(staging.SWEEP_ENV, raising=False)
    run = prepare_run_data({"dataset_dir": str(data)}, staging.settings_from_env(), warn=lambda line: None)
    copy = Path(run.overrides["dataset_dir"])
    with staging.in_use([str(copy)]):
        pass
    assert staging.clean_after_run(run) == [copy.name] and not copy.exists()


def test_measured_loads_replace_the_in_place_estimate_in_data_io(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _dataset(data)
    run = prepare_run_data({"dataset_dir": str(data)}, None)
    record_io(tmp_path, run, attempt=0)
    estimate = json.loads((tmp_path / "data_io.json").read_text())["shared_bytes"]
    assert estimate == staging.folder_bytes(data)
    for _ in range(2):  # two ranks on the node add theirs
        loads = {"loads": 4, "loaded_bytes": 20_000, "shared_loads": 4, "shared_load_bytes": 20_000}
        record_loads(tmp_path, run, loads, attempt=0)
    io = json.loads((tmp_path / "data_io.json").read_text())
    assert io["measured"] and io["shared_bytes"] == 40_000 and io["tasks"][0]["loads"] == 8
    assert record_loads(tmp_path, run, {"loads": 0}, attempt=0) is None  # nothing loaded here: left as it is


def test_clean_end_is_a_stage_setting() -> None:
    assert staging.parse_stage_settings({"clean": "end"}, "profile").clean == "end"

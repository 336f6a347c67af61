"""Staging once per node (hpc_runner/data/staging.py), with real processes and threads, against a real slowed and
counting shared folder (tests/slow_share.py) where FUSE is available. Two stage folders stand for two nodes."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from slow_share import mounted, read_bytes

from hpc_runner.data import staging
from hpc_runner.data.staging import (
    SourceChanged,
    StageSettings,
    check_fits_before_queueing,
    check_stage_root,
    parse_stage_settings,
    prepare_run_data,
    read_slot,
    record_io,
    stage_folder,
    staged_config,
)
from hpc_runner.errors import UserError

ROOT = Path(__file__).resolve().parents[2]


def make_dataset(folder: Path, n: int = 6, size: int = 200_000) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (folder / f"img{i:03d}.nii.gz").write_bytes(os.urandom(size))
    (folder / "synthetic.json").write_text('{"size": 16}')
    return n * size + len('{"size": 16}')


# one process holds several tasks (threads) at once, as a packed job does; importing torch 16 times on 2 cores
# would take the test's minute
CHILD = """import json, sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from hpc_runner.data.staging import StageSettings, stage_folder
def one(_):
    s = stage_folder(Path(sys.argv[1]), Path(sys.argv[2]), StageSettings(), warn=lambda line: None)
    return [s.read_from, s.copied_bytes]
with ThreadPoolExecutor(int(sys.argv[3])) as pool:
    print(json.dumps(list(pool.map(one, range(int(sys.argv[3]))))))
"""


def stage_in_processes(source: Path, roots: list[Path], tasks: int = 1) -> list[tuple[str, int]]:
    """Stage ``source`` from one new process per entry of ``roots``, each with ``tasks`` threads, all at once;
    return (read_from, copied) of each task."""
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(source), str(root), str(tasks)],
                              stdout=subprocess.PIPE, text=True, cwd=ROOT) for root in roots]
    out = []
    for p in procs:
        stdout, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        out += [tuple(r) for r in json.loads(stdout)]
    return out


def test_sixteen_points_on_two_nodes_read_the_shared_folder_twice_and_a_requeue_reads_nothing_more(tmp_path) -> None:
    size = make_dataset(tmp_path / "backing" / "ds")
    small = len('{"size": 16}')
    with mounted(tmp_path / "backing", tmp_path / "share") as share:
        results = stage_in_processes(share / "ds", [tmp_path / f"node{i % 2}" for i in range(4)], tasks=4)
        assert read_bytes(share) <= 2 * size + 16 * small  # each point hashes the small files to know the version
        assert sorted(copied for _, copied in results if copied) == [size, size]
        assert {Path(r).parent.name for r, _ in results} == {"node0", "node1"}
        before = read_bytes(share)
        (requeued,) = stage_in_processes(share / "ds", [tmp_path / "node1"])
        assert requeued[1] == 0 and read_bytes(share) - before <= small


def test_without_stage_every_point_reads_the_whole_dataset(tmp_path) -> None:
    size = make_dataset(tmp_path / "backing" / "ds", n=3)
    with mounted(tmp_path / "backing", tmp_path / "share") as share:
        for _ in range(4):
            for f in sorted((share / "ds").iterdir()):
                f.read_bytes()  # what a point's LoadImaged does with every file
        assert read_bytes(share) >= 4 * size


def _slow_copy(source: str, root: str) -> None:
    real = staging._copy_one

    def slow(src, dst, before):
        time.sleep(0.3)
        return real(src, dst, before)

    staging._copy_one = slow
    stage_folder(Path(source), Path(root), StageSettings(read_slots=1), warn=lambda line: None)


def test_a_copy_killed_half_way_is_never_read_and_the_next_task_copies_again(tmp_path) -> None:
    make_dataset(tmp_path / "ds", n=6)
    root = tmp_path / "stage"
    root.mkdir()
    child = multiprocessing.get_context("fork").Process(target=_slow_copy, args=(str(tmp_path / "ds"), str(root)))
    child.start()
    deadline = time.monotonic() + 20
    while not list(root.glob(".tmp-*/img000.nii.gz")) and time.monotonic() < deadline:
        time.sleep(0.02)
    child.kill()
    child.join()
    assert list(root.glob(".tmp-*")) and not [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]
    staged = stage_folder(tmp_path / "ds", root, StageSettings(), warn=lambda line: None)
    assert staged.copied_bytes > 0 and not list(root.glob(".tmp-*"))
    assert sorted(p.name for p in Path(staged.read_from).iterdir() if not p.name.startswith(".")) == sorted(
        p.name for p in (tmp_path / "ds").iterdir())


def test_a_changed_source_is_staged_again_even_a_small_file_whose_size_and_mtime_stay(tmp_path) -> None:
    make_dataset(tmp_path / "ds", n=2)
    root = tmp_path / "stage"
    first = stage_folder(tmp_path / "ds", root, StageSettings(), warn=print)
    params = tmp_path / "ds" / "synthetic.json"
    st = params.stat()
    params.write_text('{"size": 32}')  # same length
    os.utime(params, ns=(st.st_atime_ns, st.st_mtime_ns))
    second = stage_folder(tmp_path / "ds", root, StageSettings(), warn=print)
    assert second.read_from != first.read_from and second.copied_bytes > 0
    assert (Path(second.read_from) / "synthetic.json").read_text() == '{"size": 32}'
    assert Path(first.read_from).is_dir()  # two versions on one node: each its own folder


def test_a_source_that_changes_during_the_copy_is_refused_and_nothing_is_left(tmp_path, monkeypatch) -> None:
    make_dataset(tmp_path / "ds", n=2)
    real = staging.open_regular

    def open_then_grow(path, what, **kw):
        fd = real(path, what, **kw)
        with open(path, "ab") as f:
            f.write(b"more")  # another job writes the dataset meanwhile
        return fd

    monkeypatch.setattr(staging, "open_regular", open_then_grow)
    with pytest.raises(SourceChanged, match="changed while it was staged"):
        stage_folder(tmp_path / "ds", tmp_path / "stage", StageSettings(), warn=print)
    assert not list((tmp_path / "stage").iterdir()) or all(p.name.startswith((".", "read-slot"))
                                                           and p.is_file() for p in (tmp_path / "stage").iterdir())


def test_a_stage_folder_that_is_a_link_or_cannot_be_made_is_bad_input(tmp_path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(UserError, match="symbolic link"):
        check_stage_root(tmp_path / "link")
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="cannot make the stage folder"):
        check_stage_root(tmp_path / "file" / "stage")


def test_no_room_on_the_node_reads_in_place_with_one_warning(tmp_path) -> None:
    make_dataset(tmp_path / "ds", n=2)
    lines: list[str] = []
    staged = stage_folder(tmp_path / "ds", tmp_path / "stage", StageSettings(max_gb=0.0001), warn=lines.append)
    assert staged.read_from == str(tmp_path / "ds") and staged.copied_bytes == 0
    assert len(lines) == 1 and "reads it in place" in lines[0]


def test_a_dataset_over_the_nodes_stated_scratch_is_refused_before_queueing(tmp_path) -> None:
    make_dataset(tmp_path / "ds", n=2)
    with pytest.raises(UserError, match="nothing was queued"):
        check_fits_before_queueing({"dataset_dir": str(tmp_path / "ds")}, StageSettings(node_gb=0.0001), "profile")
    assert check_fits_before_queueing({"dataset_dir": str(tmp_path / "ds")}, StageSettings(max_gb=0.0001), "x") > 0


def test_the_least_recently_used_copy_not_in_use_goes_first_under_the_cap(tmp_path) -> None:
    size = make_dataset(tmp_path / "a", n=2, size=300_000)
    make_dataset(tmp_path / "b", n=2, size=300_000)
    make_dataset(tmp_path / "c", n=2, size=300_000)
    root = tmp_path / "stage"
    cap = StageSettings(max_gb=2.5 * size / staging.GB)
    a = stage_folder(tmp_path / "a", root, cap, warn=print)
    time.sleep(0.05)
    b = stage_folder(tmp_path / "b", root, cap, warn=print)
    with staging.in_use([b.read_from]):
        time.sleep(0.05)
        os.utime(Path(b.read_from) / staging.LAST_USED, (1, 1))  # b is the oldest, but a run reads it
        c = stage_folder(tmp_path / "c", root, cap, warn=print)
    assert not Path(a.read_from).exists() and Path(b.read_from).is_dir() and Path(c.read_from).is_dir()


def test_a_node_reads_shared_storage_with_at_most_its_read_slots(tmp_path) -> None:
    busy, most = [0], [0]
    lock = threading.Lock()

    def reader() -> None:
        with read_slot(tmp_path, 3):
            with lock:
                busy[0] += 1
                most[0] = max(most[0], busy[0])
            time.sleep(0.05)
            with lock:
                busy[0] -= 1

    threads = [threading.Thread(target=reader) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == 3


def test_the_run_reads_the_copy_through_an_override_and_records_where(tmp_path, monkeypatch) -> None:
    make_dataset(tmp_path / "ds", n=2)
    expanded = {"dataset_dir": str(tmp_path / "ds"), "train": {"dir": "@dataset_dir"}, "cache_dir": None}
    settings = StageSettings(where=str(tmp_path / "stage-{node}"))
    data = prepare_run_data(expanded, settings, environ={"SLURMD_NODENAME": "x"}, warn=print)
    reading = staged_config(expanded, data)
    assert reading["dataset_dir"].startswith(str(tmp_path / "stage-")) and reading["train"] == {"dir": "@dataset_dir"}
    assert expanded["dataset_dir"] == str(tmp_path / "ds")  # the recorded config is untouched
    assert data.record()["staged"] is True
    record = record_io(tmp_path, data, attempt=0)
    again = prepare_run_data(expanded, settings, environ={"SLURMD_NODENAME": "x"}, warn=print)
    record = record_io(tmp_path, again, attempt=1)
    assert record["tasks"][1]["copied_bytes"] == 0 and record["shared_bytes"] == data.shared_bytes + again.shared_bytes


@pytest.mark.parametrize("raw, message", [
    ({"where": "relative/dir"}, "relative"), ({"max_gb": "nan"}, "not a number"), ({"max_gb": "1e9"}, "not a number"),
    ({"clean": "sometimes"}, "cleaning policy"), ({"read_slots": "0"}, "whole number"), ({"colour": 1}, "unknown"),
    ({"read_slots": "٣"}, "whole number"), (["x"], "not a mapping"),
])
def test_bad_stage_settings_are_one_paragraph_of_bad_input(raw, message) -> None:
    with pytest.raises(UserError, match=message):
        parse_stage_settings(raw, "profile.yaml")

"""Atomic writes survive a writer killed mid-file: the target stays whole, its temp file is swept later."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hpc_runner.records import atomic
from hpc_runner.records.atomic import remove_stale_temp_files, write_text_atomic

# A writer that stops half-way through a file and waits: the test kills it there (or lets it finish).
WRITER = """
import sys
from hpc_runner.records.atomic import atomic_open
with atomic_open(sys.argv[1]) as f:
    f.write("new-first-half ")
    f.flush()
    print("half", flush=True)
    sys.stdin.readline()
    f.write("new-second-half")
"""


def start_writer(target: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(target)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "half\n"  # an event, not a sleep: the writer is mid-file now
    return proc


def temp_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_a_writer_killed_mid_file_leaves_the_old_file_whole_and_its_temp_is_swept(tmp_path: Path):
    target = tmp_path / "summary.json"
    write_text_atomic(target, "old")
    killed = start_writer(target)
    killed.send_signal(signal.SIGKILL)
    killed.wait(30)
    assert target.read_text() == "old"  # never half of the new file
    (left,) = temp_files(tmp_path)
    assert f".{killed.pid}." in left
    live = start_writer(tmp_path / "other.json")  # a writer that is still at work in the same folder
    try:
        # a new process's first write into the folder removes the killed writer's temp file only
        code = f"from hpc_runner.records.atomic import write_text_atomic; write_text_atomic({str(target)!r}, 'next')"
        subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
        assert target.read_text() == "next"
        assert left not in temp_files(tmp_path) and len(temp_files(tmp_path)) == 1
    finally:
        live.communicate("go\n", timeout=30)
    assert (tmp_path / "other.json").read_text() == "new-first-half new-second-half"
    assert temp_files(tmp_path) == []


def test_temp_files_of_other_tools_or_other_hosts_are_left_alone(tmp_path: Path):
    mine_dead = tmp_path / f".a.json.{atomic._HOST}.999999999.abcdefgh.tmp"  # a pid no process has
    other_host = tmp_path / ".a.json.some-other-node.123.abcdefgh.tmp"
    not_ours = tmp_path / ".editor-swap.tmp"
    for p in (mine_dead, other_host, not_ours):
        p.write_text("x")
    assert remove_stale_temp_files(tmp_path) == [mine_dead]
    os.utime(other_host, (0, 0))  # a day old: its writer on the other node is long gone
    assert remove_stale_temp_files(tmp_path) == [other_host]
    assert not_ours.exists()


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names open files through /proc (Linux)")
def test_the_folder_is_fsynced_after_the_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Without an fsync of the folder, a crash after the rename can bring back the old file."""
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src, dst) -> None:
        real_replace(src, dst)
        events.append(("replace", str(dst)))

    monkeypatch.setattr(os, "fsync", fsync)  # the real calls still happen; we only see their order
    monkeypatch.setattr(os, "replace", replace)
    target = tmp_path / "run.yaml"
    write_text_atomic(target, "status: done\n")
    assert [kind for kind, _ in events] == ["fsync", "replace", "fsync"]
    assert events[1] == ("replace", str(target)) and events[2] == ("fsync", str(tmp_path))

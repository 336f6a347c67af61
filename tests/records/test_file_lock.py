"""The sweep lock holds across processes (and nodes): POSIX locks, or a lease file where those are node-local."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import socket
import time
from pathlib import Path

import pytest

from hpc_runner.records import file_lock
from hpc_runner.records.file_lock import LockTimeout, exclusive, lease_path, lock_method, parse_mounts

MOUNTS = """\
/dev/vda1 / ext4 rw,relatime 0 0
nfs1:/home /home nfs4 rw,relatime,vers=4.2,local_lock=none,addr=10.0.0.1 0 0
nfs2:/scratch /scratch nfs rw,nolock,vers=3,addr=10.0.0.2 0 0
nfs3:/work /work/group nfs4 rw,local_lock=all,addr=10.0.0.3 0 0
nfs4:/proj /proj nfs4 rw,local_lock=flock,addr=10.0.0.4 0 0
10.0.0.5@tcp:/lus /lustre lustre rw,localflock 0 0
10.0.0.6@tcp:/lus2 /lustre2 lustre rw,noflock 0 0
10.0.0.7@tcp:/lus3 /lustre3 lustre rw,flock 0 0
beegfs_nodev /beegfs beegfs rw,cfgFile=/etc/beegfs/beegfs-client.conf 0 0
/dev/sdb1 /data\\040disk xfs rw 0 0
"""


@pytest.mark.parametrize(
    ("folder", "method", "why"),
    [
        ("/home/u/sweep", "posix", "nfs4"),  # NFSv4 locks go through the server
        ("/scratch/u/sweep", "lease", "nolock"),
        ("/work/group/u", "lease", "local_lock=all"),
        ("/proj/x", "posix", "nfs4"),  # local_lock=flock leaves POSIX locks to the server
        ("/lustre/u", "lease", "localflock"),
        ("/lustre2/u", "lease", "noflock"),
        ("/lustre3/u", "posix", "lustre"),
        ("/beegfs/u", "lease", "BeeGFS"),
        ("/data disk/u", "posix", "xfs"),  # \040 in the mount table is a space
        ("/tmp/u", "posix", "ext4"),
    ],
)
def test_the_lock_method_follows_the_mount_options(folder, method, why):
    got, reason = lock_method(Path(folder), parse_mounts(MOUNTS), environ={})
    assert (got, why in reason) == (method, True), reason


def test_hpcr_lock_forces_a_method():
    assert lock_method(Path("/home/u"), parse_mounts(MOUNTS), environ={"HPCR_LOCK": "lease"})[0] == "lease"
    assert lock_method(Path("/scratch/u"), parse_mounts(MOUNTS), environ={"HPCR_LOCK": "posix"})[0] == "posix"


def test_a_misspelt_hpcr_lock_is_refused_naming_it_and_the_values_it_takes(tmp_path, monkeypatch, capsys):
    """Issue 32: HPCR_LOCK=flock was silently ignored (the mount table chose); it is bad input now, in the lock
    itself (a job) and before any command writes anything."""
    from hpc_runner.cli import main
    from hpc_runner.errors import UserError

    with pytest.raises(UserError, match=r"HPCR_LOCK='flock' in the environment.*one of: posix, lease"):
        lock_method(Path("/home/u"), parse_mounts(MOUNTS), environ={"HPCR_LOCK": "flock"})
    assert lock_method(Path("/home/u"), parse_mounts(MOUNTS), environ={"HPCR_LOCK": " Lease "})[0] == "lease"
    sweep = tmp_path / "sweep"
    monkeypatch.setenv("HPCR_LOCK", "flock")
    assert main(["sweep", "--bundle", "nowhere", "--cluster", "local", "--output_dir", str(sweep),
                 "--sweep", "lr=1,2", "--no-preflight"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "HPCR_LOCK='flock'" in err and "posix, lease" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["HPCR_TENSORBOARD", "HPCR_TRANSFORM_TIMING", "HPCR_FAKE_GPUS", "HPCR_GPU_TRANSFORMS"])
def test_the_other_fixed_set_settings_refuse_a_value_they_do_not_take(name, monkeypatch, capsys):
    from hpc_runner.cli import main
    from hpc_runner.errors import UserError
    from hpc_runner.records.environment import switch

    assert switch(name, True, {name: "OFF"}) is False and switch(name, False, {name: "yes"}) is True
    assert switch(name, True, {}) is True and switch(name, False, {name: ""}) is False
    with pytest.raises(UserError, match=f"{name}='of'.*0, false, no, off"):
        switch(name, True, {name: "of"})
    monkeypatch.setenv(name, "of")
    assert main(["status", "nowhere"]) == 2
    assert f"{name}='of' in the environment is not a value it takes" in capsys.readouterr().err


def _count(folder: str, rounds: int, method: str) -> None:
    """Read-modify-write a counter file under the lock ``rounds`` times (a lost update would show)."""
    os.environ["HPCR_LOCK"] = method
    counter = Path(folder) / "counter.json"
    for _ in range(rounds):
        with exclusive(Path(folder) / "sweep.lock", timeout=60):
            n = json.loads(counter.read_text())["n"] if counter.exists() else 0
            time.sleep(0.001)  # widen the window a missing lock would lose an update in
            tmp = counter.with_suffix(".tmp")
            tmp.write_text(json.dumps({"n": n + 1}))
            os.replace(tmp, counter)


@pytest.mark.parametrize("method", ["posix", "lease"])
def test_no_update_is_lost_between_processes(tmp_path: Path, method: str):
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=_count, args=(str(tmp_path), 40, method)) for _ in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    assert [w.exitcode for w in workers] == [0, 0, 0]
    assert json.loads((tmp_path / "counter.json").read_text())["n"] == 120
    assert not lease_path(tmp_path / "sweep.lock").exists()  # released


def test_a_lease_left_by_a_dead_process_on_this_host_is_taken_at_once(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("HPCR_LOCK", "lease")
    ctx = multiprocessing.get_context("spawn")
    dead = ctx.Process(target=time.sleep, args=(0,))
    dead.start()
    dead.join()
    lease_path(tmp_path / "sweep.lock").write_text(json.dumps(
        {"host": socket.gethostname(), "pid": dead.pid, "token": "old", "expires": time.time() + 3600}))
    t0 = time.monotonic()
    with exclusive(tmp_path / "sweep.lock", timeout=5):
        assert json.loads(lease_path(tmp_path / "sweep.lock").read_text())["pid"] == os.getpid()
    assert time.monotonic() - t0 < 2


def test_a_lease_of_another_node_is_taken_only_long_after_it_expired(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("HPCR_LOCK", "lease")
    lease = lease_path(tmp_path / "sweep.lock")
    lease.write_text(json.dumps({"host": "node-that-died", "pid": 1, "token": "x", "expires": time.time() + 60}))
    with pytest.raises(LockTimeout, match="has held"), exclusive(tmp_path / "sweep.lock", timeout=0.3):
        pass  # a live lease of another node is respected
    lease.write_text(json.dumps({"host": "node-that-died", "pid": 1, "token": "x",
                                 "expires": time.time() - file_lock.STALE_S - 1}))
    with exclusive(tmp_path / "sweep.lock", timeout=5):
        assert json.loads(lease.read_text())["host"] == socket.gethostname()


def test_a_filesystem_without_posix_locks_falls_back_to_the_lease_and_says_so(tmp_path: Path, monkeypatch, capsys):
    monkeypatch.setenv("HPCR_LOCK", "posix")

    def no_locks(*args, **kwargs):  # what Lustre mounted noflock answers
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))

    monkeypatch.setattr(file_lock.fcntl, "lockf", no_locks)
    file_lock._said.clear()
    with exclusive(tmp_path / "sweep.lock", timeout=5):
        assert lease_path(tmp_path / "sweep.lock").exists()
    assert "refuses POSIX locks" in capsys.readouterr().err
    assert not lease_path(tmp_path / "sweep.lock").exists()


def test_the_lock_is_reentrant_in_one_thread(tmp_path: Path):
    with exclusive(tmp_path / "sweep.lock", timeout=5), exclusive(tmp_path / "sweep.lock", timeout=1):
        pass


def _stamp(folder: str, key: str, rounds: int) -> None:
    from hpc_runner.records.rundir import RunDir

    for n in range(rounds):
        RunDir(folder).update_record(**{f"{key}{n}": n})


def test_two_processes_writing_run_yaml_lose_no_field(tmp_path: Path):
    """The job writes its status while `cancel` on the login node writes `cancelled`: both stay."""
    from hpc_runner.records.rundir import RunDir

    ctx = multiprocessing.get_context("spawn")
    writers = [ctx.Process(target=_stamp, args=(str(tmp_path), key, 30)) for key in ("job", "cancel")]
    for w in writers:
        w.start()
    for w in writers:
        w.join(120)
    record = RunDir(tmp_path).record()
    assert {f"job{n}" for n in range(30)} | {f"cancel{n}" for n in range(30)} <= set(record)

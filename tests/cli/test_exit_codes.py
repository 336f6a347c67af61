"""Exit codes as documented (issue 32): a dir this user may not write is bad input (2, one paragraph naming the
path, no traceback), not "a run failed" (1, with a PermissionError traceback as before); Ctrl-C is 130, in
the CLI's epilog and the README's list.

Root writes through any mode bits (CAP_DAC_OVERRIDE), and the tests run as root here: the commands then run in a
process that dropped those capabilities from its bounding set before it started (prctl PR_CAPBSET_DROP, what
``setpriv --bounding-set -dac_override`` does), so a chmod'ed dir refuses them as it refuses any user. Where that
cannot be done (no CAP_SETPCAP) the test of the mapping alone still runs, with an OSError the kernel raised."""

from __future__ import annotations

import ctypes
import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpc_runner.cli import EPILOG, filesystem_refusal, main
from hpc_runner.sweep import ledger as sr
from tests.sweep.test_governor import _sweep

ROOT = Path(__file__).resolve().parents[2]
PR_CAPBSET_DROP, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 24, 1, 2
LOCAL = {"profile": "local", "settings": {"executor": "local"}}


def _drop_file_override() -> None:
    """In the child, before exec: no capability to write or read past mode bits (root becomes an ordinary owner)."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) refused")


def as_ordinary_user(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI as the user runs it, mode bits enforced even for root; skip where that cannot be arranged."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "hpc_runner", *args]
    if os.geteuid() != 0:
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    try:
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120,
                              preexec_fn=_drop_file_override)
    except subprocess.SubprocessError as exc:  # the child could not drop them: mode bits cannot be enforced here
        pytest.skip(f"root without CAP_SETPCAP: a chmod'ed dir cannot refuse a write here ({exc})")


def read_only_sweep(tmp_path: Path) -> Path:
    """A sweep dir of two points run here (the local executor: no scheduler to ask), made read-only."""
    folder = _sweep(tmp_path / "sw", 2)
    with sr.locked(folder) as ledger:
        ledger.data["cluster"] = LOCAL
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o555 if path.is_dir() else 0o444)
    return folder


@pytest.mark.parametrize("command", ["collect", "report"])
def test_collect_and_report_of_a_dir_this_user_may_not_write_exit_2_naming_it(tmp_path: Path, command: str) -> None:
    folder = read_only_sweep(tmp_path)
    try:
        res = as_ordinary_user(command, str(folder))
    finally:
        for path in [folder, *folder.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert f"hpc-runner {command}: error: {folder}: this user may not write" in res.stderr, res.stderr
    assert not list(folder.glob("report.html")) and not list(folder.glob(sr.RESULTS_CSV))


def test_a_permission_error_the_kernel_raised_maps_to_one_paragraph(tmp_path: Path, capsys) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError) as caught:  # a refusal even root gets: a path inside a file
        open(tmp_path / "file" / "results.csv", "w")  # noqa: SIM115
    assert filesystem_refusal(caught.value) is None  # not the filesystem saying no: a traceback, as any bug
    refused = PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(tmp_path / "file"))
    text = filesystem_refusal(refused)  # a file there that may not be read or written: named itself
    assert text is not None and text.startswith(f"{tmp_path / 'file'}: this user may not write or read there "
                                                "(Permission denied)")
    assert "collect --out DIR" in text and "\n" not in text
    made = filesystem_refusal(PermissionError(errno.EACCES, "Permission denied", str(tmp_path / ".x.tmp")))
    assert made is not None and made.startswith(f"{tmp_path}: this user")  # one that could not be made: its folder
    assert filesystem_refusal(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/x")).startswith("/x: the filesystem")


def test_ctrl_c_is_130_and_documented(monkeypatch, capsys, tmp_path: Path) -> None:
    import hpc_runner.cli.status as status

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(status, "main", interrupted)
    assert main(["status", str(tmp_path)]) == 130
    assert capsys.readouterr().err == "hpc-runner status: interrupted\n"
    assert "130 interrupted (Ctrl-C)" in EPILOG
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "130 interrupted (Ctrl-C)" in " ".join(readme.split())

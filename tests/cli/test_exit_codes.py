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
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hpc_runner.cli import EPILOG, filesystem_refusal, main
from hpc_runner.jobs import ledger as sr
from tests.jobs.test_governor import _sweep

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


def _one_paragraph(err: str, command: str) -> str:
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"hpc-runner {command}: error: "), err
    return lines[0]


@pytest.mark.parametrize("argv", [
    ["status", "{long}"], ["report", "{long}"], ["collect", "{sweep}", "--out", "{long}"],
    ["init", "{name}", "--to", "{tmp}"], ["pack", "{long}"], ["tracking", "send", "{long}"],
])
def test_a_path_the_filesystem_cannot_take_is_one_paragraph_whichever_command_meets_it(
        tmp_path: Path, capsys, argv: list[str]) -> None:
    """ENAMETOOLONG (a name over 255 bytes) from any call of any command: exit 2 naming the path, no traceback."""
    long = tmp_path / ("x" * 300)
    sweep = _sweep(tmp_path / "sw")
    words = {"{long}": str(long), "{sweep}": str(sweep), "{name}": "x" * 300, "{tmp}": str(tmp_path / "to")}
    code = main([words.get(a, a) for a in argv])
    err = capsys.readouterr().err
    assert code == 2, err
    _one_paragraph(err, argv[0])
    assert re.search(r"x{20,}\.\.\.\(\d{3} characters\)", err), err  # the path named, a long name by start and length


def test_the_filesystem_refusals_of_a_path_map_to_one_paragraph(tmp_path: Path) -> None:
    with pytest.raises(OSError) as too_long:
        os.stat(tmp_path / ("y" * 300))
    text = filesystem_refusal(too_long.value)
    assert text is not None and "too long for the filesystem" in text and "\n" not in text
    assert text.startswith(f"{tmp_path / ('y' * 32)}...(300 characters): ")  # shortened, not 300 y's
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    with pytest.raises(OSError) as loop:
        open(tmp_path / "loop")  # noqa: SIM115
    text = filesystem_refusal(loop.value)
    assert text is not None and text.startswith(f"{tmp_path / 'loop'}: the path cannot be followed")


@pytest.mark.parametrize("argv", [
    ["init_bundle", "nb", "--metadata_str", "\udcff"],  # would be written to a file
    ["run", "--bundle", "bundles/synthetic_seg", "--output_dir", "caf\udce9"],  # would be a folder and a log line
    ["status", "a\udc80b"],
    ["status", "\udcc3\udc28"],  # a lone surrogate no command line makes (0x28 is ASCII), passed to main() itself
])
def test_an_argument_that_is_not_utf8_is_refused_before_any_command_runs(tmp_path: Path, monkeypatch, capsys,
                                                                         argv: list[str]) -> None:
    monkeypatch.chdir(tmp_path)
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    line = _one_paragraph(err, argv[0])
    position = next(i for i, a in enumerate(argv, 1) if "\\udc" in ascii(a))
    assert f"argument {position} (" in line and "is not UTF-8 text" in line
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_a_non_utf8_argument_through_the_real_entry_point_exits_2(tmp_path: Path) -> None:
    """As a shell passes it: the raw byte 0xff, which Python's argv holds as a lone surrogate."""
    res = subprocess.run([os.fsencode(sys.executable), b"-m", b"hpc_runner", b"init_bundle", b"nb",
                          b"--metadata_str", b"\xff"], cwd=tmp_path, capture_output=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    err = res.stderr.decode("utf-8", "replace")
    assert res.returncode == 2, err
    assert "argument 4 (" in _one_paragraph(err, "init_bundle") and not (tmp_path / "nb").exists()

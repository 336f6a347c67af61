"""The fuzz harness catches what it says it catches: a write in HOME or beside the working folder, an exit code
outside the contract, a traceback, a call past its deadline or its memory cap."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tests.fuzz.harness import Case, Overrun, bounded


@pytest.fixture
def case(tmp_path: Path) -> Case:
    made = Case(tmp_path / "case", {})
    made.root.mkdir()
    made.setup()
    return made


def _violations(case: Case, capfd, call) -> list[str]:
    with pytest.MonkeyPatch.context() as mp, case.world(mp):
        before = case.snapshot()
        return case.violations(case.call(call, capfd), before)


def test_a_clean_call_keeps_the_contract(case: Case, capfd) -> None:
    def clean() -> int:
        Path("out.txt").write_text("in the working folder")  # cwd is work/
        (Path.home() / ".cache/hpc-runner").mkdir(parents=True, exist_ok=True)
        (Path.home() / ".cache/hpc-runner/x.json").write_text("{}")
        return 0

    assert _violations(case, capfd, clean) == []


@pytest.mark.parametrize("where", ["~/.ssh/id_x", "~/.config/hpc-runner/clusters/new.yaml", "../beside", "~/.bashrc"])
def test_a_write_outside_the_allowed_folders_is_found(case: Case, capfd, where: str) -> None:
    def writes() -> int:
        path = Path(where.replace("~", str(Path.home())))
        path.write_text("written")
        return 0

    found = _violations(case, capfd, writes)
    assert any("wrote outside the allowed folders" in f for f in found), found


def test_a_command_a_value_ran_is_found_and_a_folder_named_after_it_is_not(case: Case, capfd) -> None:
    import subprocess

    def named() -> int:  # `init --to '$(touch PWNED)'`: a folder of that name is what was asked for
        Path("$(touch PWNED)").mkdir()
        return 0

    def ran() -> int:  # the same value spliced into a shell's code
        subprocess.run("mkdir -p sub && cd sub && echo $(touch PWNED)", shell=True, check=True)
        return 0

    assert _violations(case, capfd, named) == []
    found = _violations(case, capfd, ran)
    assert any("a command in a value ran: ['work/sub/PWNED']" in f for f in found), found


def test_an_odd_exit_code_a_traceback_and_two_error_paragraphs_are_found(case: Case, capfd) -> None:
    def bad() -> int:
        print("Traceback (most recent call last):", file=sys.stderr)
        print("hpc-runner x: error: one\nhpc-runner x: error: two", file=sys.stderr)
        return 2

    found = _violations(case, capfd, bad)
    assert any("traceback" in f for f in found) and any("2 error paragraphs" in f for f in found), found
    assert any("exit code 3" in f for f in _violations(case, capfd, lambda: 3))


def test_an_exception_out_of_main_is_found(case: Case, capfd) -> None:
    def raises() -> int:
        raise RecursionError("deep")

    assert any("raised RecursionError" in f for f in _violations(case, capfd, raises))


def test_a_call_past_its_deadline_or_its_memory_cap_is_interrupted() -> None:
    start = time.monotonic()
    with pytest.raises(Overrun, match="still running"), bounded(deadline_s=0.3):
        time.sleep(5)
    assert time.monotonic() - start < 2
    with pytest.raises(Overrun, match="resident memory"), bounded(deadline_s=10, memory_mb=100):
        block = bytearray(400 << 20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        time.sleep(2)
    del block



def test_a_peak_between_two_samples_is_caught_after_the_call() -> None:
    """An allocation made and freed within one sampling interval shows in the kernel's peak (VmHWM)."""
    with pytest.raises(Overrun, match="resident memory"), bounded(deadline_s=10, memory_mb=100):
        block = bytearray(400 << 20)
        block[:: 4096] = b"\x01" * len(block[:: 4096])
        del block

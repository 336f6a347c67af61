"""The run's log tee: a logging handler that kept it after the run still writes (to the terminal only)."""

from __future__ import annotations

import io
import logging
import sys
from pathlib import Path

from hpc_runner.records.logtee import tee_to_log


def test_a_handler_made_during_the_run_still_writes_after_the_log_is_closed(tmp_path: Path, monkeypatch) -> None:
    terminal = io.StringIO()
    monkeypatch.setattr(sys, "stdout", terminal)
    kept = logging.getLogger("a_library_of_the_bundle")
    with tee_to_log(tmp_path / "log.txt"):
        handler = logging.StreamHandler(sys.stdout)  # as ignite's setup_logger takes sys.stdout: the tee
        kept.addHandler(handler)
        kept.warning("during")
    try:
        kept.warning("after")  # before the fix: "--- Logging error --- ValueError: I/O operation on closed file"
        handler.flush()
    finally:
        kept.removeHandler(handler)
    assert terminal.getvalue().splitlines() == ["during", "after"]
    assert (tmp_path / "log.txt").read_text().splitlines() == ["during"]  # the run's log holds the run only

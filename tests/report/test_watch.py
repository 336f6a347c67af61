"""The live view of a sweep: the state table redrawn and a bar of finished points until all are final."""

from __future__ import annotations

import io
import shutil
import threading
import time
from pathlib import Path

import pytest
import yaml

from hpc_runner.report.watch import watch_status

pytestmark = pytest.mark.slow


def test_watch_returns_at_once_when_every_point_is_final(local_sweep: Path) -> None:
    out = io.StringIO()
    result = watch_status(local_sweep, 0.1, stream=out)
    assert result.finished and result.polls == 1 and not result.interrupted
    text = out.getvalue()
    assert "COMPLETED 4" in text and "4/4" in text
    assert "\x1b[H" not in text  # not a terminal: no screen clearing


def test_watch_follows_a_point_until_it_finishes(local_sweep: Path, tmp_path: Path) -> None:
    sweep = Path(shutil.copytree(local_sweep, tmp_path / "sw"))
    run_yaml = sweep / "points" / "0003" / "run.yaml"
    record = yaml.safe_load(run_yaml.read_text())
    run_yaml.write_text(yaml.safe_dump({**record, "status": "running"}))

    def finish_later() -> None:
        time.sleep(1.5)
        run_yaml.write_text(yaml.safe_dump(record))

    worker = threading.Thread(target=finish_later)
    worker.start()
    out = io.StringIO()
    try:
        result = watch_status(sweep, 0.2, stream=out)
    finally:
        worker.join()
    assert result.finished and result.polls >= 2
    assert [s.state for s in result.states] == ["COMPLETED"] * 4
    text = out.getvalue()
    assert text.index("RUNNING") < text.rindex("COMPLETED 4")
    assert "3/4" in text and "4/4" in text


def test_watch_stops_after_max_polls_while_points_are_pending(local_sweep: Path, tmp_path: Path) -> None:
    sweep = Path(shutil.copytree(local_sweep, tmp_path / "sw"))
    run_yaml = sweep / "points" / "0001" / "run.yaml"
    run_yaml.write_text(yaml.safe_dump({**yaml.safe_load(run_yaml.read_text()), "status": "running"}))
    result = watch_status(sweep, 0.05, stream=io.StringIO(), max_polls=3)
    assert not result.finished and result.polls == 3
    started = time.monotonic()
    result = watch_status(sweep, 0.1, stream=io.StringIO(), timeout=0.5)
    assert not result.finished and result.polls >= 2 and time.monotonic() - started < 5

"""The background sender: training never waits for the network, nothing is lost silently."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from hpc_runner.tracking.background import BackgroundSender


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_put_never_waits_for_a_slow_server_and_close_keeps_what_it_could_not_send(tmp_path: Path) -> None:
    release = threading.Event()
    got: list[dict] = []

    def slow_send(batch: list[dict]) -> None:
        release.wait(5)  # a server that hangs
        got.extend(batch)

    sender = BackgroundSender(slow_send, tmp_path / "unsent.jsonl", capacity=1000, batch=10)
    t0 = time.perf_counter()
    for i in range(5000):
        sender.put({"kind": "metric", "key": "loss", "value": float(i), "step": i, "timestamp": 0})
    # 5000 records queued while the first send hangs (5 s): far less than one hung send, on a busy machine too
    assert time.perf_counter() - t0 < 2.5
    stats = sender.close(timeout=0.2)
    release.set()
    kept = _lines(tmp_path / "unsent.jsonl")
    # the oldest went to the file when the queue was full (the thread held 1 to 10 in flight)
    assert 5000 - 1000 - 10 <= stats["overflow"] <= 5000 - 1000 - 1
    # every record is either sent or in the file: the file has all but the in-flight batch, which is kept too
    assert sorted(r["step"] for r in kept) == list(range(5000))
    assert stats["unsent"] == 5000 and stats["sent"] == 0


def test_a_failing_server_goes_offline_and_its_records_are_kept_in_order(tmp_path: Path) -> None:
    calls = []

    def refuse(batch: list[dict]) -> None:
        calls.append(len(batch))
        raise ConnectionError("connection refused")

    sender = BackgroundSender(refuse, tmp_path / "unsent.jsonl", batch=100, retry_after_s=60)
    for i in range(300):
        sender.put({"kind": "metric", "key": "loss", "value": 1.0, "step": i, "timestamp": 0})
    t0 = time.perf_counter()
    stats = sender.close(timeout=5)
    assert time.perf_counter() - t0 < 1.0  # offline: close does not wait for the server again
    assert len(calls) == 1  # one failed try, then offline for retry_after_s
    assert [r["step"] for r in _lines(tmp_path / "unsent.jsonl")] == list(range(300))
    assert stats["failed_sends"] == 1 and stats["unsent"] == 300
    assert "connection refused" in (sender.last_error or "")


def test_a_working_server_gets_everything_and_no_file_is_written(tmp_path: Path) -> None:
    got: list[dict] = []
    sender = BackgroundSender(got.extend, tmp_path / "unsent.jsonl", batch=7)
    for i in range(100):
        sender.put({"step": i})
    stats = sender.close(timeout=5)
    assert [r["step"] for r in got] == list(range(100))
    assert stats["sent"] == 100 and stats["unsent"] == 0 and not (tmp_path / "unsent.jsonl").exists()

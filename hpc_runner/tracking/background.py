"""Send tracking records from a background thread, so a slow or dead server never stalls or fails training.

The training thread only appends to a bounded deque (``put`` never waits for the network). One daemon thread
takes batches and sends them. What cannot be sent is appended to an "unsent" JSON-lines file in the run dir
instead of being lost: a batch whose send raised (the sender then stays offline for ``retry_after_s`` and
writes what comes meanwhile straight to the file), the oldest records when the deque is full, and whatever is
still queued or in flight when ``close`` gives up after its timeout. ``stats`` counts each case.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _counted(items: list[dict[str, Any]]) -> int:
    """Records that carry data (not the ``open`` marker that makes the thread create the run at once)."""
    return sum(1 for i in items if i.get("kind") != "open")


class BackgroundSender:
    """A bounded queue of records and the daemon thread that sends them with ``send(batch)``."""

    def __init__(
        self,
        send: Callable[[list[dict[str, Any]]], None],
        unsent_path: Path,
        *,
        capacity: int = 20000,
        batch: int = 500,
        retry_after_s: float = 20.0,
        name: str = "hpcr-tracking",
    ) -> None:
        self._send = send
        self.unsent_path = Path(unsent_path)
        self.capacity = max(1, int(capacity))
        self.batch = max(1, int(batch))
        self.retry_after_s = retry_after_s
        self._items: deque[dict[str, Any]] = deque()
        self._cond = threading.Condition()
        self._file_lock = threading.Lock()
        self._closing = False
        self._abandoned = False
        self._inflight: list[dict[str, Any]] = []
        self._offline_until = 0.0
        self.stats = {"sent": 0, "unsent": 0, "overflow": 0, "failed_sends": 0}
        self.last_error: str | None = None
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def put(self, item: dict[str, Any]) -> None:
        """Queue one record; when the queue is full the oldest goes to the unsent file (never waits on the network)."""
        overflow = None
        with self._cond:
            if self._closing:
                overflow = item
            else:
                if len(self._items) >= self.capacity:
                    overflow = self._items.popleft()
                    self.stats["overflow"] += 1
                self._items.append(item)
                self._cond.notify()
        if overflow is not None:
            self._keep([overflow])

    def _keep(self, items: list[dict[str, Any]]) -> None:
        """Append records to the unsent file (one JSON object a line) so they can be sent later."""
        if not items:
            return
        text = "".join(json.dumps(i, default=str) + "\n" for i in items)
        with self._file_lock:
            self.unsent_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.unsent_path, "a", encoding="utf-8") as fh:
                fh.write(text)
            self.stats["unsent"] += _counted(items)

    def _take(self) -> list[dict[str, Any]] | None:
        with self._cond:
            while not self._items and not self._closing:
                self._cond.wait()
            if not self._items:
                return None
            n = min(self.batch, len(self._items))
            batch = [self._items.popleft() for _ in range(n)]
            self._inflight = batch
            return batch

    def _loop(self) -> None:
        while True:
            batch = self._take()
            if batch is None:
                return
            if time.monotonic() < self._offline_until:
                self._finish_batch(batch, sent=False)
                continue
            try:
                self._send(batch)
            except Exception as exc:  # the server's problem must not reach training: keep the records
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                self.last_error = f"{type(exc).__name__}: {first[:300]}"
                self.stats["failed_sends"] += 1
                self._offline_until = time.monotonic() + self.retry_after_s
                self._finish_batch(batch, sent=False)
            else:
                self._finish_batch(batch, sent=True)

    def _finish_batch(self, batch: list[dict[str, Any]], *, sent: bool) -> None:
        with self._cond:
            if self._abandoned:  # close() already kept this batch in the unsent file
                return
            self._inflight = []
            if sent:
                self.stats["sent"] += _counted(batch)
        if not sent:
            self._keep(batch)

    def pending(self) -> int:
        """Return how many records wait in the queue."""
        with self._cond:
            return len(self._items)

    def close(self, timeout: float = 10.0) -> dict[str, Any]:
        """Send what is queued for at most ``timeout`` seconds, keep the rest in the unsent file; return ``stats``."""
        with self._cond:
            self._closing = True
            rest: list[dict[str, Any]] = []
            if time.monotonic() < self._offline_until:  # no point waiting for a server that just failed
                rest, self._items = list(self._items), deque()
            self._cond.notify_all()
        self._keep(rest)
        self._thread.join(max(0.0, timeout))
        if self._thread.is_alive():
            with self._cond:
                self._abandoned = True
                rest = self._inflight + list(self._items)
                self._items.clear()
            self._keep(rest)
        return dict(self.stats)

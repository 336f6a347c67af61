"""The record of finished outputs in one folder: one JSON line per case, checked before it is trusted."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hpc_runner.records.read import RecordError, parse_json_text

log = logging.getLogger(__name__)


@dataclass
class ManifestEntry:
    """One finished case: its output file (relative to the manifest's folder), size, sha256 and metrics."""

    case: str
    file: str | None
    size: int | None
    sha256: str | None
    metrics: dict[str, float | None] = field(default_factory=dict)


def sha256_file(path: Path) -> str:
    """Return the hex sha256 of the file at ``path``."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _warn(message: str) -> None:
    log.warning(message)
    warnings.warn(message, stacklevel=3)


def _parse(line: str, path: Path) -> ManifestEntry:
    raw = parse_json_text(line, path, "manifest line")  # its nesting bounded first
    if not isinstance(raw, dict) or not isinstance(raw.get("case"), str):
        raise ValueError("not an object with a 'case' string")
    return ManifestEntry(case=raw["case"], file=raw.get("file"), size=raw.get("size"),
                         sha256=raw.get("sha256"), metrics=dict(raw.get("metrics") or {}))


class OutputManifest:
    """The record of finished outputs in one folder: one JSON line per finished case."""

    def __init__(self, folder: Path, name: str = "manifest.jsonl") -> None:
        self.folder = Path(folder)
        self.path = self.folder / name
        self._lock = threading.Lock()
        self._entries: dict[str, ManifestEntry] | None = None

    def _load(self) -> dict[str, ManifestEntry]:
        # every manifest of the folder: a case another shard (or an earlier layout) finished counts too
        if self._entries is None:
            self._entries = self.read_all(self.folder)
        return self._entries

    def completed(self, case: str) -> ManifestEntry | None:
        """The case's entry when its file exists with the recorded size and sha256, else None (mismatch warned)."""
        with self._lock:
            entry = self._load().get(case)
        if entry is None:
            return None
        if entry.file is None:
            return entry  # metrics only: nothing on disk to check
        path = self.folder / entry.file
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            _warn(f"{path}: recorded in {self.path.name} as case {case!r} but missing; it is written again")
            return None
        if size != entry.size:
            _warn(f"{path}: found {size} bytes, the manifest recorded {entry.size} (truncated or changed); "
                  "it is written again")
            return None
        if sha256_file(path) != entry.sha256:
            _warn(f"{path}: {size} bytes as recorded ({entry.size}) but its sha256 differs from the manifest's "
                  "(changed); it is written again")
            return None
        return entry

    def record(self, entry: ManifestEntry) -> None:
        """Append one line, flush and fsync; thread-safe."""
        line = json.dumps(asdict(entry), sort_keys=True, allow_nan=True) + "\n"
        with self._lock:
            self.folder.mkdir(parents=True, exist_ok=True)
            # one write() of one line: a crash leaves at most a damaged last line, which read_all names
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
            try:
                end = os.lseek(fd, 0, os.SEEK_END)
                if end and os.pread(fd, 1, end - 1) != b"\n":
                    line = "\n" + line  # a crash cut the last line: keep ours apart from it
                os.write(fd, line.encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            if self._entries is not None:
                self._entries[entry.case] = entry

    @staticmethod
    def read_all(folder: Path) -> dict[str, ManifestEntry]:
        """Every entry of every manifest*.jsonl in folder, by case (later lines win; a damaged line is warned)."""
        entries: dict[str, ManifestEntry] = {}
        for path in sorted(Path(folder).glob("manifest*.jsonl")):
            with open(path, encoding="utf-8", errors="replace") as f:
                for number, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        entry = _parse(line, path)
                    except (RecordError, ValueError, TypeError) as err:
                        _warn(f"{path}:{number}: damaged manifest line ignored ({err}); "
                              "its case counts as not finished")
                        continue
                    entries[entry.case] = entry
        return entries

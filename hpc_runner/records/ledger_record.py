"""A locked ledger record: the machinery sweep.yaml and pipeline.yaml share (one owner of each record).

A ledger record is a JSON file (a subset of YAML 1.2) in its own folder: top-level keys one a line, then a
list of entries (a sweep's points, a pipeline's stages) one a line, so a job can read its own line and a
diff shows what changed. It is read anywhere (``load``), written first by ``write_new`` and afterwards only
through ``locked``: take the folder's lock (records/file_lock.py: it holds across nodes), read, apply
transitions, write atomically. Each kind of record says what its entries may look like (``check_entry``),
and its ledger says how an entry's state may move (``TRANSITIONS``, checked by ``Transactions.move``).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from hpc_runner.errors import ClusterError
from hpc_runner.records.atomic import write_text_atomic
from hpc_runner.records.file_lock import exclusive
from hpc_runner.records.read import LEDGER_MAX_BYTES, RecordError, parse_yaml_record, read_record_text


class TransitionError(ClusterError):
    """A transition a ledger does not allow (a bug, or a record edited by hand)."""


# one encoder for every line: json.dumps with options builds a new one per call (10,000 points, twice a sweep)
_LINE_ENCODER = json.JSONEncoder(default=str, separators=(", ", ": "))


def dumps_line(value: Any) -> str:
    """Return ``value`` as one line of JSON, as ledger records write it."""
    return _LINE_ENCODER.encode(value)


R = TypeVar("R", bound="LedgerRecord")


@dataclass
class LedgerRecord:
    """A ledger record in memory: ``data`` holds the top-level keys, ``entries`` the list kept one a line.

    A subclass is declared with its name, its list and how an entry is checked
    (``class SweepRecord(LedgerRecord, noun="sweep", entries="points", check=check_point)``), its file, lock
    and kind follow from the name; it is a dataclass of ``path``, ``data`` and its list.
    """

    NOUN: ClassVar[str]  # what the record is called, e.g. "sweep": its file, lock and kind follow from it
    ENTRIES: ClassVar[str]  # the key (and attribute) of the list of entries, e.g. "points"
    FILE: ClassVar[str]  # the record's file in its folder: sweep.yaml
    LOCK: ClassVar[str]  # the lock file every writer takes: sweep.lock
    KIND: ClassVar[str]  # the record's "kind" value, which is also the command that writes it: "hpc-runner sweep"

    path: Path
    data: dict[str, Any]

    def __init_subclass__(cls, noun: str = "", entries: str = "",
                          check: Callable[[Any, int, Path], None] | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.NOUN, cls.ENTRIES = noun or cls.NOUN, entries or cls.ENTRIES
        if check is not None:
            cls.check_entry = classmethod(lambda _cls, entry, n, file: check(entry, n, file))  # type: ignore[assignment]
        cls.FILE, cls.LOCK, cls.KIND = f"{cls.NOUN}.yaml", f"{cls.NOUN}.lock", f"hpc-runner {cls.NOUN}"

    @property
    def file(self) -> Path:
        """Return the path of the record's file."""
        return self.path / self.FILE

    @property
    def entries(self) -> list[dict[str, Any]]:
        """Return the list of entries (a sweep's points, a pipeline's stages)."""
        return getattr(self, self.ENTRIES)

    @classmethod
    def check_entry(cls, entry: Any, n: int, file: Path) -> None:
        """ClusterError unless entry ``n`` is one hpc-runner could have written (each kind says how)."""

    @classmethod
    def load(cls: type[R], path: str | Path) -> R:
        """Read ``path/FILE`` (JSON fast path, YAML for a hand-edited file); ClusterError when unusable."""
        path = Path(path)
        file = path / cls.FILE
        what = f"{cls.NOUN} record"
        try:
            text = read_record_text(file, what, LEDGER_MAX_BYTES)
            if text is None:
                raise ClusterError(f"the {what} does not exist", where=str(file))
            try:
                data = json.loads(text)
            except (ValueError, RecursionError):
                data = parse_yaml_record(text, file, what)
        except RecordError as err:
            raise ClusterError(err.message, where=err.where, expected=err.expected) from None
        if not isinstance(data, dict) or data.get("kind") != cls.KIND or not isinstance(data.get(cls.ENTRIES), list):
            culprit = None if not isinstance(data, dict) else "kind" if data.get("kind") != cls.KIND else cls.ENTRIES
            raise ClusterError(f"not a {what}", where=str(file), id_path=culprit,
                               expected=f"a {cls.FILE} written by {cls.KIND}")
        entries = data.pop(cls.ENTRIES)
        for n, entry in enumerate(entries):
            cls.check_entry(entry, n, file)
        record = cls(path, data, entries)
        record.check_fields()
        record.check_folders()
        return record

    def check_fields(self) -> None:
        """ClusterError unless every top-level value the record's readers use has the type its writer gives it
        (each kind says which: its readers may then trust them)."""

    def check_folders(self) -> None:
        """ClusterError unless every folder the record names resolves inside its own folder (records/confine.py;
        each kind names its folders)."""

    def text(self) -> str:
        """Return the file's text: one top-level key a line, then one entry a line."""
        head = [f"  {json.dumps(k)}: {dumps_line(v)}" for k, v in self.data.items()]
        entries = ",\n".join("    " + dumps_line(e) for e in self.entries)
        return "{\n" + ",\n".join(head) + f',\n  "{self.ENTRIES}": [\n' + entries + "\n  ]\n}\n"

    def write_new(self) -> Path:
        """Write the first record of a folder that has none yet (before any job can exist)."""
        if self.file.exists():
            raise ClusterError(f"the {self.NOUN} dir already has a {self.NOUN} record", where=str(self.file))
        self.path.mkdir(parents=True, exist_ok=True)
        return write_text_atomic(self.file, self.text())

    def save(self) -> Path:
        """Write the record atomically (only ``locked`` calls this: it holds the lock)."""
        return write_text_atomic(self.file, self.text())


T = TypeVar("T", bound="Transactions")


class Transactions(Generic[R]):
    """The transitions of a record's entries, applied while its lock is held (``locked``).

    ``TRANSITIONS`` maps an event to the states it may leave and the state it enters; ``STATE`` is the
    entry's field that holds the state, ``DEFAULT_STATE`` its value when absent.
    """

    RECORD: ClassVar[type[LedgerRecord]]
    TRANSITIONS: ClassVar[dict[str, tuple[frozenset[str], str]]]
    STATE: ClassVar[str] = "state"
    DEFAULT_STATE: ClassVar[str | None] = None

    def __init__(self, record: R) -> None:
        self.record = record
        self.events: list[tuple[str, Any]] = []  # what this transaction did, for callers and tests

    @property
    def data(self) -> dict[str, Any]:
        """Return the record's top-level data."""
        return self.record.data

    def move(self, event: str, entry: dict[str, Any], key: Any, label: str) -> dict[str, Any]:
        """Move ``entry`` (``label`` in messages, ``key`` in events) by ``event``; TransitionError if not allowed."""
        sources, target = self.TRANSITIONS[event]
        state = entry.get(self.STATE, self.DEFAULT_STATE)
        if state not in sources:
            raise TransitionError(f"{label} cannot {event.replace('_', ' ')} from state {state}",
                                  where=str(self.record.file),
                                  expected=f"a {label.split()[0]} in state {' or '.join(sorted(sources))}")
        entry[self.STATE] = target
        self.events.append((event, key))
        return entry

    @classmethod
    @contextlib.contextmanager
    def locked(cls: type[T], path: str | Path, timeout: float = 600.0) -> Iterator[T]:
        """Take the record's lock, read it, yield its transactions; write it atomically on a normal exit, and on
        an exception when transitions were applied before it (each was valid on its own: an sbatch that
        returned queued its jobs)."""
        path = Path(path)
        with exclusive(path / cls.RECORD.LOCK, timeout, what=f"the {cls.RECORD.NOUN} {path}"):
            yield from cls._saved(cls.RECORD.load(path))

    @classmethod
    @contextlib.contextmanager
    def created(cls: type[T], record: R, timeout: float = 600.0) -> Iterator[T]:
        """Take the lock of a new record's folder, write the record (``write_new``) and yield its transactions on
        the record in memory (what was just written needs no reading back); saved as ``locked`` saves."""
        with exclusive(record.path / cls.RECORD.LOCK, timeout, what=f"the {cls.RECORD.NOUN} {record.path}"):
            record.write_new()
            yield from cls._saved(record)

    @classmethod
    def _saved(cls: type[T], record: R) -> Iterator[T]:
        """Yield the record's transactions (under its lock); save the record after them, and after an exception
        when transitions were applied before it."""
        ledger = cls(record)
        try:
            yield ledger
        except BaseException:
            if ledger.events:
                ledger.record.save()
            raise
        ledger.record.save()

    @classmethod
    def read_settled(cls, path: str | Path, timeout: float = 600.0) -> LedgerRecord:
        """Read the record once no one holds its lock (a job that starts while it is being queued waits until
        the submitter has recorded its job id)."""
        path = Path(path)
        with exclusive(path / cls.RECORD.LOCK, timeout, what=f"the {cls.RECORD.NOUN} {path}"):
            return cls.RECORD.load(path)

"""Read the records hpc-runner wrote (run.yaml, sweep.yaml, summary.json, *.jsonl) as untrusted input.

A record may have been hand-edited, cut short by a crash, copied in binary mode or written by someone
else: reading one never runs code (YAML's safe loader: a ``!!python/...`` tag is an error, not an
object), never reads without bound (``MAX_BYTES``; ``/dev/zero`` is not a file), and a record that
cannot be used is a UserError naming the file (exit 2), never a traceback. JSON-lines files keep
their good lines; the damaged ones are named (``JsonLines.damaged``), never silently dropped.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpc_runner.errors import ConfigError, UserError
from hpc_runner.records.shape import MAX_DEPTH, check_json_depth, check_yaml_shape, plainly_shallow

# The largest file read, per kind. A regular file over its kind's bound is refused by its size before a byte is
# read (no read of hundreds of MB to find it too big); a pipe is read up to the bound.
MAX_BYTES = 16 << 20  # any record, config, args file, metadata, profile, summary: a few KB to a few MB
LEDGER_MAX_BYTES = 128 << 20  # sweep.yaml / tune's ledger (a 100,000-point sweep.yaml is ~30 MB)
JSON_LINES_MAX_BYTES = 32 << 20  # metrics.jsonl, GPU samples: one line per logged step (~200,000 lines)
DATALIST_MAX_BYTES = 64 << 20  # a datalist or dataset.json of 100,000 cases is ~15 MB


class RecordError(UserError):
    """A record that cannot be read or used; the message names the file."""


_KINDS = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def not_regular(path: Path | str) -> str | None:
    """What is at ``path`` when it is there but no regular file (``a named pipe (FIFO)``, ``a folder``, ``a
    dangling symbolic link``...), in the words the readers' refusals use; None for a regular file or nothing."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "a dangling symbolic link" if os.path.islink(path) else None
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"
    return None if stat.S_ISREG(mode) else _kind(mode)


def _check_kind(mode: int, path: str | Path, what: str, pipe: bool, error: type[UserError]) -> None:
    if stat.S_ISREG(mode) or (pipe and stat.S_ISFIFO(mode)):
        return
    raise error(f"the {what} is {_kind(mode)}, not a regular file", where=str(path),
                expected=f"the {what} as a regular file (not a device{'' if pipe else ', named pipe'}, socket or "
                "folder), so that reading it ends")


_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)


def open_regular(path: Path | str, what: str, *, pipe: bool = False,
                 error: type[UserError] = RecordError) -> int | None:
    """Return a blocking read-only descriptor of ``path`` (None when it does not exist), ``error`` naming it
    when it is not a regular file (``pipe``: or a named pipe): stat-ed before the open, checked again after."""
    opened = _open_checked(path, what, pipe, error)
    return None if opened is None else opened[0]


def _open_checked(path: Path | str, what: str, pipe: bool,
                  error: type[UserError]) -> tuple[int, os.stat_result] | None:
    """open_regular's descriptor and the stat of what it opened."""
    try:
        _check_kind(os.stat(path).st_mode, path, what, pipe, error)
        fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise error(f"cannot read the {what} ({exc.strerror or exc})", where=str(path)) from None
    try:
        st = os.fstat(fd)
        _check_kind(st.st_mode, path, what, pipe, error)  # the path may have changed since
        os.set_blocking(fd, True)  # opened non-blocking so that nothing could hang the open itself
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_record_bytes(path: Path | str, what: str = "record", limit: int = MAX_BYTES, *, pipe: bool = False,
                      error: type[UserError] = RecordError) -> bytes | None:
    """Return a file's bytes (None when it does not exist); ``error`` (a UserError naming the file) when it
    cannot be read as one: hpc-runner's one bounded reader, for records, configs, macros' files, MANIFESTs,
    metadata, args files and the logs ``status`` reads.

    The file is ``os.stat``-ed before it is opened, so a named pipe or device is refused without opening
    it (opening a FIFO blocks until a writer comes), and checked again on the open descriptor (the path
    may have changed in between); a regular file over ``limit`` bytes is refused by its size, before anything
    is read. ``pipe``: a named pipe (``<(...)`` in bash) is read too, up to ``limit``; devices never are."""
    opened = _open_checked(path, what, pipe, error)
    if opened is None:
        return None
    fd, st = opened
    if stat.S_ISREG(st.st_mode) and st.st_size > limit:
        os.close(fd)
        _too_large(path, what, limit, error)
    try:  # os.read, not a file object: status reads 20,000 small records of a sweep
        # a read of n allocates n bytes up front: ask for the file's size (a pipe's is 0), then for what it grew
        want = min(st.st_size, limit) + 1
        parts = [os.read(fd, want)]
        got = len(parts[0])
        # a regular file that gave less than asked is at its end: no second read to find that out
        done = stat.S_ISREG(st.st_mode) and got < want
        while not done and got <= limit and (chunk := os.read(fd, min(1 << 20, limit + 1 - got))):
            parts.append(chunk)
            got += len(chunk)
    finally:
        os.close(fd)
    data = parts[0] if len(parts) == 1 else b"".join(parts)
    if len(data) > limit:
        _too_large(path, what, limit, error)
    return data


def _too_large(path: Path | str, what: str, limit: int, error: type[UserError]) -> None:
    size = f"{limit >> 20} MiB" if limit >= 1 << 20 else f"{limit >> 10} KiB"
    raise error(f"the {what} is larger than {size}", where=str(path), expected=f"a {what} of a sensible size")


def read_record_text(path: Path | str, what: str = "record", limit: int = MAX_BYTES, *, pipe: bool = False,
                     error: type[UserError] = RecordError) -> str | None:
    """Return a file's text (None when it does not exist); ``error`` when it is not UTF-8 text."""
    data = read_record_bytes(path, what, limit, pipe=pipe, error=error)
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"the {what} is not UTF-8 text (byte {exc.start}: {data[exc.start:exc.start + 1]!r})",
                    where=str(path), expected="the YAML or JSON text hpc-runner wrote") from None


def parse_yaml_record(text: str, path: Path, what: str = "record") -> Any:
    """Parse a record's YAML with the safe loader (libyaml when available); RecordError naming the line.

    Its shape is checked first, on the parser's events, as a config's is: a record is someone else's file
    (a shared sweep folder), and a few lines of anchors and aliases expand to billions of nodes."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        # a record with no anchor or alias and a nesting bound within MAX_DEPTH (every record hpc-runner writes)
        # needs no pass over its events: that pass was a third of the time of reading 10,000 run records
        if not plainly_shallow(text):
            check_yaml_shape(loader(text), path)
        return yaml.load(text, Loader=loader)
    except ConfigError as err:  # over the depth or alias bound
        raise RecordError(f"the {what} cannot be read: {err.message}", where=err.where, expected=err.expected
                          ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise RecordError(f"the {what} is not valid YAML ({problem})", where=where,
                          expected="the record as hpc-runner wrote it (YAML tags such as !!python/... are refused)"
                          ) from None
    except RecursionError:
        raise RecordError(f"the {what} nests too deeply", where=str(path)) from None
    except ValueError as exc:  # a scalar the constructor refuses: an int of over 4,300 digits
        raise RecordError(f"the {what} holds a value that cannot be read ({str(exc)[:80]})", where=str(path),
                          expected="the record as hpc-runner wrote it") from None


def parse_json_text(text: str | bytes, path: Path | str, what: str = "record",
                    error: type[UserError] = RecordError) -> Any:
    """Parse JSON text, its nesting bounded first (``json.loads`` recurses); ``error`` naming ``path``."""
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        check_json_depth(text, path)
        return json.loads(text)
    except ConfigError as err:
        raise error(f"the {what} cannot be read: {err.message}", where=err.where, expected=err.expected) from None
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise error(f"the {what} is not valid JSON ({exc})", where=str(path)) from None


def read_yaml_record(path: Path, what: str = "record", kind: type | None = dict) -> Any:
    """Return a YAML record (None when absent); RecordError when unreadable or not of ``kind``."""
    text = read_record_text(path, what)
    if text is None:
        return None
    data = parse_yaml_record(text, path, what)
    if data is None:
        return kind() if kind is not None else None
    if kind is not None and not isinstance(data, kind):
        raise RecordError(f"the {what} holds a {type(data).__name__}, not a {kind.__name__}", where=str(path),
                          expected="the record as hpc-runner wrote it")
    return data


def read_json_record(path: Path | str, what: str = "record", kind: type | None = dict) -> Any:
    """Return a JSON record (None when absent); RecordError when unreadable or not of ``kind``."""
    text = read_record_text(path, what)
    if text is None:
        return None
    data = parse_json_text(text, path, what)  # its nesting bounded before json.loads recurses
    if kind is not None and not isinstance(data, kind):
        raise RecordError(f"the {what} holds a {type(data).__name__}, not a {kind.__name__}", where=str(path))
    return data


@dataclass
class JsonLines:
    """The objects of a JSON-lines file, and the numbers of the lines that could not be read."""

    records: list[dict[str, Any]] = field(default_factory=list)
    damaged: list[int] = field(default_factory=list)
    cut: bool = False  # the last line was cut short (a writer killed mid-line): expected, not damage

    def describe(self, path: Path) -> str:
        """Return the warning that names the damaged lines."""
        lines = ", ".join(map(str, self.damaged[:10])) + (" ..." if len(self.damaged) > 10 else "")
        return f"{path}: {len(self.damaged)} damaged line(s) skipped (line {lines})"


def read_json_cache(path: Path, what: str, limit: int = MAX_BYTES) -> dict[str, Any]:
    """Return a cache file's JSON object; {} when it is absent, unreadable, damaged or not an object (a cache:
    a damaged file is the same as none, and it is rebuilt)."""
    try:
        text = read_record_text(path, what, limit=limit)
        data = parse_json_text(text, path, what) if text else {}  # its nesting bounded: json.loads recurses
    except RecordError:
        return {}
    return data if isinstance(data, dict) else {}


def read_json_lines(path: Path | str, what: str = "JSON-lines file", limit: int = JSON_LINES_MAX_BYTES,
                    max_line: int | None = None) -> JsonLines:
    """Read a JSON-lines file: every line that is a JSON object, and which lines were damaged (``max_line``: a
    line of more bytes is damaged too, unparsed: one its writer never writes)."""
    out = JsonLines()
    data = read_record_bytes(path, what, limit)
    if data is None:
        return out
    lines = data.split(b"\n")
    last = len(lines)
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        item = None if max_line is not None and len(raw) > max_line else _json_line(raw, path)
        if isinstance(item, dict):
            out.records.append(item)
        elif n == last and not data.endswith(b"\n"):
            out.cut = True
        else:
            out.damaged.append(n)
    return out


def _json_line(raw: bytes, path: Path | str) -> Any:
    """One line's JSON value, None when it is no JSON (its nesting bounded before json.loads recurses)."""
    try:
        line = raw.decode("utf-8")
        if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH:  # may nest too deep: bounded before json.loads
            check_json_depth(line, path)
        return json.loads(line)
    except (ValueError, RecursionError, ConfigError):
        return None

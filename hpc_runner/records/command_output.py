"""Run an outside command (a scheduler's client, git, a container tool) and read its answer: the one way in.

An outside command's output is someone else's bytes: a site's wrapper script may print Latin-1, a node name
may hold any byte, a broken client may print without end. ``subprocess.run(..., text=True)`` decodes strictly
(one non-UTF-8 byte is a UnicodeDecodeError, a traceback) and reads without bound. Here the command is an
argv list (never a shell string), its stdout and stderr are read as bytes, at most ``limit`` bytes each
(the command is stopped past it and the answer marked ``cut``), and decoded as UTF-8 with the bad bytes
replaced (U+FFFD), so a caller only ever sees a :class:`CommandOutput` of ``str``.

The exceptions are those of ``subprocess.run``: OSError when the command cannot start,
``subprocess.TimeoutExpired`` past ``timeout``, ``subprocess.CalledProcessError`` with ``check`` and a non-zero
exit; callers keep catching ``(OSError, subprocess.SubprocessError)``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

MAX_OUTPUT_BYTES = 64 << 20  # far above any scheduler answer (sacct of 100,000 jobs is ~30 MB)
_CHUNK = 1 << 16


@dataclass(frozen=True)
class CommandOutput:
    """What a command answered: its exit status and its output as text (bad bytes replaced)."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    cut: bool = False  # the output passed the bound: the command was stopped and the rest not read


def decode_output(data: bytes) -> str:
    """Return an outside command's bytes as text: UTF-8, each byte that is not replaced by U+FFFD."""
    return data.decode("utf-8", errors="replace")


class _Reader(threading.Thread):
    """Read one pipe to its end, keeping at most ``limit`` bytes; past it, stop the command."""

    def __init__(self, fd: int, limit: int, proc: subprocess.Popen) -> None:
        super().__init__(daemon=True)
        self.fd, self.limit, self.proc = fd, limit, proc
        self.parts: list[bytes] = []
        self.got = 0
        self.cut = False

    def run(self) -> None:
        try:
            while chunk := os.read(self.fd, _CHUNK):
                keep = self.limit - self.got
                if len(chunk) > keep:
                    self.parts.append(chunk[:keep])
                    self.got = self.limit
                    self.cut = True
                    _stop(self.proc)
                    return
                self.parts.append(chunk)
                self.got += len(chunk)
        except OSError:
            pass

    def data(self) -> bytes:
        return b"".join(self.parts)


def _stop(proc: subprocess.Popen) -> None:
    with contextlib.suppress(OSError):
        proc.kill()


def run_command(argv: Sequence[str], *, timeout: float | None = None, input: str | bytes | None = None,
                env: Mapping[str, str] | None = None, cwd: str | os.PathLike | None = None, check: bool = False,
                limit: int = MAX_OUTPUT_BYTES) -> CommandOutput:
    """Run ``argv`` (a list, no shell) and return its answer as text; see the module's doc for the bounds."""
    argv = tuple(str(a) for a in argv)
    data = input.encode("utf-8") if isinstance(input, str) else input
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=None if env is None else dict(env),
                            cwd=cwd)
    assert proc.stdout is not None and proc.stderr is not None
    readers = [_Reader(proc.stdout.fileno(), limit, proc), _Reader(proc.stderr.fileno(), limit, proc)]
    for reader in readers:
        reader.start()
    try:
        if data is not None and proc.stdin is not None:
            try:
                proc.stdin.write(data)
            except (BrokenPipeError, OSError):
                pass  # the command stopped reading: its answer says why
            finally:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop(proc)
            proc.wait()
            for reader in readers:
                reader.join(1.0)
            raise subprocess.TimeoutExpired(argv, timeout or 0, output=decode_output(readers[0].data()),
                                            stderr=decode_output(readers[1].data())) from None
        for reader in readers:  # a child it started may hold the pipes: wait a little, not for ever
            reader.join(None if timeout is None else max(1.0, timeout))
    finally:
        for stream, reader in zip((proc.stdout, proc.stderr), readers, strict=True):
            if not reader.is_alive():  # one still reading keeps its descriptor (closed when the process ends)
                with contextlib.suppress(OSError):
                    stream.close()
        if proc.poll() is None:
            _stop(proc)
            proc.wait()
    out = CommandOutput(argv, proc.returncode, decode_output(readers[0].data()), decode_output(readers[1].data()),
                        cut=readers[0].cut or readers[1].cut)
    if check and out.returncode != 0:
        raise subprocess.CalledProcessError(out.returncode, list(argv), output=out.stdout, stderr=out.stderr)
    return out

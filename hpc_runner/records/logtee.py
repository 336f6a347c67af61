"""Copy what a run prints into its log file while it still reaches the terminal (or SLURM's log)."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

LOGGER_NAME = "hpc_runner"


class Tee:
    """Write to a stream and to a log file (the run's log.txt)."""

    def __init__(self, stream: TextIO, log: TextIO) -> None:
        self._stream = stream
        self._log = log

    def write(self, text: str) -> int:
        # a logging handler made during the run keeps this object after the run's log is closed
        # (ignite's and MONAI's loggers take sys.stdout as they find it): it then writes to the stream only
        if not self._log.closed:
            self._log.write(text)
        return self._stream.write(text)

    def flush(self) -> None:
        if not self._log.closed:
            self._log.flush()
        self._stream.flush()

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


@contextlib.contextmanager
def tee_to_log(path: Path) -> Iterator[logging.Logger]:
    """Tee stdout and the ``hpc_runner`` logger into ``path`` (appending) for the duration."""
    path.parent.mkdir(parents=True, exist_ok=True)
    log = open(path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 - closed below
    handler = logging.StreamHandler(log)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger(LOGGER_NAME)
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.INFO)  # the log file keeps INFO; the terminal still shows only what is printed
    old_stdout = sys.stdout
    sys.stdout = Tee(old_stdout, log)  # type: ignore[assignment]
    try:
        yield logger
    finally:
        sys.stdout = old_stdout
        logger.removeHandler(handler)
        logger.setLevel(old_level)
        log.close()

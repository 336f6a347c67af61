"""Progress bars only on a terminal: tqdm's redraws (MONAI's "Loading dataset", our cache fill) are ``\\r`` lines
in a batch log, one per update."""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping
from typing import TextIO


def no_bars_without_a_terminal(environ: MutableMapping[str, str] | None = None,
                               stream: TextIO | None = None) -> bool:
    """Turn tqdm's bars off when stderr is no terminal (a user's own TQDM_DISABLE wins); return whether it did.

    tqdm (>= 4.66) reads its TQDM_* defaults when it is imported, so this runs first thing in a process: the CLI's
    entry and each job's function, before anything imports tqdm (MONAI does)."""
    environ = os.environ if environ is None else environ
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    if (isatty is not None and isatty()) or "TQDM_DISABLE" in environ:
        return False
    environ["TQDM_DISABLE"] = "1"
    return True

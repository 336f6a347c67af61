"""Where hpc-runner keeps what it remembers for one user between commands: ``$XDG_CACHE_HOME/hpc-runner``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def user_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Return ``$XDG_CACHE_HOME/hpc-runner`` (else ``~/.cache/hpc-runner``), read from ``environ`` (default: ours)."""
    base = (os.environ if environ is None else environ).get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "hpc-runner"

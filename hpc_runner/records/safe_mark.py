"""The mark of a run made with ``--safe``: a file in its run dir that the sandbox cannot change.

``run.yaml`` records ``safe: true`` too, but the run dir is writable inside the sandbox, so a bundle could
rewrite its record (``safe: false``, a cache folder in ``$HOME``) and its next start (a requeue, a retry,
``run --resume``) would run outside. The mark is written outside, before the sandbox starts, and bound
read-only inside (engine/sandbox.py), so only the user can remove it: a run dir with a mark is safe
whatever its record says, and the folders the sandbox may write besides the run dir are read from the mark.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from hpc_runner.records.atomic import write_text_atomic
from hpc_runner.records.read import read_json_record

SAFE_MARK = ".safe-sandbox.json"


def mark_path(run_dir: str | os.PathLike) -> Path:
    """Return where the mark of ``run_dir`` is."""
    return Path(run_dir) / SAFE_MARK


def write_mark(run_dir: str | os.PathLike, writable: Sequence[str] = ()) -> Path:
    """Mark ``run_dir`` as a --safe run whose sandbox may also write ``writable`` (absolute folders)."""
    folders = sorted({os.path.abspath(p) for p in writable} - {os.path.abspath(run_dir)})
    return write_text_atomic(mark_path(run_dir), json.dumps({"safe": True, "writable": folders}, indent=1) + "\n")


def read_mark(run_dir: str | os.PathLike) -> list[str] | None:
    """Return the extra writable folders of a marked run dir, or None without a mark (a damaged mark: none)."""
    path = mark_path(run_dir)
    if not os.path.lexists(path):
        return None
    try:
        found = read_json_record(path, "the --safe mark")
    except Exception:  # damaged: still safe (the mark's presence is the promise), with nothing extra writable
        return []
    folders = found.get("writable") if isinstance(found, dict) else None
    return [p for p in folders if isinstance(p, str) and os.path.isabs(p)] if isinstance(folders, list) else []

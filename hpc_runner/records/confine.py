"""Records confine themselves: a folder a record names resolves inside the record's own folder.

sweep.yaml names its job folder, base config and points' run dirs; pipeline.yaml its stages' folders and the run
dir a select stage chose. Commands write where these say (``collect`` a stage's results.csv, ``resume`` the job
script and pickles a job later unpickles), so a record edited to name another folder (``../other-sweep``,
``/home/me``, or a symbolic link inside the folder that leads out of it) would make them write there. Each owner
checks every folder its record names with ``inside`` when it reads the record: after symbolic links and ``..``
are resolved the folder must lie below the record's own folder, or the record is bad input naming the key.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hpc_runner.errors import ClusterError


def inside(root: str | os.PathLike, value: Any, key: str, where: str | os.PathLike) -> Path:
    """Return ``root / value`` when it resolves (symbolic links and ``..`` followed) to a folder below ``root``;
    ClusterError naming ``key`` and ``where`` (the record's file) otherwise."""
    root = Path(root)
    if not isinstance(value, str | os.PathLike) or not str(value).strip() or "\0" in str(value):
        raise ClusterError(f"{key} is {str(value)[:120]!r}, not a folder name", where=str(where),
                           expected=f"{key} naming a folder inside {root} (a record names only its own folders)")
    path = root / value
    real_root, real = os.path.realpath(root), os.path.realpath(path)
    if not real.startswith(real_root.rstrip(os.sep) + os.sep):
        raise ClusterError(f"{key} {str(value)[:200]!r} resolves to {real[:200]}, outside the record's folder "
                           f"{real_root}", where=str(where),
                           expected=f"{key} naming a folder inside {root} (a record names only its own folders: "
                           f"a path, '..' or a symbolic link that leads out of it is refused)")
    return path


def links_inside(folder: str | os.PathLike, root: str | os.PathLike, key: str, where: str | os.PathLike) -> None:
    """ClusterError when an entry of ``folder`` (e.g. a sweep's points/) is a symbolic link that leads out of ``root``
    (one directory scan; only the links are resolved)."""
    try:
        entries = list(os.scandir(folder))
    except OSError:  # not there (yet), or not a folder: nothing of it is followed
        return
    for entry in entries:
        if entry.is_symlink():
            inside(root, os.path.relpath(entry.path, root), f"{key} {entry.name}", where)

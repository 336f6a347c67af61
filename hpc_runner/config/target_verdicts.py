"""Remember, across commands, which ``_target_`` names resolved, so a pre-flight need not import them again.

Resolving ``UNet`` imports torch and MONAI: seconds of CPU and hundreds of MB on a shared login node, for
every ``submit``, ``sweep`` and ``pipeline``. A target that resolved once resolves again while the package
that provides it is unchanged, so its success is kept in ``$XDG_CACHE_HOME/hpc-runner/targets.json``, keyed
by the interpreter, the target and a stamp of that package:

- an installed package (under ``site-packages``/``dist-packages``): its ``__init__``'s path, size and mtime,
  which pip rewrites on every install or upgrade;
- a source tree (an editable install, a checkout on ``PYTHONPATH``): the newest mtime and the number of its
  ``.py`` files, so editing any module forgets its verdicts;
- a module of the bundle itself (``scripts.x``), a namespace package or anything found nowhere: no stamp,
  never kept.

A verdict read from source (``config/static_targets.py``) also keeps the size and mtime of each file it read,
and counts only while they are unchanged: a re-export edited in a source file forgets it even where the stamp
above (an installed package's ``__init__``) stays the same.

Only successes are kept: a failure is looked up again each time, so installing the missing package fixes
the next pre-flight at once. The file is the user's own; a damaged or oversized one is ignored.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
from pathlib import Path

from hpc_runner.records.atomic import write_text_atomic
from hpc_runner.records.read import read_json_cache
from hpc_runner.records.user_cache import user_cache_dir

MAX_ENTRIES = 4096  # a verdict is ~70 bytes, ~300 with the files it was read from: the file stays under 1 MB
MAX_BYTES = 1 << 20
MAX_TREE_FILES = 5000  # a source tree larger than this is not stamped (walking it would cost what we save)
_INSTALLED = ("site-packages", "dist-packages")
_MONAI = "monai"  # a bare name (``UNet``) is one of MONAI's components


def cache_file() -> Path:
    """Return where the verdicts live (``$XDG_CACHE_HOME/hpc-runner/targets.json``, else ``~/.cache/...``)."""
    return user_cache_dir() / "targets.json"


def _tree_stamp(folder: Path) -> str | None:
    """Return the newest mtime and the count of the ``.py`` files under ``folder`` (None when too many)."""
    newest, count = 0, 0
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d != "__pycache__" and not d.startswith(".")]
        for name in files:
            if name.endswith(".py"):
                count += 1
                if count > MAX_TREE_FILES:
                    return None
                try:
                    newest = max(newest, os.stat(os.path.join(root, name)).st_mtime_ns)
                except OSError:
                    return None
    return f"tree:{folder}:{newest}:{count}"


def package_stamp(target: str, bundle_dir: Path | None) -> str | None:
    """Return a stamp of the package that provides ``target`` (None: do not remember this target).

    Call it with the bundle on ``sys.path`` as the pre-flight resolves it: a top-level module of the bundle
    shadows an installed one, and is then not stamped.
    """
    top = target.split(".", 1)[0] if "." in target else _MONAI
    try:
        spec = importlib.util.find_spec(top)  # a top-level name: finds the module without importing it
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.has_location:
        return None
    origin = Path(spec.origin).resolve()
    if bundle_dir is not None and origin.is_relative_to(Path(bundle_dir).resolve()):
        return None
    try:
        info = origin.stat()
    except OSError:
        return None
    if any(part in _INSTALLED for part in origin.parts):
        return f"installed:{origin}:{info.st_size}:{info.st_mtime_ns}"
    if origin.name == "__init__.py":
        return _tree_stamp(origin.parent)
    return f"file:{origin}:{info.st_size}:{info.st_mtime_ns}"


def _key(target: str, stamp: str) -> str:
    text = json.dumps([sys.executable, sys.version, target, stamp])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _file_stamps(files: tuple[Path, ...]) -> list[list] | None:
    """Return [path, size, mtime_ns] of each file (None when one cannot be read: nothing to remember)."""
    stamps = []
    for path in files:
        try:
            info = os.stat(path)
        except OSError:
            return None
        stamps.append([str(path), info.st_size, info.st_mtime_ns])
    return stamps


def _files_unchanged(stamps: object) -> bool:
    if not isinstance(stamps, list):
        return stamps == 1  # a verdict of an import: the package stamp is all it depends on
    for item in stamps:
        if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str)):
            return False
        try:
            info = os.stat(item[0])
        except OSError:
            return False
        if [info.st_size, info.st_mtime_ns] != item[1:]:
            return False
    return True




class TargetVerdicts:
    """The verdicts of earlier commands: ``known`` before importing a target, ``remember`` after it resolved."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or cache_file()
        self._entries: dict[str, object] | None = None
        self._added = 0

    def _all(self) -> dict[str, object]:
        if self._entries is None:
            self._entries = read_json_cache(self.path, "target verdicts", limit=MAX_BYTES)
        return self._entries

    def known(self, target: str, bundle_dir: Path | None) -> bool:
        """Return True when ``target`` resolved before from the same, unchanged package (and source files)."""
        stamp = package_stamp(target, bundle_dir)
        if stamp is None:
            return False
        entries = self._all()
        key = _key(target, stamp)
        return key in entries and _files_unchanged(entries[key])

    def remember(self, target: str, bundle_dir: Path | None, files: tuple[Path, ...] = ()) -> None:
        """Note that ``target`` resolved (kept on ``save``); ``files``: the source files a static answer read."""
        stamp = package_stamp(target, bundle_dir)
        stamps = _file_stamps(files) if files else 1
        if stamp is not None and stamps is not None:
            entries = self._all()
            key = _key(target, stamp)
            if entries.get(key) != stamps:
                entries[key] = stamps
                self._added += 1

    def save(self) -> None:
        """Write the verdicts back when some were added, keeping the newest ``MAX_ENTRIES``."""
        if not self._added or self._entries is None:
            return
        entries = dict(list(self._entries.items())[-MAX_ENTRIES:])
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(self.path, json.dumps(entries))
        except OSError:
            return  # a read-only home: the next pre-flight imports again, nothing worse
        self._added = 0

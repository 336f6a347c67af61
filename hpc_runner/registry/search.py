"""Find bundles by name on the search path: ``$HPCR_BUNDLE_PATH`` (colon-separated), then ``./bundles``."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from hpc_runner.errors import BundleError

PATH_VAR = "HPCR_BUNDLE_PATH"
META_RELPATH = Path("configs") / "metadata.json"


@dataclass(frozen=True)
class BundleEntry:
    """A bundle found on the search path."""

    name: str
    version: str
    description: str
    path: Path
    search_dir: Path
    rank: int  # position of search_dir on the path: lower wins


def search_path(environ: Mapping[str, str] | None = None) -> list[Path]:
    """Return the directories searched for bundles, in priority order."""
    environ = os.environ if environ is None else environ
    dirs = [Path(p).expanduser() for p in environ.get(PATH_VAR, "").split(os.pathsep) if p]
    dirs.append(Path("bundles"))
    seen: set[Path] = set()
    result = []
    for d in dirs:
        key = d.resolve()
        if key not in seen:
            seen.add(key)
            result.append(d)
    return result


def version_key(version: str) -> tuple:
    """Sort key for versions like ``1.10.0`` > ``1.9.2`` (non-numeric parts sort as text)."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"[.+-]", version))


def read_entry(bundle_dir: Path, search_dir: Path, rank: int) -> BundleEntry | None:
    """Return the entry for ``bundle_dir``, or None when it has no readable metadata."""
    try:
        meta = json.loads((bundle_dir / META_RELPATH).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict):
        return None
    return BundleEntry(
        name=str(meta.get("name") or bundle_dir.name),
        version=str(meta.get("version", "0.0.0")),
        description=str(meta.get("description", "")).strip().splitlines()[0] if meta.get("description") else "",
        path=bundle_dir,
        search_dir=search_dir,
        rank=rank,
    )


def list_bundles(environ: Mapping[str, str] | None = None) -> list[BundleEntry]:
    """Return every bundle on the search path, in priority order (path order, then newest version)."""
    entries = []
    for rank, d in enumerate(search_path(environ)):
        if not d.is_dir():
            continue
        for child in sorted(d.iterdir()):
            if (child / META_RELPATH).is_file():
                entry = read_entry(child, d, rank)
                if entry:
                    entries.append(entry)
    # path order first (like $PATH), then the newest version within one directory
    return sorted(entries, key=lambda e: (e.name, e.rank, _descending(version_key(e.version))))


def _descending(key: tuple) -> tuple:
    return (*((-a, -b, tuple(-ord(ch) for ch in c)) for a, b, c in key), (1,))


def split_spec(spec: str) -> tuple[str, str | None]:
    """Split ``NAME@VERSION`` into its parts (version None when absent)."""
    name, _, version = spec.partition("@")
    return name, version or None


def looks_like_path(spec: str) -> bool:
    """Return True when ``spec`` is meant as a directory rather than a bundle name."""
    return os.sep in spec or spec.startswith(".") or Path(spec).is_dir()


def resolve_bundle(spec: str, environ: Mapping[str, str] | None = None) -> Path:
    """Return the bundle directory for a path or a ``NAME[@VERSION]`` on the search path."""
    if looks_like_path(spec):
        path = Path(spec)
        if not path.is_dir():
            raise BundleError("bundle directory not found", where=spec, expected="a bundle folder or a bundle name")
        return path
    name, version = split_spec(spec)
    candidates = [e for e in list_bundles(environ) if e.name == name]
    if version:
        matching = [e for e in candidates if e.version == version]
        if not matching:
            found = ", ".join(sorted({e.version for e in candidates})) or "none"
            raise BundleError(
                f"bundle '{name}' has no version {version} on the search path (versions found: {found})",
                expected=f"one of the versions listed by 'hpc-runner list {name}'",
            )
        return matching[0].path
    if not candidates:
        dirs = ", ".join(str(d) for d in search_path(environ))
        raise BundleError(
            f"no bundle named '{name}' on the search path ({dirs})",
            expected=f"a bundle folder, or a bundle installed in a directory of ${PATH_VAR}",
            hint="'hpc-runner list' shows the bundles found",
        )
    return candidates[0].path

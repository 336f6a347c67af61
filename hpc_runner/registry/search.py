"""Find bundles by name on the search path: ``$HPCR_BUNDLE_PATH`` (colon-separated), then ``./bundles``.

A search directory holds bundle folders. ``hpc-runner install`` names them ``<name>-<version>/`` so
several versions sit side by side; any other folder with ``configs/metadata.json`` counts too (its
name and version come from the metadata). When one name is found several times, the first directory
on the search path wins (like ``$PATH``), then the newest version within that directory.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from hpc_runner.errors import BundleError, UserError
from hpc_runner.records.numbers import is_ascii_digits
from hpc_runner.records.read import parse_json_text, read_record_text

PATH_VAR = "HPCR_BUNDLE_PATH"
DEFAULT_DIR = Path("bundles")
META_RELPATH = Path("configs") / "metadata.json"
_SEMVER = re.compile(r"([0-9]{1,18})\.([0-9]{1,18})\.([0-9]{1,18})(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?")


@dataclass(frozen=True)
class BundleEntry:
    """A bundle found on the search path."""

    name: str
    version: str
    description: str
    path: Path
    search_dir: Path
    rank: int  # position of search_dir on the path: lower wins

    @property
    def spec(self) -> str:
        """Return ``NAME@VERSION``."""
        return f"{self.name}@{self.version}"


def search_path(environ: Mapping[str, str] | None = None) -> list[Path]:
    """Return the directories searched for bundles, in priority order."""
    environ = os.environ if environ is None else environ
    dirs = [Path(p).expanduser() for p in environ.get(PATH_VAR, "").split(os.pathsep) if p]
    dirs.append(DEFAULT_DIR)
    seen: set[Path] = set()
    result = []
    for d in dirs:
        key = d.resolve()
        if key not in seen:
            seen.add(key)
            result.append(d)
    return result


def default_install_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Return where ``install`` puts bundles: the first directory of ``$HPCR_BUNDLE_PATH``, else ./bundles."""
    return search_path(environ)[0]


# what an installed bundle's folder is made of (metadata.strict.schema.json says the same of the name)
INSTALL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
INSTALL_VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}")


def check_identity(name: str, version: str, where: str | None = None) -> None:
    """BundleError unless ``name`` and ``version`` can make a folder name on their own (``pack``, ``install``)."""
    for what, value, pattern in (("name", name, INSTALL_NAME), ("version", version, INSTALL_VERSION)):
        if not pattern.fullmatch(value) or value in (".", ".."):
            raise BundleError(
                f"metadata {what} {value[:80]!r} cannot name an installed bundle's folder",
                where=where,
                expected=f"a {what} of letters, digits, '_', '.' and '-' (plus '+' in a version), starting with a "
                "letter or digit: no '/', '..' or spaces",
            )


def install_dir_name(name: str, version: str, where: str | None = None) -> str:
    """Return the folder name of an installed bundle, ``<name>-<version>``; BundleError if it cannot be one."""
    check_identity(name, version, where)
    return f"{name}-{version}"


def version_key(version: str) -> tuple:
    """Sort key for versions: ``1.10.0`` > ``1.9.2`` > ``1.9.2-rc.1`` (semantic versioning order)."""
    m = _SEMVER.fullmatch(version.strip())
    if m:
        numbers = tuple(int(x) for x in m.group(1, 2, 3))
        pre = m.group(4)
    else:  # not semver: leading numbers, the rest sorts like a pre-release tag
        parts = re.split(r"[.+_-]", version.strip())
        n = 0
        while n < len(parts) and is_ascii_digits(parts[n]):
            n += 1
        numbers = tuple(int(p) for p in parts[:n])
        pre = ".".join(parts[n:]) or None
    if pre is None:
        return (numbers, 1, ())
    return (numbers, 0, tuple((0, int(p), "") if is_ascii_digits(p) else (1, 0, p) for p in pre.split(".")))


def name_from_dir(bundle_dir: Path, version: str) -> str:
    """Return a bundle's name from its folder (``seg-1.0.0`` -> ``seg`` for version 1.0.0)."""
    suffix = f"-{version}"
    name = bundle_dir.name
    return name[: -len(suffix)] if name.endswith(suffix) and len(name) > len(suffix) else name


def read_entry(bundle_dir: Path, search_dir: Path, rank: int) -> BundleEntry | None:
    """Return the entry for ``bundle_dir``, or None when it has no readable metadata."""
    path = bundle_dir / META_RELPATH
    try:  # bounded: a metadata.json linked to /dev/zero or a named pipe is no bundle, not a hang
        text = read_record_text(path, "metadata", 1 << 20)
        meta = parse_json_text(text, path, "metadata") if text is not None else None
    except UserError:
        return None
    if not isinstance(meta, dict):
        return None
    version = str(meta.get("version", "0.0.0"))
    description = str(meta.get("description") or "").strip()
    return BundleEntry(
        name=str(meta.get("name") or name_from_dir(bundle_dir, version)),
        version=version,
        description=description.splitlines()[0] if description else "",
        path=bundle_dir,
        search_dir=search_dir,
        rank=rank,
    )


def bundles_in(directory: Path, rank: int = 0) -> list[BundleEntry]:
    """Return the bundles directly inside one directory (sorted by folder name)."""
    if not directory.is_dir():
        return []
    entries = []
    for child in sorted(directory.iterdir()):
        if child.name.startswith(".") or not (child / META_RELPATH).is_file():
            continue  # dot-folders: install's temporary folders
        entry = read_entry(child, directory, rank)
        if entry:
            entries.append(entry)
    return entries


def sort_by_priority(entries: list[BundleEntry]) -> list[BundleEntry]:
    """Sort by name, then the order ``--bundle NAME`` prefers: path order, newest version, folder name."""
    out = sorted(entries, key=lambda e: e.path.name)
    out.sort(key=lambda e: version_key(e.version), reverse=True)
    out.sort(key=lambda e: (e.name, e.rank))
    return out


def list_bundles(environ: Mapping[str, str] | None = None, name: str | None = None) -> list[BundleEntry]:
    """Return every bundle on the search path (or those called ``name``), best candidate of each name first."""
    entries = [e for rank, d in enumerate(search_path(environ)) for e in bundles_in(d, rank)]
    if name is not None:
        entries = [e for e in entries if e.name == name]
    return sort_by_priority(entries)


def explain_choice(candidates: list[BundleEntry]) -> str:
    """Say which of several same-name candidates (in priority order) wins and why."""
    if not candidates:
        return "no candidates"
    best = candidates[0]
    if len(candidates) == 1:
        return f"{best.spec} at {best.path} (the only one)"
    same_dir = [c for c in candidates if c.rank == best.rank]
    later_dirs = sorted({str(c.search_dir) for c in candidates if c.rank > best.rank})
    reasons = []
    if later_dirs:
        reasons.append(f"{best.search_dir} comes before {', '.join(later_dirs)} on the search path")
    if any(version_key(c.version) < version_key(best.version) for c in same_dir):
        reasons.append(f"{best.version} is the newest version in {best.search_dir}")
    if any(c.version == best.version for c in same_dir[1:]):
        reasons.append(f"folder {best.path.name} sorts first among copies of the same version")
    return (
        f"{len(candidates)} bundles named '{best.name}'; '--bundle {best.name}' uses {best.spec} at {best.path} "
        f"because {' and '.join(reasons)}; name another with --bundle {best.name}@VERSION or a path"
    )


def split_spec(spec: str) -> tuple[str, str | None]:
    """Split ``NAME@VERSION`` into its parts (version None when absent)."""
    name, _, version = spec.partition("@")
    return name, version or None


def looks_like_path(spec: str) -> bool:
    """Return True when ``spec`` is meant as a directory rather than a bundle name."""
    return os.sep in spec or spec.startswith((".", "~")) or (Path(spec) / "configs").is_dir()


def find_bundle(spec: str, environ: Mapping[str, str] | None = None) -> BundleEntry:
    """Return the search-path entry that ``NAME[@VERSION]`` names; BundleError when there is none."""
    name, version = split_spec(spec)
    candidates = list_bundles(environ, name)
    if version:
        matching = [e for e in candidates if e.version == version]
        if not matching:
            found = ", ".join(sorted({e.version for e in candidates}, key=version_key)) or "none"
            raise BundleError(
                f"bundle '{name}' has no version {version} on the search path (versions found: {found})",
                expected=f"one of the versions listed by 'hpc-runner list {name}'",
            )
        return matching[0]
    if not candidates:
        dirs = ", ".join(str(d) for d in search_path(environ))
        hint = "'hpc-runner list' shows the bundles found"
        if Path(spec).is_dir():
            hint = f"'{spec}' is a folder but has no configs/ folder, so it is not a bundle; " + hint
        raise BundleError(
            f"no bundle named '{name}' on the search path ({dirs})",
            expected=f"a bundle folder, or a bundle installed in a directory of ${PATH_VAR}",
            hint=hint,
        )
    return candidates[0]


def resolve_bundle(spec: str, environ: Mapping[str, str] | None = None) -> Path:
    """Return the bundle directory for a path or a ``NAME[@VERSION]`` on the search path."""
    if looks_like_path(spec):
        path = Path(spec).expanduser()
        if not path.is_dir():
            raise BundleError("bundle directory not found", where=spec, expected="a bundle folder or a bundle name")
        return path
    return find_bundle(spec, environ).path

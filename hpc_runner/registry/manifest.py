"""The MANIFEST of a packed bundle: the sha256 of every file, in ``sha256sum`` format.

``cd <bundle> && sha256sum -c MANIFEST`` checks it without hpc-runner. Files that are not part of a
bundle (caches, ``data/``, ``runs/``, ``eval/`` outputs, the MANIFEST itself) are left out of it and
ignored when a bundle is compared with it.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from hpc_runner.errors import BundleError
from hpc_runner.records.read import open_regular, read_record_text

MANIFEST_NAME = "MANIFEST"
# anywhere in the tree: caches and version-control folders
EXCLUDED_DIRS = frozenset(
    {"__pycache__", ".git", ".hg", ".svn", ".pytest_cache", ".ruff_cache", ".mypy_cache", ".ipynb_checkpoints",
     ".hypothesis", ".cache"}
)
# at the top of a bundle only: data and outputs (eval/ is where MONAI model-zoo bundles write results)
EXCLUDED_TOP_DIRS = frozenset({"data", "runs", "eval"})
EXCLUDED_NAMES = frozenset({".DS_Store"})  # anywhere
EXCLUDED_SUFFIXES = (".pyc", ".pyo")
_LINE = re.compile(r"^([0-9a-f]{64}) [ *](.+)\Z")
_CHUNK = 1 << 20
MAX_MANIFEST_BYTES = 32 << 20  # 200,000 files; a MANIFEST linked to /dev/zero is refused, not read


@dataclass
class BundleFiles:
    """What a bundle folder holds: regular files and symbolic links (relative posix paths, sorted)."""

    files: list[str]
    links: list[str] = field(default_factory=list)


@dataclass
class ManifestDiff:
    """How a bundle folder differs from its MANIFEST."""

    changed: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Return True when the folder matches the MANIFEST."""
        return not (self.changed or self.missing or self.added)

    def describe(self, limit: int = 10) -> str:
        """Return ``changed: a, b; missing: c; added: d`` (at most ``limit`` names per kind)."""
        parts = []
        for kind, names in (("changed", self.changed), ("missing", self.missing), ("added", self.added)):
            if names:
                more = f" and {len(names) - limit} more" if len(names) > limit else ""
                parts.append(f"{kind}: {', '.join(names[:limit])}{more}")
        return "; ".join(parts) or "no differences"


def is_excluded(rel: str, is_dir: bool = False) -> bool:
    """Return True when a relative path is not part of a bundle (caches, data, outputs, the MANIFEST)."""
    parts = PurePosixPath(rel).parts
    if not parts:
        return False
    if parts[0] in EXCLUDED_TOP_DIRS and (len(parts) > 1 or is_dir):
        return True
    if any(p in EXCLUDED_DIRS for p in (parts if is_dir else parts[:-1])):
        return True
    if is_dir:
        return False
    return rel == MANIFEST_NAME or parts[-1] in EXCLUDED_NAMES or parts[-1].endswith(EXCLUDED_SUFFIXES)


def scan_bundle(root: Path) -> BundleFiles:
    """Return the files and links of a bundle folder that a MANIFEST covers."""
    files, links = [], []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = Path(dirpath).relative_to(root).as_posix()
        prefix = "" if rel_dir == "." else rel_dir + "/"
        keep = []
        for d in sorted(dirnames):
            rel = prefix + d
            if is_excluded(rel, is_dir=True):
                continue
            if os.path.islink(os.path.join(dirpath, d)):
                links.append(rel)  # os.walk does not descend into linked folders
            else:
                keep.append(d)
        dirnames[:] = keep
        for name in sorted(filenames):
            rel = prefix + name
            if is_excluded(rel):
                continue
            (links if os.path.islink(os.path.join(dirpath, name)) else files).append(rel)
    return BundleFiles(sorted(files), sorted(links))


def sha256_file(path: Path) -> str:
    """Return the hex sha256 of a file's content."""
    digest = hashlib.sha256()
    fd = open_regular(path, "bundle file", error=BundleError)  # a named pipe in a bundle would block the read
    if fd is None:
        raise BundleError("the file disappeared while it was read", where=str(path))
    with os.fdopen(fd, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def check_member_name(rel: str, where: str) -> str:
    """Return ``rel`` when it is a plain relative posix path inside a bundle, else raise BundleError."""
    p = PurePosixPath(rel)
    if (
        not rel
        or rel.startswith("/")
        or "\\" in rel
        or any(part in ("", ".", "..") for part in rel.split("/"))
        or any(ord(ch) < 32 for ch in rel)
        or str(p) != rel
    ):
        raise BundleError(
            f"unsafe or unusual file name {rel!r}",
            where=where,
            expected="relative paths inside the bundle without '..', backslashes or control characters",
        )
    return rel


def compute_manifest(root: Path) -> dict[str, str]:
    """Return ``{relative path: sha256}`` for every file of a bundle; BundleError on links or odd names."""
    found = scan_bundle(root)
    if found.links:
        raise BundleError(
            f"the bundle holds symbolic links: {', '.join(found.links[:5])}",
            where=str(root),
            expected="regular files only (copy the target into the bundle), so the archive is self-contained",
        )
    return {check_member_name(rel, str(root)): sha256_file(root / rel) for rel in found.files}


def format_manifest(manifest: dict[str, str]) -> str:
    """Return the MANIFEST text (``sha256sum`` format, sorted by path)."""
    return "".join(f"{digest}  {rel}\n" for rel, digest in sorted(manifest.items()))


def parse_manifest(text: str, where: str) -> dict[str, str]:
    """Parse MANIFEST text; BundleError naming the line when it is malformed."""
    manifest: dict[str, str] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = _LINE.match(line)
        if not m:
            raise BundleError(
                "malformed MANIFEST line", where=f"{where}:{lineno}", expected="'<sha256 hex>  <relative path>'"
            )
        rel = check_member_name(m.group(2), f"{where}:{lineno}")
        if rel in manifest:
            raise BundleError(f"'{rel}' is listed twice", where=f"{where}:{lineno}", expected="each file once")
        manifest[rel] = m.group(1)
    return manifest


def read_manifest(root: Path) -> dict[str, str] | None:
    """Return the parsed MANIFEST of a bundle folder, or None when it has none."""
    path = root / MANIFEST_NAME
    text = read_record_text(path, "MANIFEST", MAX_MANIFEST_BYTES, error=BundleError)
    return None if text is None else parse_manifest(text, str(path))


def diff_manifest(root: Path, manifest: dict[str, str]) -> ManifestDiff:
    """Compare a bundle folder with a manifest: files changed, missing or added since it was written."""
    found = scan_bundle(root)
    present = set(found.files)
    diff = ManifestDiff()
    for rel, digest in sorted(manifest.items()):
        if rel in found.links:
            diff.changed.append(rel)  # a link may point anywhere later
        elif rel not in present:
            diff.missing.append(rel)
        elif sha256_file(root / rel) != digest:
            diff.changed.append(rel)
    diff.added = sorted(r for r in [*found.files, *found.links] if r not in manifest)
    return diff

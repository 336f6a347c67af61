"""``hpc-runner install``: unpack a packed bundle into a search-path directory, safely and atomically.

Every archive member must be a plain file or folder under one top folder (no links, devices, absolute
paths or ``..``); the files are written by this code (nothing is extracted by tarfile), checked
against the archive's MANIFEST in a hidden temporary folder beside the destination, and only then
renamed to ``<dir>/<name>-<version>/`` in one step. A bundle with the same name and version that is
already there is left alone: identical content is a no-op, different content is refused.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hpc_runner.errors import BundleError
from hpc_runner.registry.manifest import (
    MANIFEST_NAME,
    check_member_name,
    diff_manifest,
    read_manifest,
)
from hpc_runner.registry.search import bundles_in, install_dir_name

_COPY_CHUNK = 1 << 20


@dataclass
class InstallResult:
    """Where the bundle is, and whether this call put it there (``installed``) or found it (``unchanged``)."""

    path: Path
    name: str
    version: str
    status: str


def _members(tar: tarfile.TarFile, where: str) -> tuple[str, list[tarfile.TarInfo]]:
    """Return the archive's top folder and its members, refusing anything but plain files and folders."""
    members = tar.getmembers()
    tops, seen = set(), set()
    for m in members:
        name = m.name.rstrip("/") if m.isdir() else m.name
        check_member_name(name, f"{where}: member")
        if not (m.isfile() or m.isdir()):
            kind = "link" if (m.issym() or m.islnk()) else "special file"
            raise BundleError(f"member '{m.name}' is a {kind}", where=where, expected="only files and folders")
        if name in seen:
            raise BundleError(f"member '{name}' appears twice", where=where, expected="each path once")
        seen.add(name)
        tops.add(name.split("/", 1)[0])
    if len(tops) != 1 or any(m.isfile() and "/" not in m.name for m in members):
        raise BundleError("the archive does not hold exactly one top folder", where=where,
                          expected="an archive written by 'hpc-runner pack' (NAME-VERSION/...)")
    return tops.pop(), members


def _extract(tar: tarfile.TarFile, members: list[tarfile.TarInfo], dest: Path) -> None:
    for m in members:
        target = dest / m.name.rstrip("/")
        if m.isdir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        src = tar.extractfile(m)
        mode = 0o777 if m.mode & 0o111 else 0o666  # the umask applies, as for any new file
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), mode)
        with os.fdopen(fd, "wb") as out:
            assert src is not None
            shutil.copyfileobj(src, out, _COPY_CHUNK)


def _read_identity(root: Path, where: str) -> tuple[str, str]:
    from hpc_runner.registry.pack import bundle_identity

    try:
        name, version, _ = bundle_identity(root)
    except BundleError as err:
        raise BundleError(f"the archive's bundle is not valid: {err.message}", where=where,
                          expected=err.expected) from None
    return name, version


def install_archive(archive: Path, dest_dir: Path) -> InstallResult:
    """Install a packed bundle into ``dest_dir`` as ``<name>-<version>/``; BundleError on any refusal."""
    archive = Path(archive)
    where = str(archive)
    if not archive.is_file():
        raise BundleError("archive not found", where=where, expected="a NAME-VERSION.tar.gz from 'hpc-runner pack'")
    dest_dir = Path(dest_dir)
    dest_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".hpcr-install-", dir=dest_dir))
    try:
        try:
            with tarfile.open(archive, "r:*") as tar:
                top, members = _members(tar, where)
                _extract(tar, members, tmp)
        except (tarfile.TarError, EOFError, OSError) as exc:
            raise BundleError(f"cannot read the archive ({type(exc).__name__}: {exc})", where=where,
                              expected="a .tar.gz written by 'hpc-runner pack'") from None
        staged = tmp / top
        manifest = read_manifest(staged)
        if manifest is None:
            raise BundleError(f"the archive has no {MANIFEST_NAME}", where=where,
                              expected="an archive written by 'hpc-runner pack'")
        diff = diff_manifest(staged, manifest)
        if not diff.ok:
            raise BundleError(f"the archive does not match its own {MANIFEST_NAME}: {diff.describe()}", where=where,
                              expected="an intact archive (copy it again)")
        name, version = _read_identity(staged, where)
        target = dest_dir / install_dir_name(name, version)
        existing = _existing(dest_dir, target, name, version)
        if existing is not None:
            return _compare_existing(existing, manifest, name, version)
        try:
            os.rename(staged, target)
        except OSError:
            if target.exists():  # another install won the race: same rules as if it had been there before
                return _compare_existing(target, manifest, name, version)
            raise
        return InstallResult(target, name, version, "installed")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _existing(dest_dir: Path, target: Path, name: str, version: str) -> Path | None:
    if target.exists():
        return target
    for entry in bundles_in(dest_dir):
        if entry.name == name and entry.version == version:
            return entry.path
    return None


def _compare_existing(existing: Path, manifest: dict[str, str], name: str, version: str) -> InstallResult:
    diff = diff_manifest(existing, manifest)
    if diff.ok:
        return InstallResult(existing, name, version, "unchanged")
    raise BundleError(
        f"{existing} already holds {name} {version} with different content ({diff.describe()}); "
        "it is not overwritten",
        where=str(existing),
        expected="a new version for changed content (configs/metadata.json 'version' and 'changelog'), "
        "then pack and install again",
        hint=f"If the installed copy is damaged, remove {existing} and install again",
    )

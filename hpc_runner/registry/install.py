"""``hpc-runner install``: unpack a packed bundle into a search-path directory, safely and atomically.

Nothing is written before the archive's headers and its MANIFEST have been read and checked (a first
pass that decompresses but writes nothing): at most ``MAX_MEMBERS`` members, each a plain file or
folder under one top folder (no links, devices, absolute paths or ``..``), every file listed in the
MANIFEST, and the files' total size within ``MAX_BYTES`` and the free space of ``--to``. The
bundle's name and version must make a folder name (the rules ``pack`` applies) and that folder must
resolve inside ``--to``. Then the files are written by this code (nothing is extracted by tarfile)
into a hidden temporary folder beside the destination, checked against the MANIFEST, and renamed to
``<dir>/<name>-<version>/`` in one step. A bundle with the same name and version that is already
there is left alone: identical content is a no-op, different content is refused.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from hpc_runner.errors import BundleError, UserError
from hpc_runner.records.numbers import outside_int
from hpc_runner.records.read import open_regular, parse_json_text
from hpc_runner.registry.manifest import (
    MANIFEST_NAME,
    check_member_name,
    diff_manifest,
    parse_manifest,
)
from hpc_runner.registry.search import META_RELPATH, bundles_in, install_dir_name

_COPY_CHUNK = 1 << 20
MAX_MEMBERS = 20_000  # files and folders in one archive
MAX_BYTES = 256 << 30  # all files together (weights included), unless $HPCR_INSTALL_MAX_BYTES says otherwise


def max_bytes(environ: Mapping[str, str] | None = None) -> int:
    """The most an archive's files may add up to: ``$HPCR_INSTALL_MAX_BYTES`` (a positive integer) or 256 GiB;
    UserError naming the setting for any other value (read when installing, never at import)."""
    environ = os.environ if environ is None else environ
    raw = environ.get("HPCR_INSTALL_MAX_BYTES", "").strip()
    if not raw:
        return MAX_BYTES
    value = outside_int(raw, low=1)
    if value is None:
        raise UserError(f"HPCR_INSTALL_MAX_BYTES={raw[:80]!r} in the environment is not a number of bytes",
                        expected=f"HPCR_INSTALL_MAX_BYTES unset ({MAX_BYTES} bytes) or a positive whole number")
    return value
MAX_MANIFEST_BYTES = 8 << 20
MAX_METADATA_BYTES = 4 << 20


@dataclass
class InstallResult:
    """Where the bundle is, and whether this call put it there (``installed``) or found it (``unchanged``)."""

    path: Path
    name: str
    version: str
    status: str


@dataclass
class _Plan:
    """What the header pass found: the top folder, the members, the MANIFEST and the bundle's identity."""

    top: str
    members: list[tarfile.TarInfo]
    manifest: dict[str, str]
    name: str
    version: str


def _read_member(tar: tarfile.TarFile, member: tarfile.TarInfo, limit: int, where: str) -> bytes:
    if member.size > limit:
        raise BundleError(f"'{member.name}' is {member.size} bytes, more than {limit} allowed for it", where=where)
    f = tar.extractfile(member)
    return f.read(limit + 1) if f is not None else b""


def _check_header(tar: tarfile.TarFile, where: str) -> _Plan:
    """Read every header (no file written), the MANIFEST and the metadata; BundleError on any refusal."""
    members: list[tarfile.TarInfo] = []
    tops, seen = set(), set()
    manifest_text = meta_text = None
    for m in tar:  # one header at a time: a huge member count stops here, not after all are read
        if len(members) >= MAX_MEMBERS:
            raise BundleError(f"the archive has more than {MAX_MEMBERS} members", where=where,
                              expected="a bundle archive written by 'hpc-runner pack'")
        name = m.name.rstrip("/") if m.isdir() else m.name
        check_member_name(name, f"{where}: member")
        if not (m.isfile() or m.isdir()):
            kind = "link" if (m.issym() or m.islnk()) else "special file"
            raise BundleError(f"member '{m.name}' is a {kind}", where=where, expected="only files and folders")
        if name in seen:
            raise BundleError(f"member '{name}' appears twice", where=where, expected="each path once")
        seen.add(name)
        tops.add(name.split("/", 1)[0])
        members.append(m)
        rel = name.split("/", 1)[1] if "/" in name else ""
        if m.isfile() and rel == MANIFEST_NAME:
            manifest_text = _read_member(tar, m, MAX_MANIFEST_BYTES, where)
        elif m.isfile() and rel == META_RELPATH.as_posix():
            meta_text = _read_member(tar, m, MAX_METADATA_BYTES, where)
    if len(tops) != 1 or any(m.isfile() and "/" not in m.name for m in members):
        raise BundleError("the archive does not hold exactly one top folder", where=where,
                          expected="an archive written by 'hpc-runner pack' (NAME-VERSION/...)")
    top = tops.pop()
    if manifest_text is None:
        raise BundleError(f"the archive has no {MANIFEST_NAME}", where=where,
                          expected="an archive written by 'hpc-runner pack'")
    try:
        manifest = parse_manifest(manifest_text.decode("utf-8"), f"{where}: {MANIFEST_NAME}")
    except UnicodeDecodeError:
        raise BundleError(f"the {MANIFEST_NAME} is not text", where=where) from None
    files = {m.name.split("/", 1)[1]: m for m in members if m.isfile()}
    extra = sorted(set(files) - set(manifest) - {MANIFEST_NAME})
    if extra:
        raise BundleError(f"the archive holds files its {MANIFEST_NAME} does not list: {', '.join(extra[:5])}",
                          where=where, expected="only the files the MANIFEST lists (nothing was written)")
    missing = sorted(set(manifest) - set(files))
    if missing:
        raise BundleError(f"files listed in its {MANIFEST_NAME} are missing: {', '.join(missing[:5])}", where=where,
                          expected="an intact archive (copy it again)")
    total = sum(m.size for m in files.values())
    limit = max_bytes()
    if total > limit:
        raise BundleError(f"the archive's files add up to {total} bytes, more than {limit}", where=where,
                          hint="set HPCR_INSTALL_MAX_BYTES to allow more")
    name, version = _identity(meta_text, where)
    return _Plan(top, members, manifest, name, version)


def _identity(meta_text: bytes | None, where: str) -> tuple[str, str]:
    """The bundle's name and version from its metadata, under the rules ``pack`` applies to them."""
    if meta_text is None:
        raise BundleError(f"the archive has no {META_RELPATH}", where=where, expected="a bundle archive")
    meta = parse_json_text(meta_text, where, f"archive's {META_RELPATH}", BundleError)
    if not isinstance(meta, dict) or not isinstance(meta.get("version"), str):
        raise BundleError(f"the archive's {META_RELPATH} has no version", where=where,
                          expected="metadata with a 'name' and a 'version'")
    name = meta.get("name")
    if not isinstance(name, str):
        raise BundleError(f"the archive's {META_RELPATH} has no name", where=where,
                          expected="metadata with a 'name' and a 'version'")
    install_dir_name(name, meta["version"], f"{where}: {META_RELPATH}")
    return name, meta["version"]


def _extract(tar: tarfile.TarFile, plan: _Plan, dest: Path) -> None:
    for m in plan.members:
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


def _inside(dest_dir: Path, folder: str, where: str) -> Path:
    """Return ``dest_dir/folder``; BundleError unless it resolves to a folder directly inside ``dest_dir``."""
    target = dest_dir / folder
    if target.resolve().parent != dest_dir.resolve():
        raise BundleError(f"the bundle would be installed at {target.resolve()}, outside {dest_dir}", where=where,
                          expected="a name and version that make a folder inside --to")
    return target


# the first bytes of each kind of archive tarfile reads ("ustar" sits at offset 257 of a tar's first header)
_MAGIC = ((b"\x1f\x8b", "gz"), (b"BZh", "bz2"), (b"\xfd7zXZ\x00", "xz"), (b"\x28\xb5\x2f\xfd", "zst"))
_TAR_MAGIC_AT = 257


def _archive_mode(archive: Path, where: str) -> str:
    """Return tarfile's read mode for ``archive`` (``r:gz``...), told by its first bytes; BundleError for a file
    larger than its files may add up to (``max_bytes``, plus the tar headers) or one that is no tar archive at all
    (gzip, bzip2, xz or zstd compressed, or plain): nothing else is handed to tarfile, which would otherwise try
    each decompressor in turn over the whole file (minutes for 600 MB of zeros)."""
    fd = open_regular(archive, "archive", error=BundleError)
    if fd is None:
        raise BundleError("archive not found", where=where, expected="a NAME-VERSION.tar.gz from 'hpc-runner pack'")
    try:
        size = os.fstat(fd).st_size
        head = os.pread(fd, 512, 0)
    finally:
        os.close(fd)
    bound = max_bytes() + (MAX_MEMBERS + 2) * 1024  # every member's header and padding, and the end blocks
    if size > bound:
        raise BundleError(f"the archive is {size} bytes, more than {bound} (the most its files may add up to, with "
                          "their tar headers)", where=where, hint="set HPCR_INSTALL_MAX_BYTES to allow more")
    for magic, mode in _MAGIC:
        if head.startswith(magic):
            if mode == "zst" and "zst" not in getattr(tarfile.TarFile, "OPEN_METH", {}):
                raise BundleError("cannot read the archive: it is zstd-compressed, which this Python's tarfile cannot "
                                  "read",
                                  where=where, expected="a .tar.gz written by 'hpc-runner pack'",
                                  hint="unpack it with `zstd -d` to a .tar first, or pack it again")
            return f"r:{mode}"
    if head[_TAR_MAGIC_AT:_TAR_MAGIC_AT + 5] == b"ustar":
        return "r:"
    raise BundleError("cannot read the archive: the file is not a tar archive (neither gzip, bzip2, xz nor zstd "
                      "compressed, nor plain tar)",
                      where=where, expected="a .tar.gz written by 'hpc-runner pack'")


def install_archive(archive: Path, dest_dir: Path) -> InstallResult:
    """Install a packed bundle into ``dest_dir`` as ``<name>-<version>/``; BundleError on any refusal."""
    archive = Path(archive)
    where = str(archive)
    if not archive.is_file():
        raise BundleError("archive not found", where=where, expected="a NAME-VERSION.tar.gz from 'hpc-runner pack'")
    dest_dir = Path(dest_dir)
    mode = _archive_mode(archive, where)
    try:
        with tarfile.open(archive, mode) as tar:
            plan = _check_header(tar, where)
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:  # zlib, gzip and lzma errors among them
        raise BundleError(f"cannot read the archive ({type(exc).__name__}: {exc})", where=where,
                          expected="a .tar.gz written by 'hpc-runner pack'") from None
    target = _inside(dest_dir, install_dir_name(plan.name, plan.version, where), where)
    try:
        dest_dir.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(dest_dir).free
    except OSError as exc:
        raise BundleError(f"cannot use the install directory ({exc.strerror or exc})", where=str(dest_dir)) from None
    size = sum(m.size for m in plan.members)
    if size > free:
        raise BundleError(f"the bundle needs {size} bytes and {dest_dir} has {free} free", where=where)
    existing = _existing(dest_dir, target, plan.name, plan.version)
    if existing is not None:
        return _compare_existing(existing, plan.manifest, plan.name, plan.version)
    tmp = Path(tempfile.mkdtemp(prefix=".hpcr-install-", dir=dest_dir))
    try:
        try:
            with tarfile.open(archive, mode) as tar:
                _extract(tar, plan, tmp)
        except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
            raise BundleError(f"cannot read the archive ({type(exc).__name__}: {exc})", where=where,
                              expected="a .tar.gz written by 'hpc-runner pack'") from None
        staged = tmp / plan.top
        diff = diff_manifest(staged, plan.manifest)
        if not diff.ok:
            raise BundleError(f"the archive does not match its own {MANIFEST_NAME}: {diff.describe()}", where=where,
                              expected="an intact archive (copy it again)")
        try:
            os.rename(staged, target)
        except OSError:
            if target.exists():  # another install won the race: same rules as if it had been there before
                return _compare_existing(target, plan.manifest, plan.name, plan.version)
            raise
        return InstallResult(target, plan.name, plan.version, "installed")
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

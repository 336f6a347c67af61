"""``hpc-runner pack``: write ``NAME-VERSION.tar.gz`` holding the bundle and its MANIFEST.

The archive is reproducible: members sorted, fixed owner, mode and time, gzip without a timestamp,
so packing the same files twice gives the same bytes. Everything sits under ``NAME-VERSION/``.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from hpc_runner.errors import BundleError
from hpc_runner.records.atomic import atomic_open
from hpc_runner.records.read import parse_json_text, read_record_text
from hpc_runner.registry.manifest import MANIFEST_NAME, compute_manifest, diff_manifest, format_manifest, read_manifest
from hpc_runner.registry.metadata import check_metadata
from hpc_runner.registry.search import META_RELPATH, install_dir_name, name_from_dir

ARCHIVE_SUFFIX = ".tar.gz"
MTIME = 315532800  # 1980-01-01, as reproducible zip files use


@dataclass
class PackResult:
    """The archive written and what is in it."""

    archive: Path
    name: str
    version: str
    files: int


def bundle_identity(bundle_dir: Path) -> tuple[str, str, dict]:
    """Return ``(name, version, metadata)`` of a bundle; BundleError when the metadata is unusable."""
    meta_path = bundle_dir / META_RELPATH

    text = read_record_text(meta_path, "metadata", error=BundleError)
    if text is None:
        raise BundleError("the bundle has no configs/metadata.json", where=str(bundle_dir),
                          expected="a bundle folder")
    meta = parse_json_text(text, meta_path, "metadata", error=BundleError)
    check_metadata(meta, str(meta_path))
    version = str(meta["version"])
    name = str(meta.get("name") or name_from_dir(bundle_dir.resolve(), version))
    return name, version, meta


def _tarinfo(name: str, size: int, executable: bool = False, is_dir: bool = False) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE if is_dir else tarfile.REGTYPE
    info.size = 0 if is_dir else size
    info.mode = 0o755 if (is_dir or executable) else 0o644
    info.mtime = MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def pack_bundle(
    bundle_dir: Path, out_dir: Path | None = None, *, check: Callable[[Path], None] | None = None
) -> PackResult:
    """Pack a bundle folder into ``<out_dir>/NAME-VERSION.tar.gz`` (default: the current directory).

    ``check`` refuses a bundle once its name and version are read (``hpc-runner pack`` passes
    ``config/verify.check_packable``: the bundle must load; the config layer sits above this one).
    """
    bundle_dir = Path(bundle_dir)
    check_out_dir(Path(out_dir or "."))  # before anything is read or written
    name, version, _ = bundle_identity(bundle_dir)
    if check is not None:
        check(bundle_dir)
    old = read_manifest(bundle_dir)
    if old is not None:
        diff = diff_manifest(bundle_dir, old)
        if not diff.ok:
            warnings.warn(f"{bundle_dir} differs from its {MANIFEST_NAME} ({diff.describe()}); if it was installed, "
                          f"give the changed bundle a new version (it is still {version})", stacklevel=2)
    manifest = compute_manifest(bundle_dir)
    top = install_dir_name(name, version)
    archive = Path(out_dir or ".") / f"{top}{ARCHIVE_SUFFIX}"
    try:
        _write_archive(archive, bundle_dir, manifest, top)
    except (PermissionError, IsADirectoryError, NotADirectoryError, FileExistsError) as exc:
        raise BundleError(f"cannot write the archive ({exc.strerror or exc}: {exc.filename or archive})",
                          where=str(archive), expected="--out naming a folder this user may write") from None
    return PackResult(archive, name, version, len(manifest))


def check_out_dir(out_dir: Path) -> None:
    """BundleError when ``out_dir`` (pack's ``--out``), or a folder it would be made in, is a file."""
    for part in (out_dir, *out_dir.parents):
        if part.is_dir():
            return
        if part.exists() or part.is_symlink():  # a file, or a dangling link mkdir cannot replace
            inside = "" if part == out_dir else f" would be made inside {part}, which"
            raise BundleError(f"--out {out_dir}{inside} {'is' if inside else 'names'} an existing file, not a folder",
                              expected="--out naming a folder (the archive NAME-VERSION.tar.gz is written into it), "
                              "or a path where a folder can be made")


def _write_archive(archive: Path, bundle_dir: Path, manifest: dict[str, str], top: str) -> None:
    dirs = sorted({str(parent) for rel in manifest for parent in PurePosixPath(rel).parents if str(parent) != "."})
    with atomic_open(archive, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(_tarinfo(top, 0, is_dir=True))
        for d in dirs:
            tar.addfile(_tarinfo(f"{top}/{d}", 0, is_dir=True))
        for rel in sorted(manifest):
            path = bundle_dir / rel
            with open(path, "rb") as f:
                data = f.read() if path.stat().st_size < (64 << 20) else None
                if data is not None:
                    if hashlib.sha256(data).hexdigest() != manifest[rel]:
                        raise BundleError(f"'{rel}' changed while it was being packed", where=str(path))
                    tar.addfile(_tarinfo(f"{top}/{rel}", len(data), _executable(path)), io.BytesIO(data))
                else:  # large files (weights) are streamed; install checks them against the MANIFEST
                    tar.addfile(_tarinfo(f"{top}/{rel}", path.stat().st_size, _executable(path)), f)
        text = format_manifest(manifest).encode()
        tar.addfile(_tarinfo(f"{top}/{MANIFEST_NAME}", len(text)), io.BytesIO(text))


def _executable(path: Path) -> bool:
    return bool(path.stat().st_mode & 0o111)

"""Refuse to run a bundle whose files no longer match its MANIFEST (unless the user says ``--trust``).

The MANIFEST (written by ``hpc-runner pack``) proves that the files are the ones that were packed;
it is not a signature: whoever can write the bundle folder can rewrite the MANIFEST too.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from pathlib import Path

from hpc_runner.errors import BundleError
from hpc_runner.records.read import read_record_bytes
from hpc_runner.registry.manifest import MANIFEST_NAME, MAX_MANIFEST_BYTES, ManifestDiff, diff_manifest, read_manifest
from hpc_runner.registry.search import PATH_VAR


def _in_shared_dir(bundle_dir: Path, environ: Mapping[str, str]) -> bool:
    here = bundle_dir.resolve()
    shared = [Path(p).expanduser().resolve() for p in environ.get(PATH_VAR, "").split(os.pathsep) if p]
    return any(d in here.parents for d in shared)


def manifest_status(bundle_dir: Path) -> ManifestDiff | None:
    """Return how the bundle differs from its MANIFEST, or None when it has no MANIFEST."""
    manifest = read_manifest(bundle_dir)
    return None if manifest is None else diff_manifest(bundle_dir, manifest)


def check_trust(bundle_dir: Path, *, trust: bool = False, environ: Mapping[str, str] | None = None) -> None:
    """Raise BundleError when the bundle's files differ from its MANIFEST and ``trust`` is False."""
    environ = os.environ if environ is None else environ
    diff = manifest_status(bundle_dir)
    if diff is None:
        if _in_shared_dir(bundle_dir, environ):
            warnings.warn(
                f"{bundle_dir} has no {MANIFEST_NAME}, so its files cannot be checked "
                "(bundles installed with 'hpc-runner install' have one)",
                stacklevel=2,
            )
        return
    if diff.ok:
        return
    if trust:
        warnings.warn(f"running {bundle_dir} although it differs from its {MANIFEST_NAME} (--trust): "
                      f"{diff.describe()}", stacklevel=2)
        return
    raise BundleError(
        f"the bundle's files no longer match its {MANIFEST_NAME}: {diff.describe()}",
        where=str(bundle_dir / MANIFEST_NAME),
        expected="the files as they were packed: reinstall the bundle (or pack a new version of your changes)",
        hint="Run with --trust to use the modified files anyway",
    )


def manifest_record(bundle_dir: Path | None) -> dict | None:
    """Return what a run record should say about the bundle's MANIFEST (None without one)."""
    import hashlib

    if bundle_dir is None or not (bundle_dir / MANIFEST_NAME).is_file():
        return None
    diff = manifest_status(bundle_dir)
    data = read_record_bytes(bundle_dir / MANIFEST_NAME, MANIFEST_NAME, MAX_MANIFEST_BYTES, error=BundleError) or b""
    return {
        "sha256": hashlib.sha256(data).hexdigest(),
        "matches": bool(diff and diff.ok),
        "differences": None if diff is None or diff.ok else diff.describe(),
    }

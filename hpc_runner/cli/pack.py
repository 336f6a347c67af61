"""``hpc-runner pack``: write NAME-VERSION.tar.gz with a MANIFEST (sha256 of every file)."""

from __future__ import annotations

import argparse
from pathlib import Path

from hpc_runner.config.verify import check_packable
from hpc_runner.registry.archive import pack_bundle
from hpc_runner.registry.search import resolve_bundle

HELP = "pack a bundle into NAME-VERSION.tar.gz with a MANIFEST, to install elsewhere"
DESCRIPTION = """Pack a bundle into NAME-VERSION.tar.gz (name and version from configs/metadata.json),
with a MANIFEST holding the sha256 of every file (sha256sum format). Left out: __pycache__ and other
caches, .git, data/, runs/ and eval/ (outputs). Symbolic links are refused. The bundle must load
(metadata valid, configs and references fine); the archive is reproducible."""
EPILOG = """examples:
  hpc-runner pack bundles/synthetic_seg --out dist/
  hpc-runner install dist/synthetic_seg-0.1.0.tar.gz --to /shared/group/bundles"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the pack options."""
    parser.add_argument("bundle", metavar="BUNDLE", help="bundle folder, or NAME[@VERSION] on the search path")
    parser.add_argument("--out", metavar="DIR", default=".", help="where to write the archive (default: .)")


def main(args: argparse.Namespace) -> int:
    """Run the command."""
    result = pack_bundle(resolve_bundle(args.bundle), Path(args.out), check=check_packable)
    print(f"packed {result.name} {result.version} ({result.files} files) into {result.archive}")
    return 0

"""``hpc-runner install``: unpack a packed bundle into a search-path directory as NAME-VERSION/."""

from __future__ import annotations

import argparse
from pathlib import Path

from hpc_runner.registry.install import install_archive
from hpc_runner.registry.search import default_install_dir

HELP = "install a packed bundle into a search-path directory (default: first of $HPCR_BUNDLE_PATH)"
DESCRIPTION = """Install NAME-VERSION.tar.gz (from `hpc-runner pack`) as DIR/NAME-VERSION/, so several
versions sit side by side. DIR defaults to the first directory of $HPCR_BUNDLE_PATH, else ./bundles.
Only plain files and folders are accepted (no links, absolute paths or '..'); the files are checked
against the archive's MANIFEST before the folder appears, in one rename. An identical bundle already
installed is left as is; a different one with the same name and version is refused."""
EPILOG = """examples:
  hpc-runner install synthetic_seg-0.1.0.tar.gz --to /shared/group/bundles
  HPCR_BUNDLE_PATH=/shared/group/bundles hpc-runner install synthetic_seg-0.1.0.tar.gz"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the install options."""
    parser.add_argument("archive", metavar="ARCHIVE", help="NAME-VERSION.tar.gz written by 'hpc-runner pack'")
    parser.add_argument("--to", metavar="DIR", help="search-path directory to install into")


def main(args: argparse.Namespace) -> int:
    """Run the command."""
    dest = Path(args.to) if args.to else default_install_dir()
    result = install_archive(Path(args.archive), dest)
    if result.status == "unchanged":
        print(f"{result.name} {result.version} is already installed with the same content at {result.path}; "
              "nothing to do")
    else:
        print(f"installed {result.name} {result.version} into {result.path}")
    print(f"run it with: hpc-runner run --bundle {result.name}@{result.version}"
          + ("" if args.to is None else f"   (with {dest} on $HPCR_BUNDLE_PATH)"))
    return 0

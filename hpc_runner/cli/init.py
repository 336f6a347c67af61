"""``hpc-runner init``: start a new bundle from a template (default: the synthetic_seg example)."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "create a new bundle from a template (passes verify, runs as is)"
DESCRIPTION = """Create a new bundle NAME by copying a template bundle (default: synthetic_seg on the
search path): the template's name is replaced in its configs, metadata gets NAME, version 0.1.0, a
changelog entry, you as author and the installed monai/torch/numpy versions, and docs/README.md
says how to run, verify and share it. The new bundle passes `hpc-runner verify` and runs."""
EPILOG = """examples:
  hpc-runner init spleen_seg                      # creates bundles/spleen_seg
  hpc-runner init spleen_seg --from zoo_bundle --to ~/work/spleen_seg
  hpc-runner run --bundle spleen_seg --max_epochs 1"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the init options."""
    parser.add_argument("name", metavar="NAME", help="name of the new bundle (letters, digits, _)")
    parser.add_argument("--from", dest="template", metavar="DIR|NAME[@VERSION]",
                        help="template bundle (default: synthetic_seg)")
    parser.add_argument("--to", metavar="DIR", help="folder of the new bundle (default: bundles/NAME)")
    parser.add_argument("--author", help="authors field of the metadata (default: your user name)")


def main(args: argparse.Namespace) -> int:
    """Run the command."""
    from hpc_runner.registry.scaffold import init_bundle
    from hpc_runner.registry.search import resolve_bundle

    template = resolve_bundle(args.template) if args.template else None
    dest = Path(args.to) if args.to else Path("bundles") / args.name
    init_bundle(args.name, dest, template, author=args.author)
    print(f"created bundle {args.name} in {dest}")
    print(f"next: edit {dest}/configs, then 'hpc-runner verify {dest} --net' and "
          f"'hpc-runner run --bundle {dest} --max_epochs 1'")
    return 0

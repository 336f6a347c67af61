"""``hpc-runner init_bundle``: ``python -m monai.bundle init_bundle``, same arguments and outputs."""

from __future__ import annotations

import argparse

from hpc_runner.monai_cli.spec import INIT_BUNDLE as SPEC
from hpc_runner.monai_cli.spec import add_arguments as add_monai_arguments
from hpc_runner.monai_cli.spec import epilog_of

HELP = SPEC.help
DESCRIPTION = SPEC.description
EPILOG = epilog_of(SPEC)
ACCEPTS_OVERRIDES = SPEC.overrides


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add MONAI's arguments of init_bundle (positional in MONAI's order, or --name VALUE)."""
    add_monai_arguments(parser, SPEC)


def main(args: argparse.Namespace) -> int:
    """Run init_bundle here; 0 when done (bad input raises UserError: exit 2)."""
    from hpc_runner.monai_cli.commands import main_for

    return main_for(SPEC.name, args)

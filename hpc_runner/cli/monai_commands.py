"""``hpc-runner NAME`` for MONAI's bundle commands (``python -m monai.bundle NAME``): ckpt_export, onnx_export,
verify_metadata, verify_net_in_out, init_bundle, run_workflow. One command object per spec, same arguments and
outputs as MONAI (hpc_runner/monai_cli/spec.py); registered in the COMMANDS table as ``module:ATTRIBUTE``."""

from __future__ import annotations

import argparse

from hpc_runner.monai_cli.commands import main_for
from hpc_runner.monai_cli.spec import SPECS, CommandSpec, epilog_of
from hpc_runner.monai_cli.spec import add_arguments as add_monai_arguments


class MonaiCommand:
    """A command module's interface (HELP, DESCRIPTION, EPILOG, ACCEPTS_OVERRIDES, add_arguments, main) for a spec."""

    def __init__(self, spec: CommandSpec) -> None:
        self.spec = spec
        self.HELP = spec.help
        self.DESCRIPTION = spec.description
        self.EPILOG = epilog_of(spec)
        self.ACCEPTS_OVERRIDES = spec.overrides

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add MONAI's arguments of the command (positional in MONAI's order, or --name VALUE)."""
        add_monai_arguments(parser, self.spec)

    def main(self, args: argparse.Namespace) -> int:
        """Run the command here; 0 when done (bad input raises UserError: exit 2)."""
        return main_for(self.spec.name, args)


COMMANDS = {name: MonaiCommand(spec) for name, spec in SPECS.items()}

"""``python -m hpc_runner.tracking send RUN_DIR``."""

from __future__ import annotations

import argparse
import sys

from hpc_runner.errors import UserError
from hpc_runner.tracking import command


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the tracking command; 2 for bad input."""
    parser = argparse.ArgumentParser(prog="python -m hpc_runner.tracking", description=command.HELP)
    command.add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return command.main(args)
    except UserError as err:
        print(f"hpc-runner tracking: error: {err.paragraph()}", file=sys.stderr)
        return err.exit_code


if __name__ == "__main__":
    sys.exit(main())

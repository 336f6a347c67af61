"""``python -m hpc_runner``."""

from hpc_runner.cli import entry

entry()

"""``hpc-runner completion SHELL``: a tab-completion script for bash, zsh or tcsh, generated from the parsers
themselves (shtab), so it never drifts from the commands and options."""

from __future__ import annotations

import argparse

from hpc_runner.cli import build_parser

HELP = "print a shell completion script (bash, zsh, tcsh) made from the commands' own options"
DESCRIPTION = """Print a tab-completion script for SHELL: the commands, their options and the choices of
options such as --tracking, generated from hpc-runner's own argument parsers. Nothing is installed: load it
in your shell's start-up file."""
EPILOG = """examples:
  eval "$(hpc-runner completion bash)"          # in ~/.bashrc
  hpc-runner completion zsh > ~/.zfunc/_hpc-runner   # a folder on zsh's $fpath"""
SHELLS = ("bash", "zsh", "tcsh")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the shell argument."""
    parser.add_argument("shell", choices=SHELLS, help="the shell the script is for")


def main(args: argparse.Namespace) -> int:
    """Print the script."""
    import shtab  # a small, pure-Python dependency; imported by this command only

    parser, _ = build_parser()
    print(shtab.complete(parser, shell=args.shell))
    return 0

"""An mkdocs hook: the CLI reference page (cli.md) is generated from hpc-runner's own argparse parsers at each
build, so it cannot drift from the commands (``mkdocs build --strict`` in CI)."""

from __future__ import annotations

import os
from typing import Any

from mkdocs.structure.files import File, Files

from hpc_runner.cli import COMMAND_GROUPS, build_parser

PAGE = "cli.md"


def cli_reference() -> str:
    """Return the page: the top-level help, then each command's --help under its group."""
    os.environ["COLUMNS"] = "110"  # argparse wraps help at the terminal's width: the same page on every machine
    parser, subparsers = build_parser()
    out = ["# CLI reference", "",
           "Generated from the argument parsers at each docs build (`scripts/mkdocs_cli_reference.py`); the same "
           "text as `hpc-runner COMMAND --help`.", "", "```text", parser.format_help().rstrip(), "```", ""]
    for title, names in COMMAND_GROUPS.items():
        out += [f"## {title[0].upper()}{title[1:]}", ""]
        for name in names:
            out += [f"### `hpc-runner {name}`", "", "```text", subparsers[name].format_help().rstrip(), "```", ""]
    return "\n".join(out)


def on_files(files: Files, config: Any) -> Files:
    """Add the generated page to the site."""
    files.append(File.generated(config, PAGE, content=cli_reference()))
    return files

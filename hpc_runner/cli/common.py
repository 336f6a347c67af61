"""Options shared by the commands that load a bundle (run, config, submit, sweep, cache, verify)."""

from __future__ import annotations

import argparse
from typing import Any


def add_bundle_arguments(parser: argparse.ArgumentParser) -> None:
    """Add --bundle, --config_file, --meta_file and --args_file."""
    g = parser.add_argument_group("bundle")
    g.add_argument(
        "--bundle",
        metavar="DIR|NAME[@VERSION]",
        help="bundle folder, or a name on the search path ($HPCR_BUNDLE_PATH, then ./bundles); "
        "picks configs/train.* and configs/metadata.json",
    )
    g.add_argument(
        "--config_file",
        "--config-file",
        action="append",
        metavar="FILE[,FILE...]",
        help="config file(s), merged in order; repeatable or comma-separated (default: <bundle>/configs/train.*)",
    )
    g.add_argument(
        "--meta_file", "--meta-file", metavar="FILE", help="metadata file (default: <bundle>/configs/metadata.json)"
    )
    g.add_argument(
        "--args_file",
        "--args-file",
        metavar="FILE",
        help="YAML/JSON mapping of id: value overrides (below env and CLI)",
    )


def load_config_from_args(args: argparse.Namespace, **kwargs: Any):
    """Return the BundleConfig that the parsed arguments and overrides describe."""
    from hpc_runner.config.bundle_config import load_bundle_config
    from hpc_runner.config.overrides import parse_cli_overrides

    return load_bundle_config(
        bundle=args.bundle,
        config_files=args.config_file,
        meta_file=args.meta_file,
        args_file=args.args_file,
        cli_overrides=parse_cli_overrides(getattr(args, "override_tokens", [])),
        **kwargs,
    )

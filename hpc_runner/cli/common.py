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
    g.add_argument(
        "--trust",
        action="store_true",
        help="use the bundle even if its files no longer match its MANIFEST (see 'hpc-runner verify')",
    )
    g.add_argument(
        "--safe",
        action="store_true",
        help="refuse $ expressions and _target_ outside monai, torch, hpc_runner and the safe_targets of "
        "~/.config/hpc-runner/config.yaml ($HPCR_CONFIG)",
    )


def load_config_from_args(args: argparse.Namespace, **kwargs: Any):
    """Return the BundleConfig that the parsed arguments and overrides describe.

    A bundle whose files differ from its MANIFEST is refused unless ``--trust``; with ``--safe``
    the loaded config must be declarative and allow-listed.
    """
    from hpc_runner.config.bundle_config import load_bundle_config
    from hpc_runner.config.overrides import parse_cli_overrides
    from hpc_runner.registry.search import resolve_bundle
    from hpc_runner.registry.trust import check_trust

    bundle = args.bundle
    if bundle:
        # resolve once, so the folder checked is the folder loaded
        bundle_dir = resolve_bundle(str(bundle))
        check_trust(bundle_dir, trust=getattr(args, "trust", False))
        bundle = str(bundle_dir)
    cfg = load_bundle_config(
        bundle=bundle,
        config_files=args.config_file,
        meta_file=args.meta_file,
        args_file=args.args_file,
        cli_overrides=parse_cli_overrides(getattr(args, "override_tokens", [])),
        **kwargs,
    )
    if getattr(args, "safe", False):
        from hpc_runner.registry.safe_mode import check_safe

        check_safe(cfg)
    cfg.trusted = bool(getattr(args, "trust", False))
    cfg.safe = bool(getattr(args, "safe", False))
    return cfg

"""Options shared by the commands that load a bundle (run, config, submit, sweep, cache, verify)."""

from __future__ import annotations

import argparse
from typing import Any

# flags of `python -m monai.bundle run` that hpc-runner accepts but does not do yet: a clear exit 2,
# never "unknown id"
MONAI_FLAGS_NOT_DONE = {
    "tracking": "hpc-runner does not do experiment tracking yet (MONAI's --tracking adds MLflow handlers). "
    "Drop --tracking to run without it; the run dir already records the config, overrides, metrics and log",
    "init_id": "hpc-runner always runs the ids `initialize`, ENTRY and `finalize`; --init_id is not supported. "
    "Drop it, or rename the id in the config",
    "final_id": "hpc-runner always runs the ids `initialize`, ENTRY and `finalize`; --final_id is not supported. "
    "Drop it, or rename the id in the config",
}


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
        help="config file(s), merged in order; repeatable, comma-separated or a list as the model zoo writes it, "
        "\"['configs/train.json','configs/evaluate.json']\" (default: <bundle>/configs/train.*)",
    )
    g.add_argument(
        "--meta_file", "--meta-file", metavar="FILE",
        help="metadata file(s), merged in order (default: <bundle>/configs/metadata.json, else metadata.json "
        "beside the first config file, as MONAI)"
    )
    g.add_argument(
        "--args_file",
        "--args-file",
        metavar="FILE",
        help="YAML/JSON mapping of id: value overrides (below env and CLI)",
    )
    g.add_argument(
        "--logging_file",
        "--logging-file",
        metavar="FILE|False",
        help="logging INI file applied with logging.config.fileConfig before the run, as MONAI does "
        "(default: logging.conf beside the first config file; False: leave logging alone)",
    )
    g.add_argument("--run_id", "--run-id", metavar="ID", help="MONAI's spelling of ENTRY (the id to run)")
    for flag in MONAI_FLAGS_NOT_DONE:
        g.add_argument(f"--{flag}", metavar="VALUE", help=argparse.SUPPRESS)
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


def add_preflight_argument(parser: argparse.ArgumentParser) -> None:
    """Add --no-preflight (run, submit, sweep, resume)."""
    parser.add_argument(
        "--no-preflight",
        "--no_preflight",
        dest="no_preflight",
        action="store_true",
        help="skip the pre-flight (every _target_ imports, every $ expression compiles, input paths exist, "
        "sbatch --test-only accepts the resources)",
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

    _check_monai_flags(args)
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
        logging_file=getattr(args, "logging_file", None),
        **kwargs,
    )
    if getattr(args, "safe", False):
        from hpc_runner.registry.safe_mode import check_safe

        check_safe(cfg)
    cfg.trusted = bool(getattr(args, "trust", False))
    cfg.safe = bool(getattr(args, "safe", False))
    return cfg


def _check_monai_flags(args: argparse.Namespace) -> None:
    """Refuse MONAI run flags hpc-runner does not do (one paragraph, exit 2); map --run_id to ENTRY."""
    from hpc_runner.config.overrides import load_args_file
    from hpc_runner.errors import UserError

    options: dict[str, Any] = {}
    if getattr(args, "args_file", None):
        options = load_args_file(args.args_file)[1]  # MONAI's args_file may set these too
    for flag, why in MONAI_FLAGS_NOT_DONE.items():
        value = getattr(args, flag, None)
        where = None
        if value is None and options.get(flag) is not None:
            value, where = options[flag], str(args.args_file)
        if value is not None:
            raise UserError(f"--{flag} {value}: {why}", where=where)
    run_id = getattr(args, "run_id", None) or options.get("run_id")
    if run_id is not None and hasattr(args, "entry"):
        if args.entry and args.entry != run_id:
            raise UserError(f"ENTRY '{args.entry}' and --run_id '{run_id}' disagree",
                            expected="one of them (both name the id to run)")
        args.entry = str(run_id)

"""Run one of MONAI's bundle subcommands here, from parsed arguments or from an argv list (what a job does)."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Sequence
from typing import Any

from hpc_runner.config.argv import split_overrides
from hpc_runner.config.verify_net import net_io_info
from hpc_runner.errors import BundleError, UserError
from hpc_runner.monai_cli.arguments import check_files, load_config_parser, load_file, merge_args, require
from hpc_runner.monai_cli.spec import SPECS, CommandSpec, add_arguments, extra_options, options_from_args
from hpc_runner.registry.scaffold import _init_weights

# name -> "module:function" checking everything a run needs and returning the plan, without doing the work
# (the pre-flight of `hpc-runner submit NAME ...`)
PREPARE = {
    "ckpt_export": "hpc_runner.export.torchscript:prepare_ckpt_export",
    "onnx_export": "hpc_runner.export.onnx_model:prepare_onnx_export",
    "run_workflow": "hpc_runner.monai_cli.workflow:plan_workflow",
}


def _function(path: str) -> Callable[..., Any]:
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


def command_parser(name: str) -> argparse.ArgumentParser:
    """Return a parser for command ``name`` alone (the job re-parses its argv with it)."""
    spec = SPECS[name]
    parser = argparse.ArgumentParser(prog=f"hpc-runner {name}", allow_abbrev=False)
    parser.add_argument("--debug", action="store_true")
    add_arguments(parser, spec)
    return parser


def parse_argv(name: str, argv: Sequence[str]) -> argparse.Namespace:
    """Parse the arguments of ``hpc-runner NAME ARGV...`` as the CLI does (unknown --id value: overrides)."""
    parser = command_parser(name)
    known, overrides = split_overrides(parser, list(argv))
    try:
        args, unknown = parser.parse_known_args(known)
    except SystemExit:
        raise UserError(f"the arguments of {name} cannot be parsed: {' '.join(argv)}") from None
    if unknown:
        raise UserError(f"{name}: unrecognized arguments: {' '.join(unknown)}")
    args.override_tokens = overrides
    return args


def keyword_arguments(spec: CommandSpec, args: argparse.Namespace) -> dict[str, Any]:
    """Return everything the API function of ``spec`` is called with (MONAI's arguments and hpc-runner's own)."""
    return {**options_from_args(spec, args), **extra_options(spec, args)}


def run_parsed(name: str, args: argparse.Namespace) -> Any:
    """Run command ``name`` with parsed arguments; return what its API function returns."""
    spec = SPECS[name]
    function, kwargs = _function(spec.api), keyword_arguments(spec, args)
    _refuse_missing(spec, function, kwargs)
    return function(**kwargs)


def _refuse_missing(spec: CommandSpec, function: Callable[..., Any], kwargs: dict[str, Any]) -> None:
    """Refuse, in one paragraph, a call that lacks an argument the API function cannot go without (``init_bundle``
    with no folder: Python's TypeError otherwise)."""
    import inspect

    for param in inspect.signature(function).parameters.values():
        needed = param.default is param.empty and param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY)
        if needed and kwargs.get(param.name) is None:
            names = [p.name for p in spec.params]
            what = next((p.help for p in spec.params if p.name == param.name), param.name)
            where = "the first of MONAI's arguments" if names[:1] == [param.name] else "an argument"
            raise UserError(f"{spec.name} needs --{param.name}", expected=f"{what}: {where}, or --{param.name} VALUE",
                            hint="Give it in the --args_file" if "args_file" in names else None)


def prepare_parsed(name: str, args: argparse.Namespace) -> Any:
    """Check command ``name`` as far as possible without doing its work (the submit pre-flight)."""
    spec = SPECS[name]
    kwargs = keyword_arguments(spec, args)
    if name == "verify_metadata":
        return _preflight_verify_metadata(kwargs)
    if name == "verify_net_in_out":
        return _preflight_verify_net(kwargs)
    if name == "init_bundle":
        return _preflight_init_bundle(kwargs)
    kwargs.pop("trust", None)
    return _function(PREPARE[name])(**kwargs)


def _preflight_verify_metadata(kwargs: dict) -> None:
    schema = kwargs.pop("schema", None)
    args = merge_args("verify_metadata", kwargs.pop("args_file", None), **kwargs)
    check_files(require(args, "meta_file", "verify_metadata", "the metadata file to verify"), "the metadata file")
    if schema is not None:
        load_file(str(schema), "the schema file (--schema)")
    else:
        require(args, "filepath", "verify_metadata", "where the schema file is kept, or --schema FILE")


def _preflight_verify_net(kwargs: dict) -> None:
    args = merge_args("verify_net_in_out", kwargs.pop("args_file", None), **kwargs)
    config_file = require(args, "config_file", "verify_net_in_out", "the config file(s) that define the network")
    meta_file = require(args, "meta_file", "verify_net_in_out", "the metadata file with network_data_format")
    rest = {k: v for k, v in args.items() if k not in ("config_file", "meta_file", "net_id", "device", "p", "n", "any",
                                                       "extra_forward_args")}
    net_io_info(load_config_parser(config_file, meta_file, rest))


def _preflight_init_bundle(kwargs: dict) -> None:
    from pathlib import Path

    bundle = Path(str(kwargs.get("bundle_dir", ""))).absolute()
    if not kwargs.get("bundle_dir"):
        raise BundleError("init_bundle needs the bundle folder to create", expected="init_bundle DIR [CKPT]")
    if bundle.exists():
        raise BundleError(f"Specified bundle directory '{bundle}' already exists")
    if not bundle.parent.is_dir():
        raise BundleError(f"Parent directory of specified bundle directory '{bundle}' does not exist")
    if kwargs.get("ckpt_file") is not None:
        _init_weights(kwargs["ckpt_file"])


def main_for(name: str, args: argparse.Namespace) -> int:
    """The ``main`` of the command module ``name``: run it here; 0 when done (errors raise UserError)."""
    run_parsed(name, args)
    return 0

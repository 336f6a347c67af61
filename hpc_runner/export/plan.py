"""What an export will do, checked before anything is converted: MONAI's argument rules for ckpt_export and
onnx_export, with each bad input refused in one paragraph (the pre-flight of ``submit`` runs this too).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpc_runner.config.verify_net import fake_input_shape
from hpc_runner.errors import ConfigError, UserError
from hpc_runner.export.weights import load_weights, resolve_ckpt
from hpc_runner.monai_cli.arguments import (
    check_writable_file,
    config_paths,
    load_config_parser,
    load_file,
    parsed_content,
    require,
)


@dataclass
class ExportPlan:
    """A checked export: the parser, the built network, the weights to load and the file to write."""

    tag: str
    parser: Any
    net_id: str
    network: Any
    filepath: str  # as given (MONAI logs this)
    target: Path  # the file written (ckpt_export adds .ts to a name without suffix)
    ckpt: Path
    key_in_ckpt: str
    config_files: list[str]
    use_trace: bool
    input_shape: list[int] | None
    converter_kwargs: dict = field(default_factory=dict)


def _config_names(config_file: Any) -> list[str]:
    names = config_paths(config_file)
    seen: set[str] = set()
    for name in names:
        stem = os.path.splitext(os.path.basename(name))[0]
        if stem in seen:  # each is stored in the export as <stem>.json
            raise ConfigError(f"Filename part '{stem}' is given multiple times in config file list",
                              expected="config files with different names (each is saved as <name>.json)")
        seen.add(stem)
    return names


def config_extra_files(config_files: list[str]) -> dict[str, bytes]:
    """Return each config file as ``<name>.json`` (JSON whatever its format), as MONAI stores them."""
    return {os.path.splitext(os.path.basename(f))[0] + ".json": json.dumps(load_file(f, "the config file")).encode()
            for f in config_files}


def _input_shape(parser: Any, input_shape: Any) -> list[int]:
    shape = list(input_shape) if input_shape else list(fake_input_shape(parser))
    if not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in shape):
        raise ConfigError(f"the input shape {shape} is not a list of positive whole numbers",
                          expected="--input_shape \"[1, 1, 96, 96, 96]\" or network_data_format in the metadata")
    return shape


def plan_ckpt_export(args: dict) -> ExportPlan:
    """Check MONAI's ckpt_export arguments (after the args_file merge) and build the network."""
    tag = "ckpt_export"
    args = dict(args)
    config_file = require(args, "config_file", tag, "the config file(s) that define the network, e.g. "
                          "--config_file configs/inference.json")
    args.pop("config_file")
    filepath, ckpt_file, net_id, meta_file = (args.pop(k, None) for k in ("filepath", "ckpt_file", "net_id",
                                                                              "meta_file"))
    key = args.pop("key_in_ckpt", "") or ""
    use_trace = bool(args.pop("use_trace", False))
    input_shape = args.pop("input_shape", None)
    converter_kwargs = dict(args.pop("converter_kwargs", {}) or {})
    bundle_root = args.get("bundle_root", os.getcwd())  # an override too, as in MONAI
    names = _config_names(config_file)
    meta = os.path.join(str(bundle_root), "configs", "metadata.json") if meta_file is None else meta_file

    has_meta = all(os.path.exists(m) for m in config_paths(meta))  # MONAI reads it only when it exists
    parser = load_config_parser(config_file, meta if has_meta else None, args)
    filepath = os.path.join(str(bundle_root), "models", "model.ts") if filepath is None else filepath
    ckpt_file = os.path.join(str(bundle_root), "models", "model.pt") if ckpt_file is None else ckpt_file
    ckpt, key = resolve_ckpt(ckpt_file, key)
    stem, ext = os.path.splitext(str(filepath))
    target = check_writable_file(stem + (ext or ".ts"), "the export file (--filepath)")
    net_id = "network_def" if net_id is None else net_id
    network = parsed_content(parser, net_id, "the network definition", config_file)
    if (not input_shape) and use_trace:
        input_shape = _input_shape(parser, None)
    return ExportPlan(tag, parser, net_id, network, str(filepath), target, ckpt, key, names, use_trace,
                      list(input_shape) if input_shape else None, converter_kwargs)


def plan_onnx_export(args: dict) -> ExportPlan:
    """Check MONAI's onnx_export arguments (after the args_file merge) and build the network."""
    tag = "onnx_export"
    args = dict(args)
    filepath = require(args, "filepath", tag, "the ONNX file to write, e.g. --filepath models/model.onnx")
    ckpt_file = require(args, "ckpt_file", tag, "the weights, e.g. --ckpt_file models/model.pt")
    config_file = require(args, "config_file", tag, "the config file(s) that define the network")
    for k in ("filepath", "ckpt_file", "config_file"):
        args.pop(k)
    net_id = args.pop("net_id", "")
    meta_file = args.pop("meta_file", None)
    key = args.pop("key_in_ckpt", "") or ""
    use_trace = bool(args.pop("use_trace", False))
    input_shape = args.pop("input_shape", None)
    converter_kwargs = dict(args.pop("converter_kwargs", {}) or {})
    names = _config_names(config_file)
    parser = load_config_parser(config_file, meta_file, args)
    ckpt, key = resolve_ckpt(ckpt_file, key)
    target = check_writable_file(filepath, "the export file (--filepath)")
    shape = _input_shape(parser, input_shape)  # ONNX always needs an example input
    network = parsed_content(parser, net_id, "the network definition", config_file)
    return ExportPlan(tag, parser, net_id, network, str(filepath), target, ckpt, key, names, use_trace, shape,
                      converter_kwargs)


def load_plan_weights(plan: ExportPlan) -> Any:
    """Load the plan's weights into its network (MONAI's rules, on the CPU); return the network."""
    import torch

    if not isinstance(plan.network, torch.nn.Module):
        raise ConfigError(f"'{plan.net_id}' builds a {type(plan.network).__name__}, not a torch.nn.Module",
                          id_path=plan.net_id or None, hint="Name the network's id as the first argument (net_id)")
    load_weights(plan.network, plan.ckpt, plan.key_in_ckpt)
    return plan.network


def conversion_error(tag: str, plan: ExportPlan, exc: BaseException) -> UserError:
    """The one-paragraph error for a network the converter refuses."""
    first = (str(exc).strip().splitlines() or [""])[0][:400]
    hint = ("Scripting needs TorchScript-compatible code: try --use_trace True (with --input_shape or "
            "network_data_format in the metadata)" if not plan.use_trace else
            "Check --input_shape (or the metadata's network_data_format) against the network")
    return UserError(f"{tag} cannot convert '{plan.net_id}': {type(exc).__name__}: {first}", hint=hint)

"""The arguments of MONAI's bundle subcommands, as ``python -m monai.bundle`` (Python Fire) accepts them.

Standard library only: the command modules build their parsers from this at ``--help`` time.

Fire's ways are kept: parameters in MONAI's order may be given positionally (``ckpt_export network_def``)
or as ``--name value`` (``--name=value``, ``--name-with-dashes``); a one-letter parameter also as ``-n 4``;
a bool option alone (``--use_trace``) means True; any other ``--id value`` is an override of the config
(or, for run_workflow, a keyword of the workflow class). Values are typed as hpc-runner types every CLI
value (YAML 1.2, ``hpc_runner.config.values.parse_value``), and MONAI's spellings (``True``, ``None``,
``"[1, 1, 96, 96, 96]"``, ``"(1,1,96,96,96)"``, ``"['a.json','b.json']"``) mean what they mean there.
"""

from __future__ import annotations

import argparse
import ast
from dataclasses import dataclass
from typing import Any

from hpc_runner.config.values import parse_value
from hpc_runner.errors import UserError

# how an option's text becomes a value
STR, FILES, BOOL, INT, SHAPE, MAPPING, VALUE = "str", "files", "bool", "int", "shape", "mapping", "value"


@dataclass(frozen=True)
class Param:
    """One parameter of a MONAI bundle function."""

    name: str
    kind: str
    help: str
    short: str | None = None


@dataclass(frozen=True)
class CommandSpec:
    """A MONAI bundle subcommand: its parameters in MONAI's order and the hpc-runner function doing it."""

    name: str
    params: tuple[Param, ...]
    overrides: bool  # MONAI's **override / **kwargs: unknown --id value pairs are passed on
    api: str  # "module:function" called with the MONAI keyword arguments
    help: str
    description: str
    epilog: str
    override_help: str = ""


_META = Param("meta_file", FILES, "metadata file, or a list of them merged in order")
_ARGS = Param("args_file", STR, "JSON/YAML file with default values for any of these arguments and overrides")
_CKPT = Param("ckpt_file", STR, "the weights to load: a state_dict file (MONAI's model.pt), a checkpoint with "
              "--key_in_ckpt, or an hpc-runner run dir (its model.pt)")
_KEY = Param("key_in_ckpt", STR, "key of the weights in a nested checkpoint such as {'model': ..., 'optimizer': ...}")
_TRACE = Param("use_trace", BOOL, "True: torch.jit.trace instead of torch.jit.script")
_SHAPE = Param("input_shape", SHAPE, "input shape for tracing, e.g. \"[1, 1, 96, 96, 96]\" (default: from metadata's "
               "network_data_format)")
_CONVERTER = Param("converter_kwargs", MAPPING, "more keyword arguments of MONAI's converter, e.g. \"{verify: True}\"")

_OVERRIDES = ("any other --ID VALUE sets that config id (`#` or `::`), "
              "e.g. --_meta_::network_data_format::inputs::image::num_channels 3")

CKPT_EXPORT = CommandSpec(
    name="ckpt_export",
    params=(
        Param("net_id", STR, "id of the network in the config (default network_def)"),
        Param("filepath", STR, "the TorchScript file to write; '.ts' is added to a name without suffix "
              "(default <bundle_root>/models/model.ts)"),
        Param("ckpt_file", STR, _CKPT.help + " (default <bundle_root>/models/model.pt)"),
        Param("meta_file", FILES, _META.help + " (default <bundle_root>/configs/metadata.json when it exists)"),
        Param("config_file", FILES, "config file(s) holding the network; each is also saved in the .ts as "
              "<name>.json (a list: \"['configs/inference.json','more.yaml']\")"),
        _KEY, _TRACE, _SHAPE, _ARGS, _CONVERTER,
    ),
    overrides=True,
    api="hpc_runner.export.torchscript:ckpt_export",
    help="MONAI's ckpt_export: a checkpoint to TorchScript with its metadata and configs inside",
    description="""Export the weights of a bundle's network to TorchScript, as `python -m monai.bundle ckpt_export`
does, with the same arguments and defaults: the .ts holds metadata.json (the bundle's metadata) and
each config file as <name>.json. --bundle_root DIR (an override, as in MONAI) sets where the defaults
models/model.pt, models/model.ts and configs/metadata.json are looked for (default: the working dir).
--ckpt_file may name an hpc-runner run dir: its model.pt (else its newest checkpoints/ckpt_*.pt, key
'network'). The file is written atomically; bad input exits 2 with one paragraph.""",
    epilog="""examples:
  hpc-runner ckpt_export network_def --filepath models/model.ts --ckpt_file models/model.pt \\
      --meta_file configs/metadata.json --config_file configs/inference.json
  hpc-runner ckpt_export --config_file configs/inference.json --bundle_root . --ckpt_file runs/seg/2026-11-25_10-00-00
  hpc-runner submit ckpt_export network_def --config_file configs/inference.json --cluster slurm""",
    override_help=_OVERRIDES,
)

ONNX_EXPORT = CommandSpec(
    name="onnx_export",
    params=(
        Param("net_id", STR, "id of the network in the config"),
        Param("filepath", STR, "the ONNX file to write"),
        _CKPT, _META,
        Param("config_file", FILES, "config file(s) holding the network (a list is merged in order)"),
        _KEY,
        Param("use_trace", BOOL, "passed to MONAI's convert_to_onnx (default False)"),
        _SHAPE, _ARGS, _CONVERTER,
    ),
    overrides=True,
    api="hpc_runner.export.onnx_model:onnx_export",
    help="MONAI's onnx_export: a checkpoint to an ONNX model (needs the onnx package)",
    description="""Export the weights of a bundle's network to ONNX, as `python -m monai.bundle onnx_export` does,
with the same arguments and defaults (needs `pip install 'hpc-bundle-runner[onnx]'`: onnx and onnxscript).
--ckpt_file may name an hpc-runner run dir (its model.pt). The file is written atomically.""",
    epilog="""examples:
  hpc-runner onnx_export network_def --filepath models/model.onnx --ckpt_file models/model.pt \\
      --meta_file configs/metadata.json --config_file configs/inference.json --input_shape "[1, 1, 96, 96, 96]\"""",
    override_help=_OVERRIDES,
)

VERIFY_METADATA = CommandSpec(
    name="verify_metadata",
    params=(
        Param("meta_file", FILES, "the metadata file to verify (a list is merged in order)"),
        Param("filepath", STR, "where the schema file is kept: used as is when it exists (checked against "
              "--hash_val), else the metadata's `schema` URL is downloaded to it"),
        Param("create_dir", BOOL, "create the folder of --filepath if missing (default True)"),
        Param("hash_val", STR, "expected hash of the schema file"),
        Param("hash_type", STR, "md5 (default), sha1, sha256 or sha512"),
        _ARGS,
    ),
    overrides=True,
    api="hpc_runner.monai_cli.verify_metadata:verify_metadata",
    help="MONAI's verify_metadata: check metadata.json against the JSON schema its `schema` field names",
    description="""Verify a bundle's metadata against the JSON schema named by its `schema` URL, as
`python -m monai.bundle verify_metadata` does: the schema is downloaded to --filepath unless that file
exists already (then it is used, checked against --hash_val when given). Offline, put the schema file
at --filepath first, or pass --schema FILE to validate against a local schema without any URL.
(`hpc-runner verify` is hpc-runner's own, wider check of a bundle.)""",
    epilog="""examples:
  hpc-runner verify_metadata --meta_file configs/metadata.json --filepath schema/meta_schema.json
  hpc-runner verify_metadata --meta_file configs/metadata.json --schema ~/schemas/meta_schema_20240725.json""",
    override_help="any other --NAME VALUE is passed to jsonschema.validate, as in MONAI",
)

VERIFY_NET_IN_OUT = CommandSpec(
    name="verify_net_in_out",
    params=(
        Param("net_id", STR, "id of the network in the config"),
        Param("meta_file", FILES, "metadata file(s) with network_data_format"),
        Param("config_file", FILES, "config file(s) holding the network"),
        Param("device", STR, "device for the forward pass (default cuda:0 when there is a GPU, else cpu)"),
        Param("p", INT, "value of p in spatial_shape patterns such as \"2**p\" (default 1)", short="-p"),
        Param("n", INT, "value of n in spatial_shape patterns such as \"16*n\" (default 1)", short="-n"),
        Param("any", INT, "size used for \"*\" in spatial_shape (default 1)"),
        Param("extra_forward_args", MAPPING, "more keyword arguments of the network's forward"),
        _ARGS,
    ),
    overrides=True,
    api="hpc_runner.monai_cli.verify_net_in_out:verify_net_in_out",
    help="MONAI's verify_net_in_out: run the network on a dummy input shaped as its metadata says",
    description="""Build the network, run a random input of the shape and dtype that metadata's
network_data_format gives, and check the output's channels and dtype, as
`python -m monai.bundle verify_net_in_out` does (`hpc-runner verify --net` is hpc-runner's own check).""",
    epilog="""examples:
  hpc-runner verify_net_in_out network_def --meta_file configs/metadata.json --config_file configs/inference.json
  hpc-runner verify_net_in_out network_def --meta_file m.json --config_file c.json -n 4 --any 16 \\
      --_meta_::network_data_format::inputs::image::spatial_shape "[16,'*','2**p*n']\"""",
    override_help=_OVERRIDES,
)

INIT_BUNDLE = CommandSpec(
    name="init_bundle",
    params=(
        Param("bundle_dir", STR, "the bundle folder to create (it must not exist; its parent must)"),
        Param("ckpt_file", STR, "weights to copy into models/model.pt (a file, or an hpc-runner run dir)"),
        Param("network", VALUE, argparse.SUPPRESS),
        Param("dataset_license", BOOL, "True: also write docs/data_license.txt"),
        Param("metadata_str", VALUE, "content of configs/metadata.json (text, or a mapping written as JSON)"),
        Param("inference_str", VALUE, "content of configs/inference.json (text, or a mapping written as JSON)"),
    ),
    overrides=False,
    api="hpc_runner.registry.scaffold:init_monai_bundle",
    help="MONAI's init_bundle: a new bundle folder with MONAI's default configs (and weights)",
    description="""Create a bundle folder with MONAI's default metadata.json, inference.json, docs/README.md and
LICENSE (and models/model.pt), as `python -m monai.bundle init_bundle` does. It is built in a temporary
folder and renamed, so a failure leaves nothing half-made. (`hpc-runner init` makes a bundle from a
template with hpc-runner's own layout.)""",
    epilog="""examples:
  hpc-runner init_bundle my_bundle models/model.pt --dataset_license True
  hpc-runner init_bundle my_bundle runs/seg/2026-11-25_10-00-00""",
)

RUN_WORKFLOW = CommandSpec(
    name="run_workflow",
    params=(
        Param("workflow_name", STR, "the BundleWorkflow class: a name in monai.bundle (ConfigWorkflow, the "
              "default) or a dotted path such as scripts.workflow.MyWorkflow (a PythonicWorkflow too)"),
        _ARGS,
    ),
    overrides=True,
    api="hpc_runner.monai_cli.workflow:run_workflow",
    help="MONAI's run_workflow: create a BundleWorkflow, check its properties, run and finalize it",
    description="""Create the workflow as `python -m monai.bundle run_workflow` does (every other --NAME VALUE is
a keyword of the workflow class: for ConfigWorkflow --config_file, --meta_file, --run_id, --workflow_type,
--logging_file, --tracking and config overrides), then initialize, run and finalize it. With
--workflow_type, the workflow's check_properties() runs before it does: missing required properties are
reported (and refused by `hpc-runner submit run_workflow ...` before anything is queued).""",
    epilog="""examples:
  hpc-runner run_workflow --run_id training --config_file configs/train.json --meta_file configs/metadata.json
  hpc-runner run_workflow --workflow_name scripts.infer.MyWorkflow --workflow_type infer --dataset_dir /data
  hpc-runner submit run_workflow --config_file configs/train.json --workflow_type train --cluster slurm""",
    override_help="any other --NAME VALUE is a keyword of the workflow class (ConfigWorkflow: a config override)",
)

SPECS: dict[str, CommandSpec] = {
    s.name: s for s in (CKPT_EXPORT, ONNX_EXPORT, VERIFY_METADATA, VERIFY_NET_IN_OUT, INIT_BUNDLE, RUN_WORKFLOW)
}

# hpc-runner's own options of these commands (not MONAI arguments)
EXTRA_OPTIONS: dict[str, tuple[tuple[str, dict[str, Any]], ...]] = {
    "verify_metadata": (
        ("--schema", {"metavar": "FILE", "help": "validate against this local JSON schema file instead of the "
                      "metadata's `schema` URL (no download, no --filepath needed)"}),
    ),
    "run_workflow": (
        ("--trust", {"action": "store_true", "help": "the config is trusted: leave out MONAI's warning that "
                     "parsing a config runs its code"}),
    ),
}


def add_arguments(parser: argparse.ArgumentParser, spec: CommandSpec) -> None:
    """Add the MONAI arguments of ``spec`` (positional in MONAI's order, or --name) to ``parser``."""
    names = [p.name for p in spec.params if p.help != argparse.SUPPRESS]
    parser.add_argument("positional", nargs="*", metavar=names[0].upper(),
                        help=f"MONAI's arguments in order ({', '.join(names)}), as Fire takes them")
    group = parser.add_argument_group(f"arguments of monai.bundle {spec.name}")
    for p in spec.params:
        flags = [f"--{p.name}"] + ([f"--{p.name.replace('_', '-')}"] if "_" in p.name else [])
        if p.short:
            flags.insert(0, p.short)
        kwargs: dict[str, Any] = {"dest": p.name, "help": p.help, "metavar": "VALUE"}
        if p.kind == BOOL:
            kwargs.update(nargs="?", const="True", metavar="True|False")
        group.add_argument(*flags, **kwargs)
    for flag, kwargs in EXTRA_OPTIONS.get(spec.name, ()):
        group.add_argument(flag, **kwargs)


def epilog_of(spec: CommandSpec) -> str:
    """Return the command's help epilog: examples, then what other --ID VALUE pairs do."""
    return f"{spec.epilog}\n\n{spec.override_help}" if spec.override_help else spec.epilog


def _type_error(spec: CommandSpec, name: str, text: str, expected: str) -> UserError:
    return UserError(f"{spec.name} --{name} {text!r} cannot be used", expected=expected)


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


def type_value(spec: CommandSpec, param: Param, value: Any) -> Any:
    """Return the option text ``value`` typed as ``param`` needs (MONAI's spellings accepted)."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text == "None":  # Fire's spelling of "not given"
        return None
    if param.kind == STR:
        return value
    if param.kind == FILES:
        if text.startswith(("[", "(")):
            parsed = parse_value(text, what=f"--{param.name}") if text.startswith("[") else _literal(text)
            if isinstance(parsed, list | tuple) and all(isinstance(v, str) for v in parsed):
                return list(parsed)
            raise _type_error(spec, param.name, value, "a file name or a list of them, e.g. \"['a.json','b.json']\"")
        return value
    if param.kind == BOOL:
        parsed = parse_value(text, what=f"--{param.name}")
        if isinstance(parsed, bool):
            return parsed
        if parsed in (0, 1):
            return bool(parsed)
        raise _type_error(spec, param.name, value, "True or False")
    if param.kind == INT:
        parsed = parse_value(text, what=f"--{param.name}")
        if isinstance(parsed, int) and not isinstance(parsed, bool):
            return parsed
        raise _type_error(spec, param.name, value, "a whole number")
    if param.kind == SHAPE:
        parsed = _literal(text) if text.startswith("(") else parse_value(text, what=f"--{param.name}")
        if isinstance(parsed, list | tuple) and parsed and all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in parsed
        ):
            return list(parsed)
        raise _type_error(spec, param.name, value, "a list of positive whole numbers such as \"[1, 1, 96, 96, 96]\"")
    if param.kind == MAPPING:
        parsed = parse_value(text, what=f"--{param.name}")
        if isinstance(parsed, dict):
            return parsed
        raise _type_error(spec, param.name, value, "a mapping such as \"{verify: True}\"")
    return parse_value(value, what=f"--{param.name}")


def override_pairs(spec: CommandSpec, tokens: list[str]) -> dict[str, Any]:
    """Return the ``--id value`` override tokens as {id: typed value} (``--id=value`` too), in order."""
    pairs: dict[str, Any] = {}
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if not tok.startswith("--") or len(tok) < 3:
            raise UserError(f"{spec.name}: unexpected argument {tok!r}",
                            expected="--ID VALUE pairs after the command's own options")
        if "=" in tok:
            key, text = tok[2:].split("=", 1)
            i += 1
        else:
            if i + 1 >= len(tokens):
                raise UserError(f"{spec.name}: {tok} has no value", expected=f"{tok} VALUE")
            key, text = tok[2:], tokens[i + 1]
            i += 2
        pairs[key] = parse_value(text, what=f"--{key}")
    return pairs


def options_from_args(spec: CommandSpec, args: argparse.Namespace) -> dict[str, Any]:
    """Return the keyword arguments of MONAI's function that the parsed ``args`` give, as Fire would."""
    given = {p.name: getattr(args, p.name, None) for p in spec.params}
    free = [p for p in spec.params if given[p.name] is None and p.help != argparse.SUPPRESS]
    positional = list(getattr(args, "positional", None) or [])
    if len(positional) > len(free):
        extra = positional[len(free):]
        raise UserError(f"{spec.name}: too many positional arguments ({' '.join(extra)})",
                        expected=f"at most {len(free)}: {', '.join(p.name for p in free)} (in this order)")
    for p, value in zip(free, positional):
        given[p.name] = value
    by_name = {p.name: p for p in spec.params}
    typed = {name: type_value(spec, by_name[name], value) for name, value in given.items() if value is not None}
    options = {name: value for name, value in typed.items() if value is not None}  # Fire's None: not given
    if getattr(args, "network", None) is not None:
        raise UserError("init_bundle --network needs a torch.nn.Module (Python only)", expected="--ckpt_file FILE")
    tokens = list(getattr(args, "override_tokens", None) or [])
    if tokens and not spec.overrides:
        raise UserError(f"{spec.name} takes no {tokens[0]}", expected=", ".join(f"--{p.name}" for p in spec.params
                                                                              if p.help != argparse.SUPPRESS))
    options.update(override_pairs(spec, tokens))
    return options


def extra_options(spec: CommandSpec, args: argparse.Namespace) -> dict[str, Any]:
    """Return hpc-runner's own options of the command (``--schema``, ``--trust``) that were given."""
    out = {}
    for flag, _ in EXTRA_OPTIONS.get(spec.name, ()):
        value = getattr(args, flag.lstrip("-").replace("-", "_"), None)
        if value not in (None, False):
            out[flag.lstrip("-").replace("-", "_")] = value
    return out

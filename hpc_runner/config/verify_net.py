"""Build the network and check it against ``network_data_format`` on a dummy input.

``net_problems`` is ``hpc-runner verify --net``; MONAI's subcommand ``verify_net_in_out`` (its arguments,
defaults and checks) is ``monai_cli/verify_net_in_out.py``, built on ``net_io_info`` and ``fake_spatial_shape``.

The same checks as ``monai.bundle verify_net_in_out``: input ``image`` (else the first input) of shape
``(1, num_channels, *spatial_shape)`` with ``n = p = 1`` and ``* = 1`` in shape patterns such as
``"16*n"``; output ``pred`` (else the first output) must have ``num_channels`` channels and the dtype;
here its spatial shape is checked too when the metadata gives one without ``*``.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Mapping, Sequence
from typing import Any

from hpc_runner.config.bundle_config import BundleConfig
from hpc_runner.config.ids import has_id
from hpc_runner.config.monai_bridge import build_parser, bundle_on_sys_path, failing_id
from hpc_runner.errors import ConfigError
from hpc_runner.records.shape import parse_expression
from hpc_runner.registry.problems import Problem

NDF = "network_data_format"
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Pow: operator.pow,
        ast.FloorDiv: operator.floordiv, ast.Div: lambda a, b: int(a / b)}  # MONAI: int() of numpy's result
# bounds checked before anything is computed or allocated: a pattern's every value (``(9**16)**16...`` would
# take minutes and gigabytes), and the dummy input's elements (128 MiB of float32; 256**3 is 16.8 million)
MAX_SHAPE_VALUE = 1 << 20
MAX_INPUT_ELEMENTS = 1 << 25


def shape_value(item: int | str, n: int = 1, p: int = 1) -> int | None:
    """Return one spatial size from a metadata pattern (``32``, ``"16*n"``, ``"2**p"``); None for ``"*"``."""
    if isinstance(item, bool) or not isinstance(item, int | str):
        raise ValueError(f"{item!r} is not a size or a shape pattern")
    if isinstance(item, int):
        return _bounded(item, item)
    if item.strip() == "*":
        return None

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name) and node.id in ("n", "p"):
            return n if node.id == "n" else p
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            right = ev(node.right)
            if isinstance(node.op, ast.Pow) and right > 16:
                raise ValueError("exponent too large")
            left = ev(node.left)  # both at most MAX_SHAPE_VALUE, so left ** 16 has at most 336 bits
            return _bounded(_OPS[type(node.op)](left, right), item)
        raise ValueError(f"unsupported shape pattern {item!r}")

    try:
        tree = parse_expression(item, mode="eval")
    except ConfigError as err:
        raise ValueError(f"shape pattern {item[:40]!r}: {err.message}") from None
    return int(ev(tree))


def _bounded(value: int, item: int | str) -> int:
    if abs(value) > MAX_SHAPE_VALUE:
        raise ValueError(f"{str(item)[:40]!r} makes a size over {MAX_SHAPE_VALUE:,}")
    return value


def _pick(section: Mapping[str, Any], preferred: str) -> tuple[str, Mapping[str, Any]] | None:
    if not isinstance(section, Mapping) or not section:
        return None
    key = preferred if preferred in section else next(iter(section))
    return key, section[key]


def net_problems(cfg: BundleConfig, net_id: str = "network_def") -> tuple[list[Problem], str | None]:
    """Instantiate ``net_id``, run a dummy input through it; return problems and a one-line summary."""
    meta = cfg.meta.get(NDF) or {}
    meta_where = cfg.locate(f"_meta_::{NDF}") or str(cfg.meta_file)
    picked_in, picked_out = _pick(meta.get("inputs"), "image"), _pick(meta.get("outputs"), "pred")
    if picked_in is None or picked_out is None:
        return [Problem(meta_where, NDF, "needs 'inputs' and 'outputs' to check the network")], None
    (_, inp), (out_key, out) = picked_in, picked_out
    if not has_id(cfg.config, net_id):
        return [Problem(str(cfg.config_files[-1]), net_id, f"no id '{net_id}' to build the network from "
                        "(MONAI's convention; pick another with --net-id)")], None
    try:
        in_shape = [shape_value(s) or 1 for s in inp.get("spatial_shape", [])]
        out_shape = [shape_value(s) for s in out.get("spatial_shape", [])]
        channels = shape_value(inp.get("num_channels", 1)) or 1
    except (ValueError, SyntaxError, TypeError, ZeroDivisionError) as exc:
        return [Problem(meta_where, NDF, f"bad spatial_shape: {exc}")], None
    elements = math.prod([channels, *in_shape])
    if elements > MAX_INPUT_ELEMENTS or min([channels, *in_shape]) < 1:
        return [Problem(meta_where, NDF, f"the dummy input (1, {channels}, {', '.join(map(str, in_shape))}) has "
                        f"{elements:,} elements; verify --net builds at most {MAX_INPUT_ELEMENTS:,}, each size "
                        "at least 1")], None

    import torch
    from monai.utils import get_equivalent_dtype

    net_where = cfg.locate(net_id)
    try:
        in_dtype = get_equivalent_dtype(inp.get("dtype", "float32"), torch.Tensor)
        out_dtype = get_equivalent_dtype(out.get("dtype", "float32"), torch.Tensor)
    except Exception as exc:
        return [Problem(meta_where, NDF, f"unknown dtype: {exc}")], None
    if in_dtype == torch.float16:
        return [], f"{net_id}: not run (float16 input needs a GPU)"
    with bundle_on_sys_path(cfg.bundle_dir):
        try:
            net = build_parser(cfg).get_parsed_content(net_id)
        except Exception as exc:
            bad = failing_id(exc) or net_id
            return [Problem(cfg.locate(bad), bad, f"building '{net_id}' failed: {type(exc).__name__}: {exc}")], None
        if not isinstance(net, torch.nn.Module):
            what = type(net).__name__
            return [Problem(net_where, net_id, f"'{net_id}' builds a {what}, not a torch.nn.Module")], None
        x = torch.rand(1, channels, *in_shape, dtype=in_dtype)
        net.eval()
        try:
            with torch.no_grad():
                y = net(x)
        except Exception as exc:
            return [Problem(net_where, net_id, f"forward pass on a {tuple(x.shape)} input failed: "
                            f"{type(exc).__name__}: {exc}")], None
    if isinstance(y, Sequence) and y and isinstance(y[0], torch.Tensor):
        y = y[0]  # deep supervision returns several outputs; the first is the prediction
    if not isinstance(y, torch.Tensor):
        return [Problem(net_where, net_id, f"the network returns a {type(y).__name__}, not a tensor")], None
    return _compare(net_id, net_where, tuple(x.shape), y, out_key, out, out_shape, out_dtype, meta_where)


def _compare(
    net_id: str, net_where: str | None, in_shape: tuple, y: Any, out_key: str, out: Mapping[str, Any],
    out_shape: list[int | None], out_dtype: Any, meta_where: str,
) -> tuple[list[Problem], str]:
    problems = []
    got = tuple(y.shape)
    ref = f"{NDF}::outputs::{out_key}"
    channels = out.get("num_channels")
    if len(got) < 2 or got[1] != channels:
        problems.append(Problem(net_where, net_id, f"the network outputs {got[1] if len(got) > 1 else '?'} channels "
                                f"but {meta_where} ({ref}::num_channels) says {channels}"))
    spatial = got[2:]
    if out_shape and (len(spatial) != len(out_shape) or any(e is not None and e != g for e, g in
                                                            zip(out_shape, spatial))):
        shown = ["*" if e is None else e for e in out_shape]
        problems.append(Problem(net_where, net_id, f"the network's output spatial shape is {list(spatial)} for a "
                                f"{list(in_shape[2:])} input but {ref}::spatial_shape says {shown}"))
    if y.dtype != out_dtype:
        problems.append(Problem(net_where, net_id, f"the network's output dtype is {y.dtype} but {ref}::dtype says "
                                f"{out.get('dtype')}"))
    return problems, f"{net_id}: input {in_shape} -> output {got}"


# ------------------------------------------------ MONAI's dummy input (also monai_cli/verify_net_in_out.py)

NDF_PREFIX = "_meta_#network_data_format"


def fake_spatial_shape(shape: Sequence[int | str], p: int = 1, n: int = 1, any: int = 1) -> tuple[int, ...]:
    """Return the spatial shape of MONAI's dummy input: ints as given, ``"*"`` -> ``any``, patterns in p and n."""
    out = []
    for item in shape:
        if isinstance(item, bool) or not isinstance(item, int | str):
            raise ConfigError(f"spatial shape items must be int or string, but got: {type(item).__name__} {item!r}",
                              id_path=f"{NDF}::inputs::image::spatial_shape")
        try:
            value = shape_value(item, n=n, p=p)
        except (ValueError, SyntaxError, ZeroDivisionError) as exc:
            raise ConfigError(f"spatial shape item {item!r} cannot be evaluated ({exc})",
                              id_path=f"{NDF}::inputs::image::spatial_shape",
                              expected="an int, '*' or an expression in p and n such as '2**p*n'") from None
        out.append(any if value is None else value)
    return tuple(out)


def net_io_info(parser: Any, prefix: str = NDF_PREFIX) -> tuple[Any, tuple, Any, Any, Any]:
    """Return (input channels, spatial shape, input dtype, output channels, output dtype) from the metadata.

    MONAI reads ``inputs#image`` and ``outputs#pred``; a missing field is refused here by name instead of
    failing later on ``None``.
    """
    import torch
    from monai.utils import get_equivalent_dtype

    def get(key: str, required: bool = True) -> Any:
        value = parser.get(f"{prefix}#{key}")
        if value is None and required:
            raise ConfigError(f"the metadata has no network_data_format::{key.replace('#', '::')}",
                              id_path=f"_meta_::network_data_format::{key.replace('#', '::')}",
                              expected="metadata.json with network_data_format inputs.image and outputs.pred "
                              "(num_channels, spatial_shape, dtype), or --meta_file naming it")
        return value

    def dtype(key: str) -> Any:
        value = get(key, required=False)
        try:
            return get_equivalent_dtype(value, torch.Tensor)
        except Exception:
            raise ConfigError(f"unknown dtype {value!r}", id_path=f"_meta_::network_data_format::{key}",
                              expected="a torch/numpy dtype name such as float32") from None

    spatial = get("inputs#image#spatial_shape")
    if not isinstance(spatial, list | tuple):
        raise ConfigError(f"spatial_shape is a {type(spatial).__name__}, not a list",
                          id_path="_meta_::network_data_format::inputs::image::spatial_shape")
    return (get("inputs#image#num_channels"), tuple(spatial), dtype("inputs#image#dtype"),
            get("outputs#pred#num_channels"), dtype("outputs#pred#dtype"))


def fake_input_shape(parser: Any) -> tuple[int, ...]:
    """Return MONAI's dummy input shape ``(1, channels, *spatial)`` with p = n = any = 1."""
    channels, spatial, _, _, _ = net_io_info(parser)
    return (1, channels, *fake_spatial_shape(spatial))


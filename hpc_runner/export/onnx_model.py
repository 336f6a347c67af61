"""MONAI's ``onnx_export``: a bundle's trained network as an ONNX model (needs ``onnx`` and ``onnxscript``).

Same arguments, defaults and file as ``python -m monai.bundle onnx_export``; here the file is written
atomically, ``--ckpt_file`` may be an hpc-runner run dir, and bad input (or a missing onnx package) is
one paragraph, exit 2.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hpc_runner.errors import UserError
from hpc_runner.export.plan import ExportPlan, conversion_error, load_plan_weights, plan_onnx_export
from hpc_runner.monai_cli.arguments import get_logger, merge_args, output_beside

TAG = "onnx_export"
INSTALL_HINT = "Install the ONNX exporter's packages: pip install 'hpc-bundle-runner[onnx]' (onnx and onnxscript)"


def check_onnx_installed() -> None:
    """Refuse before any work when the packages torch.onnx.export needs are missing."""
    import importlib.util

    missing = [m for m in ("onnx", "onnxscript") if importlib.util.find_spec(m) is None]
    if missing:
        raise UserError(f"onnx_export needs the package(s) {', '.join(missing)}, which are not installed",
                        hint=INSTALL_HINT)


def prepare_onnx_export(
    net_id: str | None = None,
    filepath: str | None = None,
    ckpt_file: str | None = None,
    meta_file: str | Sequence[str] | None = None,
    config_file: str | Sequence[str] | None = None,
    key_in_ckpt: str | None = None,
    use_trace: bool | None = None,
    input_shape: Sequence[int] | None = None,
    args_file: str | None = None,
    converter_kwargs: Mapping | None = None,
    **override: Any,
) -> ExportPlan:
    """Merge the arguments as MONAI does and check them (the network is built); write nothing."""
    check_onnx_installed()
    args = merge_args(TAG, args_file, net_id=net_id, filepath=filepath, meta_file=meta_file, config_file=config_file,
                      ckpt_file=ckpt_file, key_in_ckpt=key_in_ckpt, use_trace=use_trace, input_shape=input_shape,
                      converter_kwargs=converter_kwargs, **override)
    return plan_onnx_export(args)


def write_onnx(plan: ExportPlan) -> Path:
    """Load the weights, convert the network with MONAI's convert_to_onnx and save the model; return the file."""
    import onnx
    import torch
    from monai.networks import convert_to_onnx

    net = load_plan_weights(plan)
    kwargs = {**plan.converter_kwargs, "inputs": [torch.rand(plan.input_shape)], "use_trace": plan.use_trace}
    try:
        model = convert_to_onnx(model=net, **kwargs)
    except Exception as exc:  # an operator the exporter cannot express, or an input the network cannot take
        raise conversion_error(TAG, plan, exc) from None
    with output_beside(plan.target) as staged:
        onnx.save(model, str(staged))
    get_logger().info(f"exported to file: {plan.filepath}.")
    return plan.target


def onnx_export(**kwargs: Any) -> Path:
    """MONAI's ``onnx_export`` with the same keyword arguments; return the ONNX file written."""
    return write_onnx(prepare_onnx_export(**kwargs))

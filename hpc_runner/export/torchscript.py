"""MONAI's ``ckpt_export``: a bundle's trained network as TorchScript with its metadata and configs inside.

Same arguments, defaults and file as ``python -m monai.bundle ckpt_export`` (the .ts holds
``metadata.json`` and each config file as ``<name>.json``; ``load_net_with_metadata`` reads them);
here the file is written atomically, ``--ckpt_file`` may be an hpc-runner run dir, and bad input is one
paragraph (exit 2) instead of a traceback.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hpc_runner.export.plan import ExportPlan, config_extra_files, conversion_error, load_plan_weights, plan_ckpt_export
from hpc_runner.monai_cli.arguments import get_logger, merge_args, output_beside

TAG = "ckpt_export"


def prepare_ckpt_export(
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
    args = merge_args(TAG, args_file, net_id=net_id, filepath=filepath, meta_file=meta_file, config_file=config_file,
                      ckpt_file=ckpt_file, key_in_ckpt=key_in_ckpt, use_trace=use_trace, input_shape=input_shape,
                      converter_kwargs=converter_kwargs, **override)
    return plan_ckpt_export(args)


def write_torchscript(plan: ExportPlan) -> Path:
    """Load the weights, convert the network to TorchScript and write it with metadata and configs; return it."""
    import torch
    from monai.data import save_net_with_metadata
    from monai.networks import convert_to_torchscript

    net = load_plan_weights(plan)
    inputs = [torch.rand(plan.input_shape)] if plan.input_shape else None
    kwargs = {**plan.converter_kwargs, "inputs": inputs, "use_trace": plan.use_trace}
    try:
        converted = convert_to_torchscript(model=net, **kwargs)
    except Exception as exc:  # a network TorchScript cannot script, or an input it cannot take
        raise conversion_error(TAG, plan, exc) from None
    extra_files = config_extra_files(plan.config_files)
    meta_values = plan.parser.get().pop("_meta_", None)
    with output_beside(plan.target) as staged:
        save_net_with_metadata(converted, str(staged), include_config_vals=False, append_timestamp=False,
                               meta_values=meta_values, more_extra_files=extra_files)
    get_logger().info(f"exported to file: {plan.filepath}.")
    return plan.target


def ckpt_export(**kwargs: Any) -> Path:
    """MONAI's ``ckpt_export`` with the same keyword arguments; return the TorchScript file written."""
    return write_torchscript(prepare_ckpt_export(**kwargs))

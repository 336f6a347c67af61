"""MONAI's ``verify_net_in_out`` subcommand (``hpc-runner verify_net_in_out``): its arguments, defaults and checks.

The network and its ``network_data_format`` are read as ``config/verify_net.py`` reads them for
``hpc-runner verify --net``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hpc_runner.config.verify_net import fake_spatial_shape, net_io_info
from hpc_runner.errors import ConfigError, UserError
from hpc_runner.monai_cli.arguments import get_logger, load_config_parser, merge_args, parsed_content, require


def verify_net_in_out(
    net_id: str | None = None,
    meta_file: str | Sequence[str] | None = None,
    config_file: str | Sequence[str] | None = None,
    device: str | None = None,
    p: int | None = None,
    n: int | None = None,
    any: int | None = None,
    extra_forward_args: dict | None = None,
    args_file: str | None = None,
    **override: Any,
) -> tuple[int, ...]:
    """MONAI's ``verify_net_in_out``: run a dummy input through the network; return the output shape.

    Same arguments, defaults and checks (output channels and dtype as the metadata says); bad input is
    a ``UserError`` naming the file or id instead of a traceback.
    """
    import torch

    tag = "verify_net_in_out"
    args = merge_args(tag, args_file, net_id=net_id, meta_file=meta_file, config_file=config_file, device=device,
                      p=p, n=n, any=any, extra_forward_args=extra_forward_args, **override)
    config_file_ = require(args, "config_file", tag, "the config file(s) that define the network")
    meta_file_ = require(args, "meta_file", tag, "the metadata file with network_data_format")
    args.pop("config_file"), args.pop("meta_file")
    net_id_ = args.pop("net_id", "")
    device_ = args.pop("device", "cuda:0" if torch.cuda.is_available() else "cpu")
    p_, n_, any_ = args.pop("p", 1), args.pop("n", 1), args.pop("any", 1)
    extra = args.pop("extra_forward_args", {}) or {}
    parser = load_config_parser(config_file_, meta_file_, args)

    channels, spatial, in_dtype, out_channels, out_dtype = net_io_info(parser)
    net = parsed_content(parser, net_id_, "the network", config_file_)
    if not isinstance(net, torch.nn.Module):
        raise ConfigError(f"'{net_id_}' builds a {type(net).__name__}, not a torch.nn.Module", id_path=net_id_)
    fp16 = in_dtype == torch.float16
    if fp16 and not torch.cuda.is_available():
        raise UserError("a float16 input needs a GPU (MONAI runs it under torch.autocast('cuda'))",
                        id_path="_meta_::network_data_format::inputs::image::dtype",
                        hint="Run it on a GPU node: hpc-runner submit verify_net_in_out ... --cluster CLUSTER")
    try:
        net = net.to(device_)
    except (RuntimeError, AssertionError) as exc:
        raise UserError(f"device '{device_}' cannot be used: {exc}", expected="cpu, or cuda:N on a GPU node") from None
    net.eval()
    shape = (1, channels, *fake_spatial_shape(spatial, p=p_, n=n_, any=any_))
    with torch.no_grad():
        test_data = torch.rand(*shape, dtype=in_dtype, device=device_)
        try:
            if fp16:
                net.to("cuda")
                with torch.autocast("cuda"):
                    output = net(test_data.cuda(), **extra)
                net.to(device_)
            else:
                output = net(test_data, **extra)
        except Exception as exc:  # the network cannot take this input: the metadata and the network disagree
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            raise ConfigError(f"the forward pass of '{net_id_}' on a {tuple(shape)} input failed: "
                              f"{type(exc).__name__}: {first}", id_path=net_id_,
                              hint="Check network_data_format::inputs::image (num_channels, spatial_shape) "
                              "against the network; -p, -n and --any set the shape patterns") from None
    if not isinstance(output, torch.Tensor):
        raise ConfigError(f"'{net_id_}' returns a {type(output).__name__}, not a tensor (MONAI checks "
                          "output.shape[1])", id_path=net_id_)
    if output.shape[1] != out_channels:
        raise ConfigError(f"output channel number `{output.shape[1]}` doesn't match: `{out_channels}`",
                          id_path="_meta_::network_data_format::outputs::pred::num_channels")
    if output.dtype != out_dtype:
        raise ConfigError(f"dtype of output data `{output.dtype}` doesn't match: {out_dtype}",
                          id_path="_meta_::network_data_format::outputs::pred::dtype")
    get_logger().info("data shape of network is verified with no error.")
    return tuple(output.shape)

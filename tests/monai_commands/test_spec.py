"""The arguments of MONAI's bundle commands as ``python -m monai.bundle`` (Fire) takes them, typed predictably."""

from __future__ import annotations

import pytest

from hpc_runner.cli import build_parser
from hpc_runner.config.argv import split_overrides
from hpc_runner.errors import UserError
from hpc_runner.monai_cli.commands import keyword_arguments, parse_argv
from hpc_runner.monai_cli.spec import SPECS, options_from_args


def kwargs_of(name: str, *argv: str) -> dict:
    """The keyword arguments ``hpc-runner NAME ARGV`` calls its function with."""
    _, subparsers = build_parser()
    known, overrides = split_overrides(subparsers[name], list(argv))
    args = subparsers[name].parse_args(known)
    args.override_tokens = overrides
    return options_from_args(SPECS[name], args)


def test_positionals_fill_monais_parameters_in_order_skipping_those_given_by_name() -> None:
    assert kwargs_of("ckpt_export", "network_def", "--filepath", "m.ts") == {"net_id": "network_def",
                                                                              "filepath": "m.ts"}
    assert kwargs_of("ckpt_export", "--net_id", "net", "m.ts") == {"net_id": "net", "filepath": "m.ts"}
    assert kwargs_of("init_bundle", "b", "w.pt", "--dataset_license", "True") == {
        "bundle_dir": "b", "ckpt_file": "w.pt", "dataset_license": True}


def test_monai_spellings_of_values_mean_what_they_mean_there() -> None:
    got = kwargs_of("ckpt_export", "--use_trace", "True", "--input_shape", "[1, 1, 96, 96, 96]", "--config_file",
                    "['a.json','b.yaml']", "--key_in_ckpt", "", "--meta_file", "None")
    assert got == {"use_trace": True, "input_shape": [1, 1, 96, 96, 96], "config_file": ["a.json", "b.yaml"],
                   "key_in_ckpt": ""}
    assert kwargs_of("ckpt_export", "--input_shape", "(1,1,8,8)")["input_shape"] == [1, 1, 8, 8]
    assert kwargs_of("onnx_export", "--use_trace")["use_trace"] is True  # a bare bool flag, as Fire
    assert kwargs_of("onnx_export", "--use-trace", "false")["use_trace"] is False
    assert kwargs_of("onnx_export", "--converter_kwargs", "{verify: True, rtol: 1e-3}")["converter_kwargs"] == {
        "verify": True, "rtol": 0.001}


def test_one_letter_parameters_and_overrides_of_verify_net_in_out() -> None:
    got = kwargs_of("verify_net_in_out", "network_def", "-n", "4", "--any", "16", "-p", "2",
                    "--_meta_::network_data_format::inputs#image#spatial_shape", "[16,'*','2**p*n']")
    assert got == {"net_id": "network_def", "n": 4, "any": 16, "p": 2,
                   "_meta_::network_data_format::inputs#image#spatial_shape": [16, "*", "2**p*n"]}


def test_override_values_are_typed_as_yaml_1_2_and_expressions_pass_through() -> None:
    got = kwargs_of("run_workflow", "--lr", "1e-4", "--flag", "yes", "--network", "$@network_def.to(@device)",
                    "--dataset#data=[{'image': 'a.nii'}]")
    assert got == {"lr": 1e-4, "flag": "yes", "network": "$@network_def.to(@device)",
                   "dataset#data": [{"image": "a.nii"}]}


@pytest.mark.parametrize(("argv", "words"), [
    (["--use_trace", "maybe"], "True or False"),
    (["--input_shape", "[1, 0, 8]"], "positive whole numbers"),
    (["--config_file", "[1, 2]"], "file name or a list"),
    (["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k"], "too many positional arguments"),
])
def test_bad_values_are_one_paragraph(argv: list[str], words: str) -> None:
    with pytest.raises(UserError, match=words):
        kwargs_of("ckpt_export", *argv)


def test_init_bundle_takes_no_overrides() -> None:
    with pytest.raises(UserError, match="init_bundle takes no --colour"):
        kwargs_of("init_bundle", "b", "--colour", "red")


def test_a_job_parses_its_argv_as_the_command_line_does() -> None:
    argv = ["network_def", "--filepath", "m.ts", "--key_in_ckpt", "", "--use_trace", "--input_shape", "[1,1,8,8,8]",
            "--bundle_root", "b"]
    assert keyword_arguments(SPECS["ckpt_export"], parse_argv("ckpt_export", argv)) == kwargs_of("ckpt_export", *argv)

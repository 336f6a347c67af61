"""verify: every problem at once (file:line, id), offline metadata schema, config files, imports, --net."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from registry_helpers import EXAMPLE, ZOO, copy_bundle, out

from hpc_runner.config.verify import verify_bundle
from hpc_runner.registry.manifest import compute_manifest, format_manifest


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def _line_of(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


def _broken_bundle(tmp_path: Path) -> tuple[Path, list[tuple[str, str]]]:
    """A bundle with seven kinds of problem, and the (file:line, text) each must be reported with."""
    bundle = copy_bundle(EXAMPLE, tmp_path / "broken")
    (bundle / "MANIFEST").write_text(format_manifest(compute_manifest(bundle)))
    train, meta_path = bundle / "configs" / "train.yaml", bundle / "configs" / "metadata.json"
    _edit(train, "_target_: UNet\n", "_target_: UNetz\n")  # does not import
    _edit(train, "lr: \"@learning_rate\"", "lr: \"@learning_rat\"")  # missing reference
    _edit(train, "  _target_: DiceCELoss\n", "  _target_: DiceCELoss\n  softmaxx: true\n")  # unknown argument
    meta = json.loads(meta_path.read_text())
    del meta["authors"]
    meta["network_data_format"]["inputs"]["image"]["num_channels"] = 0
    meta_path.write_text(json.dumps(meta, indent=4))
    (bundle / "configs" / "extra.yaml").write_text("network_def: [1, 2\n")  # YAML syntax error
    channels_line = _line_of(meta_path, '"num_channels": 0')
    return bundle, [
        (f"{bundle}/MANIFEST", "'configs/train.yaml' changed since the bundle was packed"),
        (f"{bundle}/MANIFEST", "'configs/metadata.json' changed since the bundle was packed"),
        (f"{bundle}/MANIFEST", "'configs/extra.yaml' was added after the bundle was packed"),
        (f"{meta_path}:1", "id 'authors': required field 'authors' is missing"),
        (f"{meta_path}:{channels_line}", "id 'network_data_format::inputs::image::num_channels': 0 is less than the "
         "minimum of 1"),
        (f"{bundle}/configs/extra.yaml:2", "YAML syntax error"),
        (f"{train}:{_line_of(train, '@learning_rat')}", "id 'optimizer::lr': '@learning_rat' refers to an id that "
         "is not in the config; did you mean @learning_rate"),
        (f"{train}:{_line_of(train, 'UNetz')}", "id 'network_def::_target_': _target_ 'UNetz' cannot be imported"),
        (f"{train}:{_line_of(train, 'softmaxx')}", "id 'loss::softmaxx': DiceCELoss has no argument 'softmaxx'"),
    ]


def _check_report(rc: int, stdout: str, stderr: str, expected: list[tuple[str, str]]) -> None:
    assert rc == 2, stdout + stderr
    lines = stdout.splitlines()
    for where, text in expected:
        assert any(line.startswith(where + ":") and text in line for line in lines), f"{where} {text}\n{stdout}"
    assert len(lines) == len(expected), stdout
    assert re.search(rf"{len(expected)} problem\(s\) in synthetic_seg 0\.1\.0", stderr)


def test_every_problem_at_once_with_file_line_and_id(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from hpc_runner.cli import main

    bundle, expected = _broken_bundle(tmp_path)
    rc = main(["verify", str(bundle)])  # the CLI in this process (the subprocess run is a slow test)
    captured = capsys.readouterr()
    _check_report(rc, captured.out, captured.err, expected)


@pytest.mark.slow
def test_every_problem_at_once_cli_subprocess(cli, tmp_path: Path) -> None:
    bundle, expected = _broken_bundle(tmp_path)
    proc = cli("verify", bundle)
    _check_report(proc.returncode, proc.stdout, proc.stderr, expected)


def test_example_bundle_passes_with_net_telling_each_step_as_it_starts() -> None:
    steps: list[str] = []
    report = verify_bundle(EXAMPLE, net=True, progress=steps.append)
    assert report.ok, [p.line() for p in report.problems]
    assert steps == ["MANIFEST", "metadata", "configs and their _target_ imports",
                     "the network network_def on a dummy input (--net)"]
    assert "network_def: input (1, 1, 64, 64, 64) -> output (1, 2, 64, 64, 64)" in report.notes


def test_net_catches_wrong_out_channels_and_spatial_shape(tmp_path: Path) -> None:
    bundle = copy_bundle(EXAMPLE, tmp_path / "b")
    train = bundle / "configs" / "train.yaml"
    _edit(train, "out_channels: 2", "out_channels: 3")
    report = verify_bundle(bundle, net=True)
    assert [p.line() for p in report.problems] == [
        f"{train}:{_line_of(train, 'network_def:')}: id 'network_def': the network outputs 3 channels but "
        f"{bundle}/configs/metadata.json:{_line_of(bundle / 'configs' / 'metadata.json', 'network_data_format')} "
        "(network_data_format::outputs::pred::num_channels) says 2"
    ]
    _edit(train, "out_channels: 3", "out_channels: 2")
    meta_path = bundle / "configs" / "metadata.json"
    meta = json.loads(meta_path.read_text())
    meta["network_data_format"]["outputs"]["pred"]["spatial_shape"] = [32, 32, 32]
    meta_path.write_text(json.dumps(meta))
    report = verify_bundle(bundle, net=True, imports=False)
    assert len(report.problems) == 1 and "output spatial shape is [64, 64, 64]" in report.problems[0].message


def test_net_id_is_configurable(tmp_path: Path) -> None:
    report = verify_bundle(EXAMPLE, net=True, net_id="network", imports=False)
    assert [p.message for p in report.problems] == [
        "no id 'network' to build the network from (MONAI's convention; pick another with --net-id)"]


def test_zoo_layout_every_config_file_is_checked() -> None:
    report = verify_bundle(ZOO, net=True)
    assert report.ok, [p.line() for p in report.problems]
    summary = "; ".join(report.notes)
    for label in ("configs/train.json", "configs/inference.json",
                  "configs/multi_gpu_train.json over configs/train.json",
                  "configs/multi_cpu_train.json over configs/train.json"):
        assert label in summary
    assert "network_def: input (1, 1, 16, 16, 16) -> output (1, 2, 16, 16, 16)" in summary


def test_override_file_problems_name_the_override(tmp_path: Path) -> None:
    bundle = copy_bundle(ZOO, tmp_path / "zoo")
    override = bundle / "configs" / "multi_gpu_train.json"
    _edit(override, '"dataset": "@train#dataset"', '"dataset": "@train#datasett"')
    (bundle / "configs" / "evaluate.json").write_text(json.dumps({"validate#handlers": [], "run": ["$@nope.run()"]}))
    report = verify_bundle(bundle, imports=False)
    lines = [p.line() for p in report.problems]
    assert any(line.startswith(f"{override}:{_line_of(override, 'datasett')}: id 'train::sampler::dataset'")
               for line in lines), lines
    assert any("evaluate.json" in line and "'@nope'" in line for line in lines), lines
    assert len(lines) == 2, lines


@pytest.mark.slow
def test_verify_net_cli(cli, tmp_path: Path) -> None:
    proc = cli("verify", EXAMPLE, "--net")
    assert proc.returncode == 0, out(proc)
    assert proc.stdout.startswith("OK: synthetic_seg 0.1.0") and "-> output (1, 2, 64, 64, 64)" in proc.stdout
    bundle = copy_bundle(EXAMPLE, tmp_path / "b")
    _edit(bundle / "configs" / "train.yaml", "out_channels: 2", "out_channels: 5")
    proc = cli("verify", bundle, "--net")
    assert proc.returncode == 2 and "the network outputs 5 channels" in proc.stdout, out(proc)


def test_verify_shows_its_steps_on_a_terminal_only() -> None:
    import io

    from hpc_runner.cli.verify import progress_printer

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert progress_printer(io.StringIO()) is None  # a log or a pipe: only the result
    shown = Terminal()
    progress_printer(shown)("metadata")
    assert shown.getvalue() == "hpc-runner verify: checking metadata...\n"


@pytest.mark.parametrize("kind", ["fifo", "folder", "dangling"])
def test_a_metadata_file_that_is_no_regular_file_is_named_as_what_it_is_not_missing(tmp_path: Path, kind: str) -> None:
    import os

    bundle = copy_bundle(EXAMPLE, tmp_path / "b")
    meta = bundle / "configs" / "metadata.json"
    meta.unlink()
    if kind == "fifo":
        os.mkfifo(meta)
    elif kind == "folder":
        meta.mkdir()
    else:
        meta.symlink_to(tmp_path / "gone.json")
    report = verify_bundle(bundle, imports=False)
    said = [p.message for p in report.problems if p.where == str(meta)]
    name = {"fifo": "a named pipe (FIFO)", "folder": "a folder", "dangling": "a dangling symbolic link"}[kind]
    assert said and said[0].startswith(f"{name}, not a regular file") and "missing" not in said[0], said

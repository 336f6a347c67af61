"""Bad input to MONAI's bundle commands: where MONAI raises (a traceback, exit 1), hpc-runner refuses in one
paragraph, exit 2, naming the file or id, and writes nothing. Both run in this process (fast): MONAI's
Python function, and hpc-runner's CLI entry ``main(argv)``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hpc_runner.cli import main
from tests.monai_commands.conftest import DATA, save_random_checkpoint


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working dir with MONAI's test configs under data/ and a checkpoint model.pt of its network."""
    import shutil

    shutil.copytree(DATA, tmp_path / "data", ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    save_random_checkpoint(tmp_path / "model.pt")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(DATA))  # fixture_workflows
    return tmp_path


def refused(capsys: pytest.CaptureFixture, *argv: str) -> str:
    """Run ``hpc-runner ARGV`` here; assert exit 2 with one error paragraph; return it."""
    capsys.readouterr()
    code = main(list(argv))
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if re.match(rf"hpc-runner {argv[0]}: error: ", ln)]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_a_missing_checkpoint_is_named(here: Path, capsys) -> None:
    from monai.bundle import ckpt_export

    with pytest.raises(FileNotFoundError):
        ckpt_export("network_def", filepath="model.ts", ckpt_file="nowhere.pt", config_file="data/inference.json")
    msg = refused(capsys, "ckpt_export", "network_def", "--filepath", "model.ts", "--ckpt_file", "nowhere.pt",
                  "--config_file", "data/inference.json")
    assert "nowhere.pt" in msg and "not found" in msg
    assert not list(here.glob("*.ts"))


def test_a_missing_output_folder_is_named_before_anything_is_built(here: Path, capsys) -> None:
    from monai.bundle import ckpt_export

    with pytest.raises(RuntimeError, match="Parent directory"):
        ckpt_export("network_def", filepath="out/model.ts", ckpt_file="model.pt", config_file="data/inference.json")
    msg = refused(capsys, "ckpt_export", "network_def", "--filepath", "out/model.ts", "--ckpt_file", "model.pt",
                  "--config_file", "data/inference.json")
    assert "out" in msg and "does not exist" in msg and "mkdir -p out" in msg


def test_a_nested_checkpoint_without_key_in_ckpt_names_its_keys(here: Path, capsys) -> None:
    from monai.bundle import ckpt_export

    save_random_checkpoint(here / "nested.pt", key="model")
    with pytest.raises(RuntimeError):
        ckpt_export("network_def", filepath="model.ts", ckpt_file="nested.pt", config_file="data/inference.json")
    msg = refused(capsys, "ckpt_export", "network_def", "--filepath", "model.ts", "--ckpt_file", "nested.pt",
                  "--config_file", "data/inference.json")
    assert "nested.pt" in msg and "--key_in_ckpt" in msg and "keys: model" in msg
    assert not (here / "model.ts").exists()


def test_a_net_id_the_config_lacks_is_named(here: Path, capsys) -> None:
    from monai.bundle import ckpt_export

    with pytest.raises((ValueError, KeyError)):
        ckpt_export("net", filepath="model.ts", ckpt_file="model.pt", config_file="data/inference.json")
    msg = refused(capsys, "ckpt_export", "net", "--filepath", "model.ts", "--ckpt_file", "model.pt",
                  "--config_file", "data/inference.json")
    assert "'net' is not in the config" in msg and "data/inference.json" in msg


def test_no_config_file_is_refused(here: Path, capsys) -> None:
    from monai.bundle import ckpt_export

    with pytest.raises(KeyError):
        ckpt_export("network_def", filepath="model.ts", ckpt_file="model.pt")
    assert "needs --config_file" in refused(capsys, "ckpt_export", "--filepath", "model.ts")


def test_a_broken_config_names_its_file_and_line(here: Path, capsys) -> None:
    (here / "broken.json").write_text('{\n  "network_def": {\n    "_target_": "UNet",\n  }\n}\n')
    msg = refused(capsys, "ckpt_export", "network_def", "--filepath", "model.ts", "--ckpt_file", "model.pt",
                  "--config_file", "broken.json")
    assert "broken.json:" in msg and "JSONDecodeError" in msg


def test_bad_option_values_are_refused_as_typed(here: Path, capsys) -> None:
    msg = refused(capsys, "ckpt_export", "--config_file", "data/inference.json", "--input_shape", "[1, 1, x]")
    assert "--input_shape" in msg and "positive whole numbers" in msg
    assert "True or False" in refused(capsys, "ckpt_export", "--config_file", "data/inference.json",
                                      "--use_trace", "maybe")


def test_output_channels_the_network_does_not_give_are_refused(here: Path, capsys) -> None:
    from monai.bundle import verify_net_in_out

    override = {"_meta_#network_data_format#outputs#pred#num_channels": 3,
                "_meta_#network_data_format#inputs#image#spatial_shape": [16, 16, 16]}
    with pytest.raises(ValueError, match="output channel number"):
        verify_net_in_out("network_def", meta_file="data/metadata.json", config_file="data/inference.json",
                          device="cpu", **override)
    msg = refused(capsys, "verify_net_in_out", "network_def", "--meta_file", "data/metadata.json", "--config_file",
                  "data/inference.json", "--device", "cpu", "--_meta_#network_data_format#outputs#pred#num_channels",
                  "3", "--_meta_::network_data_format::inputs::image::spatial_shape", "[16, 16, 16]")
    assert "output channel number `2` doesn't match: `3`" in msg and "num_channels" in msg


def test_metadata_against_a_schema_it_breaks_is_refused(here: Path, capsys) -> None:
    """MONAI's test_verify_error: a metadata file lacking the required fields."""
    from monai.bundle import verify_metadata

    (here / "schema").mkdir()
    (here / "schema" / "schema.json").write_text((DATA / "meta_schema_small.json").read_text())
    (here / "meta.json").write_text(json.dumps({"schema": "https://schema.invalid/meta.json", "wrong_meta": "x"}))
    with pytest.raises(ValueError):
        verify_metadata(meta_file="meta.json", filepath="schema/schema.json")
    msg = refused(capsys, "verify_metadata", "--meta_file", "meta.json", "--filepath", "schema/schema.json")
    assert "does not match the schema" in msg and "required property" in msg and "meta.json" in msg


def test_a_schema_that_cannot_be_downloaded_says_how_to_go_on(here: Path, capsys) -> None:
    from monai.bundle import verify_metadata

    (here / "meta.json").write_text(json.dumps({"schema": "https://schema.invalid/meta_schema.json", "version": "1"}))
    with pytest.raises(OSError):  # urllib's URLError
        verify_metadata(meta_file="meta.json", filepath="monai_schema.json")
    msg = refused(capsys, "verify_metadata", "--meta_file", "meta.json", "--filepath", "schema.json")
    assert "cannot be downloaded" in msg and "offline" in msg and "--schema FILE" in msg
    assert not (here / "schema.json").exists()


def test_a_local_schema_validates_without_any_url(here: Path, capsys) -> None:
    capsys.readouterr()
    assert main(["verify_metadata", "--meta_file", "data/metadata.json", "--schema",
                 str(DATA / "meta_schema_small.json")]) == 0
    assert "metadata is verified with no error." in capsys.readouterr().out


def test_init_bundle_refuses_an_existing_folder(here: Path, capsys) -> None:
    from monai.bundle import init_bundle

    (here / "taken").mkdir()
    with pytest.raises(ValueError, match="already exists"):
        init_bundle("taken")
    assert "already exists" in refused(capsys, "init_bundle", "taken", "model.pt")
    assert "does not exist" in refused(capsys, "init_bundle", "no/parent/bundle")
    assert not (here / "no").exists() and not list((here / "taken").iterdir())


def test_run_workflow_refuses_a_class_that_cannot_be_found(here: Path, capsys) -> None:
    from monai.bundle import run_workflow

    with pytest.raises(ValueError, match="cannot locate"):
        run_workflow(workflow_name="nowhere.Workflow")
    msg = refused(capsys, "run_workflow", "--workflow_name", "nowhere.Workflow")
    assert "cannot locate specified workflow class: nowhere.Workflow" in msg


def test_run_workflow_refuses_a_run_id_the_config_lacks(here: Path, capsys) -> None:
    from monai.bundle import run_workflow

    (here / "tiny.json").write_text(json.dumps({"training": "$print('hello')"}))
    with pytest.raises(ValueError, match="run ID 'run' doesn't exist"):
        run_workflow(config_file="tiny.json", meta_file="data/metadata.json", logging_file=False)
    msg = refused(capsys, "run_workflow", "--config_file", "tiny.json", "--meta_file", "data/metadata.json")
    assert "run ID 'run' doesn't exist" in msg and "--run_id" in msg


def test_run_workflow_refuses_keywords_the_workflow_class_does_not_take(here: Path, capsys) -> None:
    msg = refused(capsys, "run_workflow", "--workflow_name", "fixture_workflows.SegmentOneImage", "--filename", "x",
                  "--output_dir", ".", "--colour", "red")
    assert "SegmentOneImage" in msg and "colour" in msg and "--filename" in msg


@pytest.mark.parametrize("body", [b"NaN", b"null", b"", b'"a string"', b"[1, 2]", b"1e999"])
def test_metadata_or_config_files_that_are_no_mapping_are_refused_before_monai_reads_them(here: Path, capsys,
                                                                                         body: bytes) -> None:
    """MONAI fails on them with an AttributeError: read through the bounded readers, a mapping required first."""
    (here / "meta.json").write_bytes(body)
    schema = str(DATA / "meta_schema_small.json")
    msg = refused(capsys, "verify_metadata", "--meta_file", "meta.json", "--schema", schema)
    assert "meta.json" in msg and ("not a mapping" in msg or "cannot be read" in msg), msg
    (here / "net.yaml").write_bytes(body)
    msg = refused(capsys, "verify_net_in_out", "--net_id", "network_def", "--meta_file", "data/metadata.json",
                  "--config_file", "net.yaml")
    assert "net.yaml" in msg and ("not a mapping" in msg or "cannot be read" in msg), msg


def test_a_metadata_file_over_the_config_bound_or_a_named_pipe_is_refused_unread(here: Path, capsys) -> None:
    import os

    with open(here / "meta.json", "wb") as f:
        f.truncate(600 << 20)
    assert "larger than 16 MiB" in refused(capsys, "verify_metadata", "--meta_file", "meta.json", "--schema",
                                           str(DATA / "meta_schema_small.json"))
    os.mkfifo(here / "pipe.json")
    assert "named pipe" in refused(capsys, "verify_metadata", "--meta_file", "pipe.json", "--schema",
                                   str(DATA / "meta_schema_small.json"))


@pytest.mark.parametrize("argv", [["init_bundle"], ["init_bundle", "--"], ["init_bundle", "--dataset_license", "True"]])
def test_a_command_without_the_argument_its_function_needs_is_refused_by_name(tmp_path: Path, monkeypatch, capsys,
                                                                               argv: list[str]) -> None:
    """MONAI's function would raise Python's TypeError (missing 1 required positional argument)."""
    monkeypatch.chdir(tmp_path)
    line = refused(capsys, *argv)
    assert "init_bundle needs --bundle_dir" in line and "the first of MONAI's arguments" in line
    assert list(tmp_path.iterdir()) == []

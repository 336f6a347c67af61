"""init --from decathlon DIR: a bundle for your own Decathlon-style folder, checked before anything is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from registry_helpers import make_decathlon_folder, out

from hpc_runner.registry.decathlon_bundle import split_ratios

# ids of the generated train.yaml for a run of a few seconds on a CPU
TINY = ["--max_epochs", "1", "--val_interval", "1", "--roi_size", "[32,32,32]", "--num_samples", "1"]


def _dataset(folder: Path) -> dict:
    return json.loads((folder / "dataset.json").read_text())


def _rewrite(folder: Path, change) -> None:
    dataset = _dataset(folder)
    change(dataset)
    (folder / "dataset.json").write_text(json.dumps(dataset))


def test_init_writes_a_bundle_from_the_folder_that_verifies_and_trains(cli, tmp_path: Path) -> None:
    data = make_decathlon_folder(tmp_path / "Task01_Spheres")
    proc = cli("init", "spheres", "--from", "decathlon", data, "--author", "Ada")
    assert proc.returncode == 0 and "4 training volumes" in proc.stdout, out(proc)
    bundle = tmp_path / "bundles" / "spheres"
    train = yaml.safe_load((bundle / "configs" / "train.yaml").read_text())
    assert train["dataset_json"] == str(data / "dataset.json")
    assert (train["in_channels"], train["out_channels"], train["pixdim"]) == (1, 2, [1.5, 1.5, 1.5])
    assert train["training_list"]["_target_"] == "monai.data.load_decathlon_datalist"
    assert train["training_list"]["data_list_key"] == "training" and train["split_ratios"] == [4, 1]
    meta = json.loads((bundle / "configs" / "metadata.json").read_text())
    assert (meta["name"], meta["authors"]) == ("spheres", "Ada")
    assert meta["network_data_format"]["outputs"]["pred"]["num_channels"] == 2

    proc = cli("verify", "spheres")  # not --net: its 96^3 forward pass would double the time on a CPU
    assert proc.returncode == 0 and proc.stdout.startswith("OK: spheres 0.1.0"), out(proc)
    proc = cli("run", "training", "--bundle", "spheres", *TINY, "--output_dir", tmp_path / "run")
    assert proc.returncode == 0, out(proc)
    record = yaml.safe_load((tmp_path / "run" / "run.yaml").read_text())
    assert record["status"] == "completed" and record["bundle"]["name"] == "spheres"
    epochs = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [e["val_dice"] for e in epochs if "val_dice" in e], "validation ran on the split-off case"


def test_a_validation_list_and_several_modalities_shape_the_bundle(cli, tmp_path: Path) -> None:
    data = make_decathlon_folder(tmp_path / "data", cases=3, validation=1, modality={"0": "CT"})
    _rewrite(data, lambda d: d.update(labels={"0": "background", "1": "liver", "2": "tumour"}))
    proc = cli("init", "liver", "--from", "decathlon", data, "--to", tmp_path / "liver")
    assert proc.returncode == 0 and "1 validation cases from dataset.json" in proc.stdout, out(proc)
    train = yaml.safe_load((tmp_path / "liver" / "configs" / "train.yaml").read_text())
    assert train["val_datalist"]["data_list_key"] == "validation" and "split" not in train
    assert train["out_channels"] == 3 and train["intensity_min"] == -175  # CT: a Hounsfield window
    assert [t["_target_"] for t in train["preprocessing"]][4] == "ScaleIntensityRanged"


def test_the_split_always_leaves_a_validation_case() -> None:
    assert split_ratios(2) == [1, 1] and split_ratios(4) == [4, 1] and split_ratios(100) == [4, 1]


def _missing_label_file(data: Path) -> None:
    (data / "labelsTr" / "case_003.nii.gz").unlink()


def _no_label_key(data: Path) -> None:
    _rewrite(data, lambda d: d["training"][1].pop("label"))


def _escaping_path(data: Path) -> None:
    _rewrite(data, lambda d: d["training"][2].update(image="../../etc/passwd"))


def _absolute_path(data: Path) -> None:
    _rewrite(data, lambda d: d["training"][0].update(label="/etc/passwd"))


def _no_dataset_json(data: Path) -> None:
    (data / "dataset.json").unlink()


def _bad_labels(data: Path) -> None:
    _rewrite(data, lambda d: d.update(labels={"0": "background"}))


@pytest.mark.parametrize(("spoil", "message"), [
    (_missing_label_file, "training[3].label names './labelsTr/case_003.nii.gz', which does not exist"),
    (_no_label_key, "training[1] has no \"label\""),
    (_escaping_path, "training[2].image names '../../etc/passwd', which is outside the folder"),
    (_absolute_path, "training[0].label names '/etc/passwd', which is outside the folder"),
    (_no_dataset_json, "the folder has no dataset.json"),
    (_bad_labels, "\"labels\" names 1 class"),
])
def test_a_broken_folder_is_refused_naming_the_file_and_entry_and_nothing_is_written(
        cli, tmp_path: Path, spoil, message: str) -> None:
    data = make_decathlon_folder(tmp_path / "data", size=8)
    spoil(data)
    proc = cli("init", "spheres", "--from", "decathlon", data)
    assert proc.returncode == 2 and message in proc.stderr, out(proc)
    assert len(proc.stderr.strip().splitlines()) == 1 and "Expected a Decathlon-style folder" in proc.stderr
    assert str(data) in proc.stderr  # the file (or folder) concerned
    assert not (tmp_path / "bundles").exists() or not any((tmp_path / "bundles").iterdir())


def test_from_takes_a_template_or_decathlon_dir(cli, tmp_path: Path) -> None:
    proc = cli("init", "x", "--from", "zoo", tmp_path)
    assert proc.returncode == 2 and "--from decathlon DIR" in proc.stderr, out(proc)


@pytest.mark.parametrize("order", ["name first", "name last"])
def test_init_takes_the_name_before_or_after_from_decathlon_dir(cli, tmp_path: Path, order: str) -> None:
    # 6ca9a4e: `init --from decathlon DIR NAME` was "the following arguments are required: NAME"
    data = make_decathlon_folder(tmp_path / "data", size=8)
    words = ["spheres", "--from", "decathlon", data] if order == "name first" else ["--from", "decathlon", data,
                                                                                    "spheres"]
    proc = cli("init", *words)
    assert proc.returncode == 0 and "created bundle spheres" in proc.stdout, out(proc)
    assert (tmp_path / "bundles" / "spheres" / "configs" / "train.yaml").is_file()


def test_init_names_every_bad_entry_at_once(cli, tmp_path: Path) -> None:
    data = make_decathlon_folder(tmp_path / "data", size=8)
    (data / "labelsTr" / "case_001.nii.gz").unlink()
    (data / "imagesTr" / "case_003.nii.gz").unlink()
    proc = cli("init", "spheres", "--from", "decathlon", data)
    assert proc.returncode == 2 and "2 bad entries" in proc.stderr, out(proc)
    assert "training[1].label" in proc.stderr and "training[3].image" in proc.stderr


def test_the_crop_fits_the_volumes_and_the_runner_has_no_advice_or_warning_for_the_bundle(cli, tmp_path: Path) -> None:
    # 6ca9a4e: a 96^3 crop of 32^3 volumes, padded every epoch: "SpatialPadd is deterministic but runs every epoch"
    data = make_decathlon_folder(tmp_path / "data", cases=3, size=48)
    proc = cli("init", "spheres", "--from", "decathlon", data)
    assert proc.returncode == 0 and "the crop (roi_size) is [48, 48, 48]" in proc.stdout, out(proc)
    train = yaml.safe_load((tmp_path / "bundles" / "spheres" / "configs" / "train.yaml").read_text())
    assert train["roi_size"] == [48, 48, 48]
    proc = cli("config", "--bundle", "spheres", "--cache-plan")
    assert proc.returncode == 0 and "warnings: none" in proc.stdout and "warning:" not in out(proc), out(proc)
    proc = cli("run", "training", "--trust", "--bundle", "spheres", "--max_epochs", "1", "--val_interval", "1",
               "--num_samples", "1", "--output_dir", tmp_path / "run")
    assert proc.returncode == 0, out(proc)
    assert "advice:" not in proc.stdout and "warning" not in out(proc).lower(), out(proc)


@pytest.mark.parametrize("command", [["run", "training"], ["submit", "training", "--cluster", "local", "--dry-run"]])
def test_a_volume_deleted_after_init_stops_the_run_before_it_starts_naming_the_datalist_entry(
        cli, tmp_path: Path, command: list[str]) -> None:
    # 6ca9a4e: the pre-flight passed and the job failed 12 s in, in LoadImaged
    data = make_decathlon_folder(tmp_path / "data", size=8)
    assert cli("init", "spheres", "--from", "decathlon", data).returncode == 0
    (data / "labelsTr" / "case_002.nii.gz").unlink()
    proc = cli(*command, "--bundle", "spheres", "--trust", "--output_dir", tmp_path / "r")
    assert proc.returncode == 2, out(proc)
    assert "training[2].label names './labelsTr/case_002.nii.gz', which does not exist" in proc.stderr, out(proc)
    assert "dataset.json" in proc.stderr and not (tmp_path / "r").exists()

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


@pytest.mark.slow  # trains, or builds the Charliecloud image: CI runs it, the quick loop does not
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
    data = make_decathlon_folder(tmp_path / "data", size=32)
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


@pytest.mark.slow
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
    data = make_decathlon_folder(tmp_path / "data", size=32)
    assert cli("init", "spheres", "--from", "decathlon", data).returncode == 0
    (data / "labelsTr" / "case_002.nii.gz").unlink()
    proc = cli(*command, "--bundle", "spheres", "--trust", "--output_dir", tmp_path / "r")
    assert proc.returncode == 2, out(proc)
    assert "training[2].label names './labelsTr/case_002.nii.gz', which does not exist" in proc.stderr, out(proc)
    assert "dataset.json" in proc.stderr and not (tmp_path / "r").exists()


# first hour, again (issue 47): a volume smaller than the crop was padded with a note (a crop of mostly padding)
SMALL = [(32, 32, 32), (32, 32, 32), (32, 32, 32), (20, 48, 24), (48, 16, 48)]


def test_volumes_smaller_than_the_crop_are_refused_at_once_naming_each_shape_the_crop_and_the_way_out(
        cli, tmp_path: Path) -> None:
    data = make_decathlon_folder(tmp_path / "data", shapes=SMALL)
    proc = cli("init", "spheres", "--from", "decathlon", data)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, out(proc)
    for words in [str(data / "dataset.json"), "2 volumes are smaller than the crop (roi_size [32, 32, 32])",
                  "training[3].image", "is [20, 48, 24]", "training[4].image", "is [48, 16, 48]",
                  "--roi-size 16,16,16", "--pad-small"]:
        assert words in proc.stderr, (words, out(proc))
    assert "training[0]" not in proc.stderr and not (tmp_path / "bundles").exists()


@pytest.mark.slow  # trains, or builds the Charliecloud image: CI runs it, the quick loop does not
def test_an_explicit_crop_is_checked_the_same_and_pad_small_trains_on_them_padded(cli, tmp_path: Path) -> None:
    data = make_decathlon_folder(tmp_path / "data", shapes=SMALL)
    proc = cli("init", "spheres", "--from", "decathlon", data, "--roi-size", "16,16,32")
    assert proc.returncode == 2 and "training[3].image" in proc.stderr and "training[4]" not in proc.stderr, out(proc)
    assert "roi_size [16, 16, 32]" in proc.stderr and "--roi-size 16,16,16" in proc.stderr, out(proc)
    proc = cli("init", "small", "--from", "decathlon", data, "--roi_size", "[16,16,16]")
    assert proc.returncode == 0, out(proc)
    train = yaml.safe_load((tmp_path / "bundles" / "small" / "configs" / "train.yaml").read_text())
    meta = json.loads((tmp_path / "bundles" / "small" / "configs" / "metadata.json").read_text())
    assert train["roi_size"] == [16, 16, 16] == meta["network_data_format"]["inputs"]["image"]["spatial_shape"]
    proc = cli("init", "padded", "--from", "decathlon", data, "--pad-small")
    assert proc.returncode == 0 and "2 volumes smaller than the crop [32, 32, 32] are padded" in proc.stdout, out(proc)
    train = yaml.safe_load((tmp_path / "bundles" / "padded" / "configs" / "train.yaml").read_text())
    pad = train["augmentation"][1]  # after the cache, right after the random crop: as the runner advises
    assert (pad["_target_"], pad["spatial_size"]) == ("SpatialPadd", "@roi_size"), train["augmentation"]
    assert "k_divisible" not in str(train["preprocessing"])
    proc = cli("run", "training", "--trust", "--bundle", "padded", "--max_epochs", "1", "--val_interval", "1",
               "--num_samples", "1", "--output_dir", tmp_path / "run")
    assert proc.returncode == 0, out(proc)
    assert "advice:" not in proc.stdout and "warning" not in out(proc).lower(), out(proc)
    proc = cli("config", "--bundle", "padded", "--cache-plan")
    assert proc.returncode == 0 and "warnings: none" in proc.stdout, out(proc)


@pytest.mark.parametrize("crop", ["50", "0", "a,b,c", "16,16", "16,-16,16", "4096"])
def test_a_crop_the_unet_cannot_take_is_refused_naming_the_option(cli, tmp_path: Path, crop: str) -> None:
    data = make_decathlon_folder(tmp_path / "data")
    proc = cli("init", "spheres", "--from", "decathlon", data, "--roi-size", crop)
    assert proc.returncode == 2 and "--roi-size" in proc.stderr and "multiple of 16" in proc.stderr, out(proc)
    assert not (tmp_path / "bundles").exists()


def test_voxel_sizes_and_shapes_are_read_in_the_axis_order_the_bundle_resamples_in(cli, tmp_path: Path) -> None:
    # stored z, y, x (3 mm slices first): Orientationd makes it RAS before Spacingd applies pixdim
    permuted = [[0, 0, 1.5, 0], [0, 1.5, 0, 0], [3.0, 0, 0, 0], [0, 0, 0, 1]]
    data = make_decathlon_folder(tmp_path / "data", shapes=[(40, 64, 64)] * 3, affine=permuted)
    proc = cli("init", "spheres", "--from", "decathlon", data)
    assert proc.returncode == 0, out(proc)
    train = yaml.safe_load((tmp_path / "bundles" / "spheres" / "configs" / "train.yaml").read_text())
    assert (train["pixdim"], train["roi_size"]) == ([1.5, 1.5, 3.0], [64, 64, 32]), train


def test_every_unreadable_header_is_named_at_once(cli, tmp_path: Path) -> None:
    data = make_decathlon_folder(tmp_path / "data")
    for case in ("case_001", "case_003"):
        (data / "imagesTr" / f"{case}.nii.gz").write_bytes(b"not a NIfTI file")
    proc = cli("init", "spheres", "--from", "decathlon", data)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, out(proc)
    assert "training[1].image" in proc.stderr and "training[3].image" in proc.stderr, out(proc)


def test_a_crop_not_square_in_x_y_is_not_turned_a_quarter(cli, tmp_path: Path) -> None:
    # first hour, again: a [32, 16, 32] crop turned by RandRotate90d became [16, 32, 32], and the batch failed to stack
    data = make_decathlon_folder(tmp_path / "data")
    proc = cli("init", "spheres", "--from", "decathlon", data, "--roi-size", "32,16,32")
    assert proc.returncode == 0 and "not square in x-y" in proc.stdout, out(proc)
    train = yaml.safe_load((tmp_path / "bundles" / "spheres" / "configs" / "train.yaml").read_text())
    assert "RandRotate90d" not in [t["_target_"] for t in train["augmentation"]], train["augmentation"]


def test_the_first_run_of_a_bundle_init_wrote_does_not_warn_that_its_config_runs_code(cli, tmp_path: Path) -> None:
    # first hour, again: "warning: .../train.yaml: every `_target_` is imported and called ... run only configs you
    # trust" on the bundle hpc-runner had just written; an edited file is warned about again
    data = make_decathlon_folder(tmp_path / "data")
    assert cli("init", "spheres", "--from", "decathlon", data).returncode == 0
    # max_epochs 0 stops the run where the trainer is built, after the warning would have been shown: seconds, not
    # a training
    run = ["run", "training", "--bundle", "spheres", "--max_epochs", "0", "--output_dir"]
    proc = cli(*run, tmp_path / "r1")
    assert "Trainer max_epochs 0" in proc.stderr and "run only configs you trust" not in out(proc), out(proc)
    train = tmp_path / "bundles" / "spheres" / "configs" / "train.yaml"
    train.write_text(train.read_text() + "\n# edited\n")
    proc = cli(*run, tmp_path / "r2")
    assert "Trainer max_epochs 0" in proc.stderr and "run only configs you trust" in out(proc), out(proc)


def test_a_validation_volume_smaller_than_the_crop_is_neither_refused_nor_lowers_the_crop(cli, tmp_path: Path) -> None:
    # it is never cropped: the sliding window pads what is smaller than its window
    data = make_decathlon_folder(tmp_path / "data", shapes=[(48, 48, 48)] * 3 + [(16, 16, 16)], validation=1)
    proc = cli("init", "spheres", "--from", "decathlon", data)
    assert proc.returncode == 0, out(proc)
    train = yaml.safe_load((tmp_path / "bundles" / "spheres" / "configs" / "train.yaml").read_text())
    assert train["roi_size"] == [48, 48, 48]

"""A hostile dataset.json: refused with one paragraph naming dataset.json and the field, exit 2, nothing written;
the names it may carry reach the bundle only through serializers (issue 44)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from registry_helpers import make_decathlon_folder, out


def _rewrite(folder: Path, change) -> None:
    dataset = json.loads((folder / "dataset.json").read_text())
    change(dataset)
    (folder / "dataset.json").write_text(json.dumps(dataset))


def _zero_voxels(data: Path) -> None:
    import nibabel as nib
    import numpy as np

    image = nib.Nifti1Image(np.zeros((8, 8, 8), np.float32), None)
    image.header["pixdim"][1:4] = [float("nan"), 0.0, -1.0]  # what a broken header holds
    nib.save(image, data / "imagesTr" / "case_001.nii.gz")


@pytest.mark.parametrize(("spoil", "words"), [
    (lambda d: _rewrite(d, lambda j: j["labels"].update({"1": "$__import__('os').system('touch pwned')"})),
     ['"labels"."1"', "code, a reference or a macro"]),
    (lambda d: _rewrite(d, lambda j: j["modality"].update({"0": "@network_def"})), ['"modality"."0"']),
    (lambda d: _rewrite(d, lambda j: j.update(name="%/etc/passwd")), ['"name"']),
    (lambda d: _rewrite(d, lambda j: j.update(name="x\ny: 1")), ['"name"', "control character"]),
    (lambda d: _rewrite(d, lambda j: j.update(labels={"0": "bg", "²": "x"})), ['"labels"', "numbered names"]),
    (lambda d: _rewrite(d, lambda j: j.update(labels={"0": "bg", "2": "x"})), ['"labels" numbers its entries']),
    (lambda d: _rewrite(d, lambda j: j.update(validation=[j["training"][0]])), ["validation[0].image is training[0]"]),
    (lambda d: _rewrite(d, lambda j: j["training"][1].update(image="./imagesTr/../../x.nii.gz")), ["outside"]),
    (lambda d: (d / "dataset.json").write_text("[" * 100_000), ["dataset.json", "nest"]),
    (_zero_voxels, ["training[1].image", "voxel size", "finite, positive"]),
])
def test_a_hostile_dataset_json_is_refused_naming_the_field_and_nothing_is_written(
        cli, tmp_path: Path, spoil, words: list[str]) -> None:
    data = make_decathlon_folder(tmp_path / "data", size=8)
    spoil(data)
    proc = cli("init", "spheres", "--from", "decathlon", data, cwd=tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, out(proc)
    assert "dataset.json" in proc.stderr and all(w in proc.stderr for w in words), out(proc)
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "bundles").exists() and not (tmp_path / "pwned").exists()


def test_names_with_yaml_and_json_syntax_reach_the_bundle_as_data(cli, tmp_path: Path) -> None:
    data = make_decathlon_folder(tmp_path / "data", size=32)
    hostile = 'x"\n: {a: b} # \'"}, "evil": 1'.replace("\n", " ")
    _rewrite(data, lambda j: j.update(name=hostile, labels={"0": "bg", "1": "a: [b, '$c'] #"}))
    proc = cli("init", "spheres", "--from", "decathlon", data, cwd=tmp_path)
    assert proc.returncode == 0, out(proc)
    bundle = tmp_path / "bundles" / "spheres"
    train = yaml.safe_load((bundle / "configs" / "train.yaml").read_text())
    assert "evil" not in train and train["out_channels"] == 2
    meta = json.loads((bundle / "configs" / "metadata.json").read_text())
    assert "evil" not in meta and meta["network_data_format"]["outputs"]["pred"]["channel_def"]["1"] == "a: [b, '$c'] #"

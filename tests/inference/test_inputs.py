"""inference_datalist: folders, datalists and lists, labels by case name, deterministic shards."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpc_runner.errors import UserError
from hpc_runner.inference.inputs import case_name, inference_datalist


def _touch(folder: Path, *names: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for n in names:
        (folder / n).write_bytes(b"x")
    return folder


def test_case_name_drops_nii_and_nii_gz() -> None:
    assert case_name("/a/b/img_001.nii.gz") == "img_001"
    assert case_name("img.v2.nii") == "img.v2"


def test_folder_lists_matching_files_sorted_by_case_with_their_case_name(tmp_path: Path) -> None:
    folder = _touch(tmp_path / "imgs", "b.nii.gz", "a.nii.gz", "notes.txt", ".a.nii.gz.123.tmp")
    items = inference_datalist(str(folder))
    assert [i["case"] for i in items] == ["a", "b"]
    assert items[0]["image"] == str(folder / "a.nii.gz")


def test_labels_folder_is_matched_by_case_name(tmp_path: Path) -> None:
    imgs = _touch(tmp_path / "imgs", "a.nii.gz", "b.nii.gz")
    labs = _touch(tmp_path / "labs", "b.nii.gz", "a.nii.gz", "extra.nii.gz")
    items = inference_datalist(imgs, labs)
    assert [(i["case"], Path(i["label"]).parent.name, Path(i["label"]).name) for i in items] == [
        ("a", "labs", "a.nii.gz"), ("b", "labs", "b.nii.gz")]


def test_a_missing_label_is_refused_naming_the_case_and_the_folder(tmp_path: Path) -> None:
    imgs = _touch(tmp_path / "imgs", "a.nii.gz", "b.nii.gz")
    labs = _touch(tmp_path / "labs", "a.nii.gz")
    with pytest.raises(UserError) as err:
        inference_datalist(imgs, labs)
    text = err.value.paragraph()
    assert "case(s) b" in text and str(labs) in text and "labels" in text


def test_an_empty_folder_is_refused_naming_folder_and_pattern(tmp_path: Path) -> None:
    folder = _touch(tmp_path / "imgs", "a.nii")
    with pytest.raises(UserError) as err:
        inference_datalist(folder, pattern="*.nii.gz")
    assert str(folder) in str(err.value) and "*.nii.gz" in str(err.value) and "images" in str(err.value)


def test_a_missing_input_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        inference_datalist(tmp_path / "nope")


def test_datalist_file_as_list_or_monai_dict_with_paths_relative_to_its_folder(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "list.json").write_text(json.dumps(["x/a.nii.gz", "/abs/b.nii.gz"]))
    (tmp_path / "d" / "dl.json").write_text(json.dumps({
        "training": [{"image": "t.nii.gz"}],
        "testing": [{"image": "x/c.nii.gz", "label": "y/c.nii.gz"}],
        "validation": [{"image": "v.nii.gz"}]}))
    assert [i["image"] for i in inference_datalist(tmp_path / "d" / "list.json")] == [
        str(tmp_path / "d" / "x" / "a.nii.gz"), "/abs/b.nii.gz"]
    testing = inference_datalist(tmp_path / "d" / "dl.json")
    assert testing == [{"image": str(tmp_path / "d/x/c.nii.gz"), "label": str(tmp_path / "d/y/c.nii.gz"),
                        "case": "c"}]
    assert [i["case"] for i in inference_datalist(tmp_path / "d" / "dl.json", key="validation")] == ["v"]
    with pytest.raises(UserError, match="no list under 'nope'"):
        inference_datalist(tmp_path / "d" / "dl.json", key="nope")


def test_duplicate_case_names_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="two inputs have the case name 'a'"):
        inference_datalist(["/x/a.nii.gz", "/y/a.nii.gz"])


def test_require_labels_refuses_items_without_one() -> None:
    with pytest.raises(UserError, match="no label"):
        inference_datalist(["/x/a.nii.gz"], require_labels=True)
    assert inference_datalist([{"image": "/x/a.nii.gz", "label": "/x/l.nii.gz"}], require_labels=True)


@pytest.mark.parametrize("count,shards", [(1, 1), (7, 3), (24, 4), (3, 5)])
def test_shards_cover_every_case_exactly_once_whatever_the_input_order(count: int, shards: int) -> None:
    files = [f"/d/case{i:02d}.nii.gz" for i in range(count)]
    parts = [inference_datalist(files, shard_index=s, num_shards=shards) for s in range(shards)]
    again = [inference_datalist(list(reversed(files)), shard_index=s, num_shards=shards) for s in range(shards)]
    cases = [i["case"] for p in parts for i in p]
    assert sorted(cases) == [f"case{i:02d}" for i in range(count)]
    assert parts == again  # deterministic: the order of the input does not matter
    assert max(len(p) for p in parts) - min(len(p) for p in parts) <= 1
    assert [i["case"] for i in parts[0]] == [f"case{i:02d}" for i in range(0, count, shards)]


@pytest.mark.parametrize("index,shards", [(2, 2), (-1, 2), (0, 0)])
def test_a_shard_that_does_not_exist_is_refused(index: int, shards: int) -> None:
    with pytest.raises(UserError, match="shard_index"):
        inference_datalist(["/d/a.nii.gz"], shard_index=index, num_shards=shards)

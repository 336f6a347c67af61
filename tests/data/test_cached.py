"""CachedDataset: in memory or persistent, and MONAI's PersistentDataset reusing a stale cache (MONAI #999)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import monai.transforms as T
import pytest
import torch
from monai.data import PersistentDataset
from monai.data.utils import json_hashing

from hpc_runner.data.cached import CachedDataset, PersistentCacheDataset, publish_once
from hpc_runner.data.synthetic import ensure_synthetic_volumes

KEYS = ["image", "label"]


@pytest.fixture
def datalist(tmp_path: Path) -> list[dict[str, str]]:
    return ensure_synthetic_volumes(tmp_path / "vols", num_train=4, num_val=1, size=16)


def _prefix(maxv: float = 1.0) -> list:
    return [
        T.LoadImaged(keys=KEYS, image_only=True),
        T.EnsureChannelFirstd(keys=KEYS),
        T.ScaleIntensityd(keys="image", minv=0.0, maxv=maxv),
        T.EnsureTyped(keys=KEYS, track_meta=False),
    ]


def _image_max(ds, index: int = 0) -> float:
    return float(ds[index]["image"].max())


def test_monai_persistent_dataset_reuses_a_stale_cache_and_ours_does_not(datalist, tmp_path: Path) -> None:
    monai_dir, json_dir, ours_dir = tmp_path / "monai", tmp_path / "monai_json", tmp_path / "ours"
    assert _image_max(PersistentDataset(datalist, T.Compose(_prefix(1.0)), cache_dir=monai_dir)) == pytest.approx(1.0)
    # the transform changed (maxv 1 -> 10), MONAI's default key did not: the old result comes back
    stale = PersistentDataset(datalist, T.Compose(_prefix(10.0)), cache_dir=monai_dir)
    assert _image_max(stale) == pytest.approx(1.0)
    # json_hashing cannot serialise transforms and falls back to their class names: still stale
    kw = {"cache_dir": json_dir, "hash_transform": json_hashing}
    assert _image_max(PersistentDataset(datalist, T.Compose(_prefix(1.0)), **kw)) == pytest.approx(1.0)
    assert _image_max(PersistentDataset(datalist, T.Compose(_prefix(10.0)), **kw)) == pytest.approx(1.0)

    first = CachedDataset(datalist, _prefix(1.0), cache_dir=ours_dir, progress=False)
    assert _image_max(first) == pytest.approx(1.0)
    changed = CachedDataset(datalist, _prefix(10.0), cache_dir=ours_dir, progress=False)
    assert _image_max(changed) == pytest.approx(10.0)
    assert changed.dataset.stats.computed == len(datalist)
    assert changed.dataset.folder != first.dataset.folder
    again = CachedDataset(datalist, _prefix(1.0), cache_dir=ours_dir, progress=False)
    assert again.dataset.stats.reused == len(datalist) and again.dataset.stats.computed == 0


def test_persistent_gives_what_memory_gives_and_is_reused(datalist, tmp_path: Path) -> None:
    def chain():
        return T.Compose([*_prefix(), T.RandFlipd(keys=KEYS, prob=0.5, spatial_axis=0),
                          T.RandRotate90d(keys=KEYS, prob=0.5)])

    memory = CachedDataset(datalist, chain(), cache_dir=None, progress=False)
    persistent = CachedDataset(datalist, chain(), cache_dir=tmp_path / "c", progress=False)
    assert memory.mode == "memory" and memory.cache_dir is None
    assert persistent.mode == "persistent" and isinstance(persistent.dataset, PersistentCacheDataset)
    assert len(memory) == len(persistent) == len(datalist)
    for ds in (memory, persistent):
        ds.dataset.transform.set_random_state(seed=7)
    for i in range(len(datalist)):
        a, b = memory[i], persistent[i]
        for k in KEYS:
            assert torch.equal(torch.as_tensor(a[k]), torch.as_tensor(b[k])), (i, k)
    stats = persistent.dataset.stats
    assert (stats.computed, stats.reused, stats.items) == (len(datalist), 0, len(datalist))
    files = sorted(Path(stats.folder).glob("*.pt"))
    assert len(files) == len(datalist) and (Path(stats.folder) / "transforms.json").is_file()
    # a later job (a sweep point) only reads; an item beyond cache_num is computed fully each time
    later = CachedDataset(datalist, chain(), cache_dir=tmp_path / "c", progress=False, cache_num=2)
    assert (later.dataset.stats.computed, later.dataset.stats.reused) == (0, 2)
    assert later[3]["image"].shape == (1, 16, 16, 16)
    kept = CachedDataset(datalist, chain(), cache_dir=tmp_path / "c", progress=False, keep_in_memory=True)
    assert kept[-1]["label"].shape == (1, 16, 16, 16)


def test_a_corrupt_or_deleted_file_is_recomputed(datalist, tmp_path: Path) -> None:
    ds = CachedDataset(datalist, _prefix(), cache_dir=tmp_path / "c", progress=False).dataset
    expected = ds[0]["image"].clone()
    path = ds.item_path(0)
    path.write_bytes(path.read_bytes()[:100])  # a torn file (e.g. a full disk on a foreign writer)
    with pytest.warns(UserWarning, match="does not load"):
        assert torch.equal(ds[0]["image"], expected)
    assert torch.equal(torch.load(path, weights_only=True)["image"], expected)
    ds.item_path(1).unlink()
    assert ds[1]["image"].shape == expected.shape and ds.item_path(1).is_file()


def test_publish_once_never_replaces_a_published_file(tmp_path: Path) -> None:
    final = tmp_path / "item.pt"
    final.write_bytes(b"first")
    inode = final.stat().st_ino
    tmp = tmp_path / ".item.pt.x.tmp"
    tmp.write_bytes(b"second")
    assert publish_once(tmp, final) is False
    assert final.read_bytes() == b"first" and final.stat().st_ino == inode
    os.unlink(tmp)
    fresh = tmp_path / ".new.tmp"
    fresh.write_bytes(b"x")
    assert publish_once(fresh, tmp_path / "new.pt") is True and (tmp_path / "new.pt").read_bytes() == b"x"


def test_changed_input_file_is_not_served_from_the_cache(datalist, tmp_path: Path) -> None:
    ds = CachedDataset(datalist, _prefix(), cache_dir=tmp_path / "c", progress=False)
    before = ds[0]["image"].clone()
    # replace volume 0 by volume 1 under the same name: same path, other content
    shutil.copyfile(datalist[1]["image"], datalist[0]["image"])
    again = CachedDataset(datalist, _prefix(), cache_dir=tmp_path / "c", progress=False)
    assert again.dataset.stats.computed >= 1
    assert not torch.equal(again[0]["image"], before)

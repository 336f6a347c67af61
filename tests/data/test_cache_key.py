"""Cache keys: every argument of a cached transform is in the key; running a transform does not change it."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import monai.transforms as T
import pytest

from hpc_runner.data.cache_key import cache_split, describe, item_key, stop_reason, transform_key
from hpc_runner.data.synthetic import ensure_synthetic_volumes

KEYS = ["image", "label"]


@pytest.fixture(scope="module")
def datalist(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, str]]:
    return ensure_synthetic_volumes(tmp_path_factory.mktemp("vols"), num_train=4, num_val=1, size=16)


def _chain(**changes):
    args = {"maxv": 1.0, "pixdim": (1.5, 1.5, 1.5), "dtype": "float32", "pad": (20, 20, 20)}
    args.update(changes)
    return [
        T.LoadImaged(keys=KEYS, image_only=False, dtype=args["dtype"]),
        T.EnsureChannelFirstd(keys=KEYS),
        T.Orientationd(keys=KEYS, axcodes="RAS"),
        T.Spacingd(keys=KEYS, pixdim=args["pixdim"], mode=("bilinear", "nearest")),
        T.ScaleIntensityd(keys="image", maxv=args["maxv"]),
        T.SpatialPadd(keys=KEYS, spatial_size=args["pad"]),
        T.CropForegroundd(keys=KEYS, source_key="label"),
        T.Lambdad(keys="image", func=lambda x: x * 2),
        T.EnsureTyped(keys=KEYS, track_meta=False),
    ]


def test_key_changes_with_every_argument_and_only_then() -> None:
    base = transform_key(_chain())
    assert transform_key(_chain()) == base  # fresh, equal instances: same key
    for change in ({"maxv": 10.0}, {"pixdim": (1.0, 1.5, 1.5)}, {"dtype": "float16"}, {"pad": (24, 20, 20)}):
        assert transform_key(_chain(**change)) != base, change
    other_lambda = _chain()
    other_lambda[7] = T.Lambdad(keys="image", func=lambda x: x * 3)
    assert transform_key(other_lambda) != base
    assert transform_key(_chain()[:-1]) != base
    assert transform_key(_chain(), extra={"track_meta": True}) != base


def test_running_the_transforms_in_threads_does_not_change_the_key(datalist) -> None:
    # readers remember the last file read and traceable transforms grow a thread-local on first use;
    # neither may change the key, or a dataset built after another used the same objects would miss
    chain = _chain()
    before = transform_key(chain)
    compose = T.Compose(chain)
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda d: compose(d, threading=True), datalist))
    assert transform_key(chain) == before


def test_item_key_covers_the_item_and_its_files(tmp_path: Path) -> None:
    f = tmp_path / "a.nii.gz"
    f.write_bytes(b"one")
    item = {"image": str(f), "label": 3}
    key = item_key(item)
    assert item_key(dict(item)) == key
    assert item_key({**item, "label": 4}) != key
    f.write_bytes(b"other content")  # same path, new file: a stale cache must not be read
    assert item_key(item) != key
    assert item_key(item, hash_files=False) == item_key(dict(item), hash_files=False)


def test_split_is_monais_rule_and_says_why() -> None:
    compose = T.Compose([T.LoadImaged(keys=KEYS), T.RandFlipd(keys=KEYS, prob=0.5), T.ScaleIntensityd(keys="image")])
    assert cache_split(compose) == 1
    assert "random" in stop_reason(compose.transforms[1])
    opaque = T.Compose([T.LoadImaged(keys=KEYS), lambda d: d, T.ScaleIntensityd(keys="image")])
    assert cache_split(opaque) == 1
    assert "not a MONAI Transform" in stop_reason(opaque.transforms[1])
    nested = T.Compose([T.LoadImaged(keys=KEYS), T.Compose([T.ScaleIntensityd(keys="image")])])
    assert cache_split(nested) == 1 and "nested Compose" in stop_reason(nested.transforms[1])
    assert cache_split(T.Compose([T.LoadImaged(keys=KEYS)])) == 1


def test_description_has_no_addresses_or_set_order() -> None:
    text = str(describe([{3, 1, 2}, object(), T.ScaleIntensityd(keys="image")]))
    assert "0x" not in text
    assert describe({"b", "a"}) == describe({"a", "b"})

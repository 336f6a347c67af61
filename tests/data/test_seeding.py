"""Per-thread copies share data and cache but not random state; seeds derive from the item."""

from __future__ import annotations

import numpy as np
from monai.data import CacheDataset
from monai.transforms import Compose, RandGaussianNoise, ScaleIntensity

from hpc_runner.data import copy_transform, isolate, item_seeds
from hpc_runner.data.seeding import random_targets, reseed


def test_isolate_shares_cache_and_data_copies_random_part(cache_dataset: CacheDataset):
    view = isolate(cache_dataset)
    assert view._cache is cache_dataset._cache
    assert view.data is cache_dataset.data
    assert view.transform is not cache_dataset.transform
    det, rnd = cache_dataset.transform.transforms[1], cache_dataset.transform.transforms[2]
    assert view.transform.transforms[1] is det  # deterministic transforms are shared
    assert view.transform.transforms[2] is not rnd  # random ones are private
    assert random_targets(view) == [view.transform]


def test_each_random_transform_in_compose_gets_its_own_seed():
    t = copy_transform(Compose([RandGaussianNoise(prob=1.0), RandGaussianNoise(prob=1.0)]))
    reseed(random_targets(t), item_seeds(0, 0, 0, 0, 1))
    a, b = t.transforms
    # One shared seed would give both the same noise stream.
    assert a.R.randint(1 << 30) != b.R.randint(1 << 30)


def test_item_seeds_depend_on_every_part():
    base = item_seeds(1, 2, 3, 4, 2)
    assert base == item_seeds(1, 2, 3, 4, 2)
    for other in (item_seeds(9, 2, 3, 4, 2), item_seeds(1, 9, 3, 4, 2), item_seeds(1, 2, 9, 4, 2),
                  item_seeds(1, 2, 3, 9, 2)):
        assert other != base
    assert all(0 <= s < 2**32 for s in base)


def test_copy_transform_leaves_deterministic_transform_alone():
    s = ScaleIntensity()
    assert copy_transform(s) is s
    x = np.arange(8, dtype=np.float32)
    assert np.allclose(np.asarray(copy_transform(Compose([s]))(x)), np.asarray(s(x)))

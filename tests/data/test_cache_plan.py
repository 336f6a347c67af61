"""The cache plan of a config: what each dataset caches, its cost measured on real data, and the warnings."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpc_runner.config.bundle_config import load_bundle_config
from hpc_runner.config.overrides import parse_cli_overrides
from hpc_runner.data.cache_plan import cache_plan, fill_caches, log_cache_summary
from hpc_runner.data.synthetic import ensure_synthetic_volumes
from hpc_runner.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parents[2] / "bundles" / "synthetic_seg"

CONFIG = """
dataset_dir: null
cache_dir: null
datalist:
  _target_: hpc_runner.data.synthetic.synthetic_datalist
  dataset_dir: "@dataset_dir"
  split: train
  num_train: 4
  num_val: 1
load:
  - {_target_: LoadImaged, keys: [image, label], image_only: true}
  - {_target_: EnsureChannelFirstd, keys: [image, label]}
flip: {_target_: RandFlipd, keys: [image, label], prob: 0.5, spatial_axis: 0}
good:
  _target_: hpc_runner.data.cached.CachedDataset
  data: "@datalist"
  cache_dir: "@cache_dir"
  transform:
    _target_: Compose
    transforms: "$@load + [@scale, @flip]"
scale: {_target_: ScaleIntensityd, keys: image}
late_spacing:
  _target_: CacheDataset
  data: "@datalist"
  progress: false
  transform:
    _target_: Compose
    transforms: "$@load + [@flip, @spacing]"
spacing: {_target_: Spacingd, keys: [image, label], pixdim: [1.0, 1.0, 1.0]}
padded:
  _target_: CacheDataset
  data: "@datalist"
  cache_rate: 0.5
  transform:
    _target_: Compose
    transforms: "$@load + [@pad, @flip]"
pad: {_target_: SpatialPadd, keys: [image, label], spatial_size: [24, 24, 24]}
monai_persistent:
  _target_: PersistentDataset
  data: "@datalist"
  cache_dir: "@monai_cache"
  transform: {_target_: Compose, transforms: "@load"}
monai_cache: null
plain:
  nested:
    _target_: Dataset
    data: "@datalist"
    transform: {_target_: Compose, transforms: "@load"}
opaque:
  _target_: CacheDataset
  data: "@datalist"
  transform:
    _target_: Compose
    transforms: "$@load + [lambda d: d, @scale]"
"""


@pytest.fixture(scope="module")
def cfg(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("plan")
    ensure_synthetic_volumes(root / "vols", num_train=4, num_val=1, size=16)
    (root / "train.yaml").write_text(CONFIG)
    overrides = ["--dataset_dir", str(root / "vols"), "--monai_cache", str(root / "monai")]
    return load_bundle_config(config_files=[root / "train.yaml"], meta_file=EXAMPLE / "configs" / "metadata.json",
                              cli_overrides=parse_cli_overrides(overrides))


def test_plan_measures_each_dataset_on_the_data(cfg) -> None:
    plan = cache_plan(cfg, initialize=False)
    by_id = {d.id: d for d in plan.datasets}
    assert list(by_id) == ["good", "late_spacing", "padded", "monai_persistent", "plain::nested", "opaque"]
    good = by_id["good"]
    assert good.kind == "memory" and good.error is None
    assert [s.name for s in good.cached] == ["LoadImaged", "EnsureChannelFirstd", "ScaleIntensityd"]
    assert [s.name for s in good.per_epoch] == ["RandFlipd"] and "RandFlipd is random" in good.stop
    # 4 train volumes of 16^3 float32 image + float32 label, all cached
    assert (good.items, good.cached_items) == (4, 4)
    assert good.bytes_per_item == 2 * 16**3 * 4 and good.memory_bytes == 4 * 2 * 16**3 * 4
    assert good.fill_s > 0 and good.uncached_epoch_s > good.cached_epoch_s > 0
    assert all(s.seconds is not None for s in good.steps)
    assert by_id["padded"].cached_items == 2
    assert by_id["plain::nested"].kind == "none" and by_id["plain::nested"].cached == []
    assert by_id["monai_persistent"].kind == "monai-persistent" and by_id["monai_persistent"].disk_bytes > 0
    text = plan.format()
    assert "good: CachedDataset, cached in memory" in text and "every epoch:  RandFlipd" in text
    assert "cache fill" in text and "one uncached epoch" in text and "measured on the data" in text


def test_plan_warns_about_orders_that_waste_the_cache(cfg) -> None:
    plan = cache_plan(cfg, initialize=False)
    warnings = "\n".join(plan.warnings)
    assert "late_spacing: Spacingd is deterministic and expensive" in warnings and "comes after RandFlipd" in warnings
    assert "padded: SpatialPadd grows each item 3.38x before the cache" in warnings
    assert "monai_persistent: MONAI PersistentDataset" in warnings and "#999" in warnings
    assert "plain::nested: Dataset caches nothing" in warnings
    assert "opaque: the cache stops at <lambda>" in warnings and "not a MONAI Transform" in warnings
    assert not any(w.startswith("good:") for w in plan.warnings)


def test_run_start_summary_is_one_line_plus_warnings(cfg, capsys) -> None:
    plan = log_cache_summary(cfg, cfg.expanded())
    assert plan is not None and not plan.measured
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"hpc-runner: {plan.summary_line()}"
    assert lines[0].startswith("hpc-runner: cache: good caches 3 (LoadImaged..ScaleIntensityd) in memory, 1 every")
    warned = "\n".join(lines[1:])
    assert all(line.startswith("hpc-runner: warning: cache: ") for line in lines[1:])
    assert "Spacingd is deterministic and expensive" in warned and "SpatialPadd pads before the cache" in warned


def test_persistent_plan_counts_files_already_there(cfg, tmp_path: Path) -> None:
    persistent = cfg.with_overrides(parse_cli_overrides(["--cache_dir", str(tmp_path / "c")]))
    results = {r.id: r for r in fill_caches(persistent, only=["good"], initialize=False)}
    assert (results["good"].computed, results["good"].items) == (4, 4)
    plan = cache_plan(persistent, initialize=False)
    good = next(d for d in plan.datasets if d.id == "good")
    assert good.kind == "persistent" and good.folder == results["good"].folder and good.present == 4
    assert good.memory_bytes == 0 and good.disk_bytes > 0
    again = fill_caches(persistent, only=["good"], initialize=False)[0]
    assert (again.computed, again.reused) == (0, 4)


def test_fill_needs_a_cache_dir(cfg) -> None:
    with pytest.raises(ConfigError, match="no dataset of the config has a persistent cache"):
        fill_caches(cfg, initialize=False)
    with pytest.raises(ConfigError, match="not a dataset id"):
        fill_caches(cfg, only=["nope"], initialize=False)

"""``hpc-runner init NAME --from decathlon DIR``: a training bundle for a checked Decathlon-style folder.

The bundle's train.yaml is a plain MONAI bundle config laid out like the synthetic_seg template (the same
dataset, loader, trainer and entries, so run, verify, sweeps and reports treat it the same): MONAI's
``load_decathlon_datalist`` reads dataset.json, the deterministic transforms are cached, the random crop
runs after the cache. The numbers read from the folder (channels, classes, voxel size, the split) are
written as ids, so each can be changed by an override.

Every generated file is a serializer's output of data (``yaml.safe_dump``, ``json.dumps``), never a text
template with values spliced in: a name in dataset.json cannot become YAML, a ``$`` expression or a reference.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from hpc_runner.records.json_out import dumps_json
from hpc_runner.registry.decathlon_folder import MIN_SIDE, DecathlonFolder
from hpc_runner.registry.scaffold import installed_version, new_metadata, write_files, write_new_bundle

ROI_SIZE = [96, 96, 96]
SPLIT_RATIOS = [4, 1]           # training : validation cases, when dataset.json has no "validation" list
CT_WINDOW = (-175, 250)         # Hounsfield units kept (soft tissue); the rest is clipped


def roi_size(folder: DecathlonFolder) -> list[int]:
    """Return the crop: ROI_SIZE, made smaller on an axis where the smallest volume is (a multiple of 16, which
    the UNet's four down-samplings need), so every crop is of the volume and not of padding."""
    return [max(MIN_SIDE, min(side, (small // 16) * 16)) for side, small in zip(ROI_SIZE, folder.smallest)]


def split_ratios(num_training: int) -> list[int]:
    """Return ratios for MONAI's partition_dataset that leave at least one validation case."""
    kept = min(int(SPLIT_RATIOS[0] / sum(SPLIT_RATIOS) * num_training + 0.5), num_training)
    return list(SPLIT_RATIOS) if kept < num_training else [num_training - 1, 1]


def _load(key: str) -> dict[str, Any]:
    return {"_target_": "monai.data.load_decathlon_datalist", "data_list_file_path": "@dataset_json",
            "is_segmentation": True, "data_list_key": key}


def _datalists(folder: DecathlonFolder) -> dict[str, Any]:
    """dataset.json's own "validation" list, else a fixed split of its "training" list (``split_seed``)."""
    if folder.num_validation:
        return {"train_datalist": _load("training"), "val_datalist": _load("validation")}
    return {
        "split_ratios": split_ratios(folder.num_training),  # training : validation cases
        "split_seed": 0,                                    # which cases go where; change it for another split
        "training_list": _load("training"),
        "split": {"_target_": "monai.data.partition_dataset", "data": "@training_list", "ratios": "@split_ratios",
                  "shuffle": True, "seed": "@split_seed"},
        "train_datalist": {"_target_": "monai.data.select_cross_validation_folds", "partitions": "@split",
                           "folds": 0},
        "val_datalist": {"_target_": "monai.data.select_cross_validation_folds", "partitions": "@split", "folds": 1},
    }


def _intensity(folder: DecathlonFolder) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Return the intensity ids and the transforms that crop to the foreground and scale intensities."""
    # the foreground box is grown to a multiple of the crop (padded past the image's edge if need be), so every
    # cached volume holds a whole roi_size crop: no padding after the cache (a deterministic step every epoch) and
    # none of a whole volume before it
    crop = {"_target_": "CropForegroundd", "keys": ["image", "label"], "source_key": "image",
            "k_divisible": "@roi_size", "allow_smaller": False}
    if folder.is_ct:  # Hounsfield units mapped to [0, 1], the rest clipped
        return ({"intensity_min": CT_WINDOW[0], "intensity_max": CT_WINDOW[1]},
                [{"_target_": "ScaleIntensityRanged", "keys": "image", "a_min": "@intensity_min",
                  "a_max": "@intensity_max", "b_min": 0.0, "b_max": 1.0, "clip": True}, crop])
    # not CT: intensities have no fixed unit, so each channel is normalised over its non-zero voxels
    return {}, [crop, {"_target_": "NormalizeIntensityd", "keys": "image", "nonzero": True, "channel_wise": True}]


def _dataset(data: str, transform: str) -> dict[str, Any]:
    return {"_target_": "hpc_runner.data.cached.CachedDataset", "data": data, "transform": transform,
            "cache_dir": "@cache_dir", "cache_rate": 1.0, "num_workers": 1}


def train_config(name: str, folder: DecathlonFolder) -> dict[str, Any]:
    """Return configs/train.yaml of a bundle for ``folder``, as data (written by ``yaml.safe_dump``).

    Of dataset.json, only numbers counted from it and the path of the file itself reach the config; its names
    (dataset, labels, modality) stay in metadata.json, checked by ``check_decathlon_folder``."""
    intensity_ids, intensity = _intensity(folder)
    pair = ["image", "label"]
    return {
        "bundle_root": ".",
        "dataset_json": str(folder.dataset_json),   # its folder holds imagesTr/, labelsTr/
        "output_dir": f"runs/{name}/monai",          # hpc-runner sets this to its run dir
        "seed": 0,
        "deterministic": False,
        "device": None,                              # null: cuda when available, else cpu
        "in_channels": len(folder.modality),
        "out_channels": len(folder.labels),
        "pixdim": list(folder.spacing),              # voxel size (mm) every volume is resampled to: the median
        "roi_size": roi_size(folder),
        "num_samples": 2,
        **intensity_ids,
        "batch_size": 2,
        "max_epochs": 100,
        "val_interval": 5,
        "learning_rate": 0.0001,
        "initialize": [{"_target_": "monai.utils.set_determinism", "seed": "@seed"}],
        **_datalists(folder),
        "preprocessing": [  # deterministic prefix: computed once and cached by the dataset
            {"_target_": "LoadImaged", "keys": pair, "image_only": True},
            {"_target_": "EnsureChannelFirstd", "keys": pair},
            {"_target_": "Orientationd", "keys": pair, "axcodes": "RAS", "labels": None},
            {"_target_": "Spacingd", "keys": pair, "pixdim": "@pixdim", "mode": ["bilinear", "nearest"]},
            *intensity,
            {"_target_": "EnsureTyped", "keys": pair, "track_meta": False},
        ],
        "augmentation": [  # random part: runs every epoch, after the cache
            {"_target_": "RandCropByPosNegLabeld", "keys": pair, "label_key": "label", "spatial_size": "@roi_size",
             "pos": 1, "neg": 1, "num_samples": "@num_samples", "image_key": "image", "image_threshold": 0,
             "allow_smaller": True},
            {"_target_": "RandFlipd", "keys": pair, "prob": 0.5, "spatial_axis": 0},
            {"_target_": "RandRotate90d", "keys": pair, "prob": 0.5, "spatial_axes": [0, 1]},
        ],
        "train_transforms": {"_target_": "hpc_runner.data.compose.chain", "parts": ["@preprocessing", "@augmentation"]},
        "val_transforms": {"_target_": "Compose", "transforms": "@preprocessing"},
        "cache_dir": None,  # null: in memory; a folder: a persistent cache shared by runs and sweep points
        "train_dataset": _dataset("@train_datalist", "@train_transforms"),
        "val_dataset": _dataset("@val_datalist", "@val_transforms"),
        "train_loader": {"_target_": "hpc_runner.data.ThreadDataLoader", "dataset": "@train_dataset",
                         "batch_size": "@batch_size", "shuffle": True, "num_workers": 0, "buffer_size": 1,
                         "seed": "@seed"},
        "val_loader": {"_target_": "hpc_runner.data.ThreadDataLoader", "dataset": "@val_dataset", "batch_size": 1,
                       "num_workers": 0, "seed": "@seed"},
        "network_def": {"_target_": "UNet", "spatial_dims": 3, "in_channels": "@in_channels",
                        "out_channels": "@out_channels", "channels": [16, 32, 64, 128, 256], "strides": [2, 2, 2, 2],
                        "num_res_units": 2, "norm": "instance"},
        "loss": {"_target_": "DiceCELoss", "to_onehot_y": True, "softmax": True},
        "optimizer": {"_target_": "torch.optim.Adam", "_mode_": "callable", "lr": "@learning_rate"},
        "metric": {"_target_": "DiceMetric", "include_background": False, "reduction": "mean"},
        "post_pred": {"_target_": "AsDiscrete", "argmax": True, "to_onehot": "@out_channels"},
        "post_label": {"_target_": "AsDiscrete", "to_onehot": "@out_channels"},
        "inferer": {"_target_": "SlidingWindowInferer", "roi_size": "@roi_size", "sw_batch_size": 4, "overlap": 0.25},
        "trainer": {"_target_": "hpc_runner.engine.Trainer", "network": "@network_def", "optimizer": "@optimizer",
                    "loss_function": "@loss", "train_loader": "@train_loader", "val_loader": "@val_loader",
                    "metric": "@metric", "metric_name": "val_dice", "post_pred": "@post_pred",
                    "post_label": "@post_label", "inferer": "@inferer", "max_epochs": "@max_epochs",
                    "val_interval": "@val_interval", "device": "@device", "seed": "@seed", "amp": False,
                    "checkpoint_interval": 0, "output_dir": "@output_dir"},
        # entries: `hpc-runner run` runs `run`, `hpc-runner run training` runs `training` (MONAI's name);
        # declarative calls of trainer.run(), so the bundle has no `$` and also runs with --safe
        "run": [{"_target_": "hpc_runner.engine.fit", "trainer": "@trainer"}],
        "training": {"_target_": "hpc_runner.engine.fit", "trainer": "@trainer"},
    }


# the head of train.yaml: fixed text, nothing from dataset.json or the folder's path in it
TRAIN_HEADER = """# A 3D UNet learns to segment a Decathlon-style dataset.
# Written by `hpc-runner init NAME --from decathlon DIR` (see docs/README.md and configs/metadata.json
# for the data). A MONAI bundle: `hpc-runner run training --bundle NAME` and `python -m monai.bundle run
# training --config_file configs/train.yaml --meta_file configs/metadata.json` both run it. Any id below
# can be overridden: --max_epochs 50 --roi_size "[64,64,64]" --pixdim "[1,1,1]".
# dataset_json: its folder holds imagesTr/, labelsTr/. pixdim: the voxel size (mm) every volume is
# resampled to (init read the median). cache_dir null: the deterministic prefix (preprocessing) is cached
# in memory; a folder (--cache_dir /scratch/$USER/hpcr-cache): a persistent cache shared by runs and sweep
# points. output_dir: hpc-runner sets it to its run dir.
"""


def train_yaml(name: str, folder: DecathlonFolder) -> str:
    """Return the text of configs/train.yaml: the fixed header and ``yaml.safe_dump`` of the config's data."""
    return TRAIN_HEADER + "\n" + yaml.safe_dump(train_config(name, folder), sort_keys=False, allow_unicode=False,
                                                 default_flow_style=None, width=110)


def metadata(name: str, folder: DecathlonFolder, author: str) -> dict:
    """Return configs/metadata.json of a bundle for ``folder``."""
    channels = len(folder.modality)
    base = {
        "schema": "https://github.com/Project-MONAI/MONAI-extra-test-data/releases/download/0.8.1/"
                  "meta_schema_20220324.json",
        "required_packages_version": {"nibabel": "", "hpc-runner": ""},
        "description": f"A 3D UNet trained on {folder.num_training} volumes of {folder.name}",
        "task": f"Segmentation of {', '.join(list(folder.labels.values())[1:])} in {folder.name}",
        "data_source": f"{folder.dataset_json} (Decathlon-style)",
        "data_type": "nifti",
        "image_classes": f"{channels} channel(s): " + ", ".join(folder.modality.values()),
        "label_classes": ", ".join(f"{k} {v}" for k, v in folder.labels.items()),
        "pred_classes": f"{len(folder.labels)} channels: " + ", ".join(folder.labels.values()),
        "eval_metrics": {"val_dice": 0.0},
        "intended_use": "TODO: research only, until validated",
        "references": [],
        "network_data_format": {
            "inputs": {"image": {
                "type": "image", "format": "magnitude", "modality": "/".join(folder.modality.values()),
                "num_channels": channels, "spatial_shape": roi_size(folder), "dtype": "float32",
                "value_range": [], "is_patch_data": True, "channel_def": dict(folder.modality)}},
            "outputs": {"pred": {
                "type": "image", "format": "segmentation", "num_channels": len(folder.labels),
                "spatial_shape": roi_size(folder), "dtype": "float32", "value_range": [0, 1], "is_patch_data": True,
                "channel_def": dict(folder.labels)}},
        },
    }
    meta = new_metadata(base, name, f"the Decathlon-style folder {folder.root}", author)
    for package in base["required_packages_version"]:
        meta["required_packages_version"][package] = installed_version(package)
    return meta


def readme(name: str, folder: DecathlonFolder) -> str:
    """Return docs/README.md of a bundle for ``folder``."""
    split = ("dataset.json's \"validation\" list" if folder.num_validation else
             f"a fixed split of the \"training\" list (split_ratios {split_ratios(folder.num_training)})")
    return f"""# {name}

A 3D UNet for {folder.name}: {folder.num_training} training volumes from `{folder.dataset_json}`,
validated on {split}. Written by `hpc-runner init {name} --from decathlon {folder.root}`.

## Use

```
hpc-runner verify {name} --net
hpc-runner run training --bundle {name} --max_epochs 2          # a short trial here
hpc-runner submit training --bundle {name} --slurm gpus_per_node=1 --max_epochs 300  # on the cluster
```

Change the voxel size, the crop or the length by override: `--pixdim "[1.5,1.5,2]"`,
`--roi_size "[64,64,64]"`, `--max_epochs 300`; the data by `--dataset_json /scratch/$USER/data/dataset.json`.
See docs/your-data.md in hpc-runner.
"""


def init_decathlon_bundle(name: str, dest: Path, folder: DecathlonFolder, *, author: str) -> Path:
    """Create bundle ``name`` in folder ``dest`` for the checked ``folder``; return ``dest``."""
    files = {
        "configs/train.yaml": train_yaml(name, folder),
        "configs/metadata.json": dumps_json(metadata(name, folder, author), indent=4) + "\n",
        "docs/README.md": readme(name, folder),
        "LICENSE": "TODO: the license of this bundle; the data's own license applies to the data.\n",
    }
    return write_new_bundle(name, Path(dest), lambda staged: write_files(staged, files))

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

from hpc_runner.errors import BundleError, UserError
from hpc_runner.records.json_out import dumps_json
from hpc_runner.registry.decathlon_folder import MAX_SAID, DecathlonFolder
from hpc_runner.registry.scaffold import installed_version, new_metadata, write_files, write_new_bundle

ROI_SIZE = [96, 96, 96]
STEP = 16                       # the UNet's four stride-2 down-samplings: each side of the crop a multiple of 16
MIN_SIDE = 32                   # the smallest side init chooses by itself (--roi-size may go down to STEP)
MAX_SIDE = 1024
SPLIT_RATIOS = [4, 1]           # training : validation cases, when dataset.json has no "validation" list
CT_WINDOW = (-175, 250)         # Hounsfield units kept (soft tissue); the rest is clipped
CROP_OPTION, PAD_OPTION = "--roi-size", "--pad-small"


def roi_size(folder: DecathlonFolder) -> list[int]:
    """Return the crop init chooses: ROI_SIZE, made smaller on an axis where the smallest volume is (a multiple of
    16, which the UNet's four down-samplings need), so every crop is of the volume and not of padding; never
    under MIN_SIDE (a volume smaller than that is refused by :func:`check_crop`, or padded when allowed)."""
    return [max(MIN_SIDE, min(side, (small // STEP) * STEP)) for side, small in zip(ROI_SIZE, folder.smallest)]


def turns_in_plane(crop: list[int]) -> bool:
    """Return whether the bundle turns its crops a quarter in the x-y plane (RandRotate90d): only a crop that is
    square there keeps its shape, and the crops of a batch must have one shape."""
    return crop[0] == crop[1]


def parse_crop(text: str) -> list[int]:
    """Return the crop given as ``--roi-size``: one side for all axes (``64``) or three (``64,64,32``, ``[64,64,32]``),
    each a multiple of 16 from 16 to 1024; else refuse naming the option."""
    words = text.strip().strip("[]()").replace(",", " ").split()
    sides = [int(w) for w in words if w.isascii() and w.isdigit()] if len(words) in (1, 3) else []
    if len(sides) != len(words) or not sides or not all(STEP <= s <= MAX_SIDE and s % STEP == 0 for s in sides):
        raise UserError(f"{CROP_OPTION} {text!r:.40} is not a crop the bundle's 3D UNet can train on",
                        expected=f"{CROP_OPTION} N or X,Y,Z in voxels, each a multiple of {STEP} (its four "
                        f"down-samplings) from {STEP} to {MAX_SIDE}, e.g. {CROP_OPTION} 64,64,32")
    return sides * 3 if len(sides) == 1 else sides


def check_crop(folder: DecathlonFolder, crop: list[int], *, pad_small: bool) -> list[str]:
    """Return the training volumes smaller than ``crop`` on an axis once resampled, each as "ref (path) is [x, y, z]";
    refuse them all at once, naming dataset.json, the crop and the ways out, unless ``pad_small``."""
    small = [f"{v.ref} ({v.path}) is {v.sides(folder.spacing)}" for v in folder.training_volumes
             if any(side < c for side, c in zip(v.sides(folder.spacing), crop))]
    if not small or pad_small:
        return small
    fits = [min(c, (s // STEP) * STEP) for c, s in zip(crop, folder.smallest)]  # lowered only where it must be
    lower = (f"lower the crop with {CROP_OPTION} {','.join(map(str, fits))} (multiples of {STEP} every volume "
             "holds), " if min(fits) >= STEP else "")
    more = f" (and {len(small) - MAX_SAID} more)" if len(small) > MAX_SAID else ""
    raise BundleError(
        f"{len(small)} volume{'s are' if len(small) > 1 else ' is'} smaller than the crop (roi_size {crop}) on an "
        f"axis once resampled to the median voxel size {folder.spacing} mm, so {'their' if len(small) > 1 else 'its'} "
        "crops would be mostly padding: "
        + "; ".join(small[:MAX_SAID]) + more, where=str(folder.dataset_json),
        expected=f"every volume at least the crop: {lower}train on them padded to the crop with {PAD_OPTION} "
        "(SpatialPadd after the random crop), or take them out of dataset.json")


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
    # the foreground box as it is: a volume smaller than the crop is padded after the cache (augmentation), where
    # padding is cheap and the cache holds none of it
    crop = {"_target_": "CropForegroundd", "keys": ["image", "label"], "source_key": "image"}
    if folder.is_ct:  # Hounsfield units mapped to [0, 1], the rest clipped
        return ({"intensity_min": CT_WINDOW[0], "intensity_max": CT_WINDOW[1]},
                [{"_target_": "ScaleIntensityRanged", "keys": "image", "a_min": "@intensity_min",
                  "a_max": "@intensity_max", "b_min": 0.0, "b_max": 1.0, "clip": True}, crop])
    # not CT: intensities have no fixed unit, so each channel is normalised over its non-zero voxels
    return {}, [crop, {"_target_": "NormalizeIntensityd", "keys": "image", "nonzero": True, "channel_wise": True}]


def _dataset(data: str, transform: str) -> dict[str, Any]:
    return {"_target_": "hpc_runner.data.cached.CachedDataset", "data": data, "transform": transform,
            "cache_dir": "@cache_dir", "cache_rate": 1.0, "num_workers": 1}


def train_config(name: str, folder: DecathlonFolder, crop: list[int] | None = None) -> dict[str, Any]:
    """Return configs/train.yaml of a bundle for ``folder``, as data (written by ``yaml.safe_dump``).

    Of dataset.json, only numbers counted from it and the path of the file itself reach the config; its names
    (dataset, labels, modality) stay in metadata.json, checked by ``check_decathlon_folder``."""
    intensity_ids, intensity = _intensity(folder)
    crop = crop or roi_size(folder)
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
        "roi_size": crop,
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
            # a crop of a volume (or of a foreground box) smaller than the crop size is padded to it, after the
            # cache, where padding is cheap; every other crop passes unchanged
            {"_target_": "SpatialPadd", "keys": pair, "spatial_size": "@roi_size"},
            {"_target_": "RandFlipd", "keys": pair, "prob": 0.5, "spatial_axis": 0},
            # a quarter turn in the x-y plane: only when the crop is square there, or the crops of a batch differ
            *([{"_target_": "RandRotate90d", "keys": pair, "prob": 0.5, "spatial_axes": [0, 1]}]
              if turns_in_plane(crop) else []),
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


def train_yaml(name: str, folder: DecathlonFolder, crop: list[int] | None = None) -> str:
    """Return the text of configs/train.yaml: the fixed header and ``yaml.safe_dump`` of the config's data."""
    return TRAIN_HEADER + "\n" + yaml.safe_dump(train_config(name, folder, crop), sort_keys=False, allow_unicode=False,
                                                 default_flow_style=None, width=110)


def metadata(name: str, folder: DecathlonFolder, author: str, crop: list[int] | None = None) -> dict:
    """Return configs/metadata.json of a bundle for ``folder``."""
    channels = len(folder.modality)
    shape = crop or roi_size(folder)
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
                "num_channels": channels, "spatial_shape": shape, "dtype": "float32",
                "value_range": [], "is_patch_data": True, "channel_def": dict(folder.modality)}},
            "outputs": {"pred": {
                "type": "image", "format": "segmentation", "num_channels": len(folder.labels),
                "spatial_shape": shape, "dtype": "float32", "value_range": [0, 1], "is_patch_data": True,
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
hpc-runner submit training --bundle {name} --scheduler-option gpus_per_node=1 --max_epochs 300  # on the cluster
```

Change the voxel size, the crop or the length by override: `--pixdim "[1.5,1.5,2]"`,
`--roi_size "[64,64,64]"`, `--max_epochs 300`; the data by `--dataset_json /scratch/$USER/data/dataset.json`.
See docs/your-data.md in hpc-runner.
"""


def init_decathlon_bundle(name: str, dest: Path, folder: DecathlonFolder, *, author: str,
                          crop: list[int] | None = None) -> Path:
    """Create bundle ``name`` in folder ``dest`` for the checked ``folder``; return ``dest``."""
    files = {
        "configs/train.yaml": train_yaml(name, folder, crop),
        "configs/metadata.json": dumps_json(metadata(name, folder, author, crop), indent=4) + "\n",
        "docs/README.md": readme(name, folder),
        "LICENSE": "TODO: the license of this bundle; the data's own license applies to the data.\n",
    }
    return write_new_bundle(name, Path(dest), lambda staged: write_files(staged, files))

"""``hpc-runner init``: start a new bundle from a template (default: the synthetic_seg example)."""

from __future__ import annotations

import argparse
import getpass
from pathlib import Path

from hpc_runner.config.bundle_config import BundleConfig
from hpc_runner.config.code_warnings import remember
from hpc_runner.errors import BundleError, UserError
from hpc_runner.registry.decathlon_bundle import (
    CROP_OPTION,
    PAD_OPTION,
    ROI_SIZE,
    check_crop,
    init_decathlon_bundle,
    parse_crop,
    roi_size,
    turns_in_plane,
)
from hpc_runner.registry.decathlon_folder import MAX_SAID, check_decathlon_folder
from hpc_runner.registry.scaffold import check_name, init_bundle
from hpc_runner.registry.search import resolve_bundle

DECATHLON = "decathlon"  # the source kind of --from decathlon DIR

HELP = "create a new bundle from a template or for your Decathlon-style data (passes verify, runs as is)"
DESCRIPTION = """Create a new bundle NAME by copying a template bundle (default: synthetic_seg on the
search path): the template's name is replaced in its configs, metadata gets NAME, version 0.1.0, a
changelog entry, you as author and the installed monai/torch/numpy versions, and docs/README.md
says how to run, verify and share it. The new bundle passes `hpc-runner verify` and runs.

With --from decathlon DIR, the bundle trains a 3D UNet on your data instead: DIR is a Medical
Segmentation Decathlon-style folder (DIR/dataset.json with a "training" list of image/label pairs,
the volumes in imagesTr/ and labelsTr/). The folder is checked first (every file named exists and
lies inside DIR); the channels, classes, voxel size and validation split come from it. The crop
(roi_size) is 96 voxels a side, less where the smallest volume is; a volume smaller than the crop is
refused, all of them named at once, unless --roi-size lowers the crop or --pad-small pads them. See
docs/your-data.md."""
EPILOG = """examples:
  hpc-runner init spleen_seg                      # creates bundles/spleen_seg
  hpc-runner init spleen_seg --from zoo_bundle --to ~/work/spleen_seg
  hpc-runner init spleen_seg --from decathlon /data/Task09_Spleen   # train on your own data
  hpc-runner init spleen_seg --from decathlon /data/Task09_Spleen --roi-size 64,64,32
  hpc-runner run training --bundle spleen_seg --max_epochs 2
  hpc-runner run --bundle spleen_seg --max_epochs 1"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the init options."""
    parser.add_argument("name", nargs="?", metavar="NAME",
                        help="name of the new bundle (letters, digits, _); before or after --from")
    parser.add_argument("--from", dest="template", nargs="+", metavar=("TEMPLATE|decathlon", "DIR"),
                        help="a template bundle, DIR|NAME[@VERSION] (default: synthetic_seg); or 'decathlon "
                        "DIR': a bundle for the Decathlon-style folder DIR (DIR/dataset.json, imagesTr/, labelsTr/)")
    parser.add_argument("--to", metavar="DIR", help="folder of the new bundle (default: bundles/NAME)")
    parser.add_argument("--author", help="authors field of the metadata (default: your user name)")
    parser.add_argument(CROP_OPTION, "--roi_size", dest="roi_size", metavar="N|X,Y,Z",
                        help="with --from decathlon: the training crop and validation window in voxels, multiples "
                        "of 16 (default: 96 a side, less where the smallest volume is)")
    parser.add_argument(PAD_OPTION, "--pad_small", dest="pad_small", action="store_true",
                        help="with --from decathlon: train on volumes smaller than the crop, padded to it "
                        "(default: refused, each named)")


def main(args: argparse.Namespace) -> int:
    """Run the command."""
    # imported here, as by every command module: `hpc-runner --help` loads each command's module, and these
    # bring jsonschema (0.1-0.7 s)

    source = list(args.template or [])
    args.name, source = _name_and_source(args.name, source)
    dest = Path(args.to) if args.to else Path("bundles") / args.name
    crop = parse_crop(args.roi_size) if args.roi_size is not None else None  # a bad value: before anything is read
    if len(source) == 2 and source[0] == DECATHLON:
        return _init_decathlon(args.name, dest, source[1], args.author, crop, pad_small=args.pad_small)
    if crop is not None or args.pad_small:
        raise UserError(f"{CROP_OPTION} and {PAD_OPTION} are for --from {DECATHLON} DIR: a template's crop is in "
                        "its configs", expected=f"hpc-runner init NAME --from {DECATHLON} DIR {CROP_OPTION} N, or "
                        "the template's own id as an override when you run it (--roi_size \"[64,64,64]\")")
    if len(source) > 1:
        raise BundleError(f"--from takes a template, or '{DECATHLON} DIR'; got {' '.join(source)}",
                          expected=f"--from DIR|NAME[@VERSION] or --from {DECATHLON} DIR")
    template = resolve_bundle(source[0]) if source else None
    init_bundle(args.name, dest, template, author=args.author)
    print(f"created bundle {args.name} in {dest}")
    print(f"next: edit {dest}/configs, then 'hpc-runner verify {dest} --net' and "
          f"'hpc-runner run --bundle {dest} --max_epochs 1'")
    return 0


def _name_and_source(name: str | None, source: list[str]) -> tuple[str, list[str]]:
    """Return NAME and the --from words, NAME taken from after them when it came last (`--from decathlon DIR
    NAME`, `--from TEMPLATE NAME`: --from takes every word up to the next option)."""
    size = 2 if source[:1] == [DECATHLON] else 1
    if name is None and len(source) == size + 1:
        return source[-1], source[:size]
    if name is None:
        raise UserError("init needs the NAME of the new bundle",
                        expected=f"hpc-runner init NAME [--from {DECATHLON} DIR], or --from {DECATHLON} DIR NAME")
    return name, source


def _init_decathlon(name: str, dest: Path, folder: str, author: str | None, crop: list[int] | None, *,
                    pad_small: bool) -> int:
    check_name(name)  # the cheap mistake first, before the folder's headers are read
    checked = check_decathlon_folder(folder)
    chosen = crop or roi_size(checked)
    padded = check_crop(checked, chosen, pad_small=pad_small)  # all refused at once, unless pad_small
    init_decathlon_bundle(name, dest, checked, author=author or getpass.getuser(), crop=chosen)
    # hpc-runner wrote every target of it (MONAI's, hpc-runner's): no "run only configs you trust" at its first run,
    # until its files change
    configs = dest / "configs"
    remember(BundleConfig(name=name, bundle_dir=dest, config_files=[configs / "train.yaml"],
                          meta_file=configs / "metadata.json", config={}, where={}))
    split = (f"{checked.num_validation} validation cases from dataset.json" if checked.num_validation else
             "validation split from the training list")
    print(f"created bundle {name} in {dest}: {checked.num_training} training volumes, {split}, "
          f"{len(checked.modality)} input channel(s), {len(checked.labels)} classes, voxel size {checked.spacing}")

    if crop is None and chosen != ROI_SIZE:
        print(f"note: the crop (roi_size) is {chosen}, not {ROI_SIZE}: the volumes are at least {checked.smallest} "
              f"voxels a side at the median voxel size ({CROP_OPTION} sets it)")
    if not turns_in_plane(chosen):
        print(f"note: the crop {chosen} is not square in x-y, so the bundle does not turn its crops a quarter "
              "(RandRotate90d): the crops of a batch would differ in shape")
    if padded:
        print(f"note: {len(padded)} volume{'s' if len(padded) > 1 else ''} smaller than the crop {chosen} "
              f"{'are' if len(padded) > 1 else 'is'} padded to it ({PAD_OPTION}): " + "; ".join(padded[:MAX_SAID])
              + (f" (and {len(padded) - MAX_SAID} more)" if len(padded) > MAX_SAID else ""))
    for note in checked.notes:
        print(f"note: {note}")
    print(f"next: 'hpc-runner verify {dest} --net' and 'hpc-runner run training --bundle {dest} --max_epochs 2'")
    return 0

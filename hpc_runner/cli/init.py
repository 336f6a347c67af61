"""``hpc-runner init``: start a new bundle from a template (default: the synthetic_seg example)."""

from __future__ import annotations

import argparse
import getpass
from pathlib import Path

from hpc_runner.errors import BundleError, UserError
from hpc_runner.registry.decathlon_bundle import ROI_SIZE, init_decathlon_bundle, roi_size
from hpc_runner.registry.decathlon_folder import check_decathlon_folder
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
lies inside DIR); the channels, classes, voxel size and validation split come from it. See
docs/your-data.md."""
EPILOG = """examples:
  hpc-runner init spleen_seg                      # creates bundles/spleen_seg
  hpc-runner init spleen_seg --from zoo_bundle --to ~/work/spleen_seg
  hpc-runner init spleen_seg --from decathlon /data/Task09_Spleen   # train on your own data
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


def main(args: argparse.Namespace) -> int:
    """Run the command."""
    # imported here, as by every command module: `hpc-runner --help` loads each command's module, and these
    # bring jsonschema (0.1-0.7 s)

    source = list(args.template or [])
    args.name, source = _name_and_source(args.name, source)
    dest = Path(args.to) if args.to else Path("bundles") / args.name
    if len(source) == 2 and source[0] == DECATHLON:
        return _init_decathlon(args.name, dest, source[1], args.author)
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


def _init_decathlon(name: str, dest: Path, folder: str, author: str | None) -> int:
    check_name(name)  # the cheap mistake first, before the folder's headers are read
    checked = check_decathlon_folder(folder)
    init_decathlon_bundle(name, dest, checked, author=author or getpass.getuser())
    split = (f"{checked.num_validation} validation cases from dataset.json" if checked.num_validation else
             "validation split from the training list")
    print(f"created bundle {name} in {dest}: {checked.num_training} training volumes, {split}, "
          f"{len(checked.modality)} input channel(s), {len(checked.labels)} classes, voxel size {checked.spacing}")

    if roi_size(checked) != ROI_SIZE:
        print(f"note: the crop (roi_size) is {roi_size(checked)}, not {ROI_SIZE}: the smallest volume is "
              f"{checked.smallest} voxels at the median voxel size")
    for note in checked.notes:
        print(f"note: {note}")
    print(f"next: 'hpc-runner verify {dest} --net' and 'hpc-runner run training --bundle {dest} --max_epochs 2'")
    return 0

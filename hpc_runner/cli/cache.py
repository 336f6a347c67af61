"""``hpc-runner cache``: fill a bundle's persistent dataset cache once, for every later run and sweep point."""

from __future__ import annotations

import argparse

from hpc_runner.cli.common import add_bundle_arguments, add_writable_argument, load_config_from_args
from hpc_runner.cli.sandbox_run import cache_in_sandbox
from hpc_runner.config.sandbox_marks import inside_sandbox
from hpc_runner.data.cache_plan import fill_caches
from hpc_runner.errors import UserError
from hpc_runner.records.json_out import dumps_json

HELP = "precompute the deterministic transforms of the bundle's datasets into a persistent cache folder"
DESCRIPTION = """Build the bundle's persistent datasets (hpc_runner.data.cached.CachedDataset with a cache_dir)
once: run 'initialize' (it may create the data), then compute the deterministic prefix of each
dataset's transforms (everything before the first random transform) into
<cache_dir>/<transform key>/<item key>.pt. Runs and sweep points given the same overrides find the
files and only read them.

The key hashes the data item (and the size and mtime of its files) and every cached transform with
its arguments, so a changed transform gets new files instead of a stale cache. Files are written to
a temp file and published once; concurrent jobs filling the same folder are safe."""
EPILOG = """examples:
  hpc-runner cache --bundle bundles/synthetic_seg --cache_dir /scratch/$USER/hpcr-cache
  hpc-runner sweep --bundle bundles/synthetic_seg --cache_dir /scratch/$USER/hpcr-cache ...
  hpc-runner config --bundle bundles/synthetic_seg --cache_dir /scratch/$USER/hpcr-cache --cache-plan"""
ACCEPTS_OVERRIDES = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the cache options."""
    add_bundle_arguments(parser)
    parser.add_argument(
        "--dataset",
        action="append",
        metavar="ID",
        help="fill only this dataset id (repeatable; default: every dataset with a persistent cache)",
    )
    parser.add_argument(
        "--no-initialize",
        "--no_initialize",
        dest="initialize",
        action="store_false",
        help="do not run the bundle's 'initialize' ids first (the data must already exist)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_writable_argument(parser)


def _size(n: int) -> str:
    return f"{n / 1024 / 1024:.1f} MiB"


def main(args: argparse.Namespace) -> int:
    """Run the command."""
    import contextlib
    import sys
    from dataclasses import asdict

    if args.safe and not inside_sandbox():  # the bundle's initialize and transforms run only inside the sandbox

        return cache_in_sandbox(args)
    if (args.writable or args.readable) and not args.safe:
        raise UserError("--writable and --readable name what the --safe sandbox may write and read; without --safe "
                        "every folder is", expected="--safe --writable DIR, or neither")

    cfg = load_config_from_args(args)
    # what initialize and the datasets print goes beside the progress bars, so stdout is only the result
    with contextlib.redirect_stdout(sys.stderr):
        results = fill_caches(cfg, only=args.dataset, initialize=args.initialize)
    if args.json:
        print(dumps_json([asdict(r) for r in results], indent=2))
        return 0
    for r in results:
        if r.skipped:
            print(f"{r.id}: skipped ({r.skipped})")
        else:
            print(
                f"{r.id}: {r.items} item{'' if r.items == 1 else 's'} in {r.folder}: {r.computed} computed, "
                f"{r.reused} already there, {_size(r.bytes)}, {r.seconds:.1f} s"
            )
    print("runs given the same overrides read these files instead of recomputing them")
    return 0

"""``hpc-runner verify``: check a bundle without running it; every problem, one per line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TextIO

from hpc_runner.config.verify import verify_bundle
from hpc_runner.errors import UserError
from hpc_runner.registry.search import resolve_bundle

HELP = "check a bundle without running it: metadata, configs, imports, MANIFEST, --net shapes"
DESCRIPTION = """Check a bundle without training anything, offline, and report every problem at once
(file:line, id, what is wrong), exit code 2 if there is any:

  MANIFEST      files changed, missing or added since the bundle was packed (when it has one)
  metadata      configs/metadata.json against the schema shipped with hpc-runner (no download)
  configs       every configs/*.json|yaml loads: alone (inference.json) or merged over train
                (multi_gpu_train.json, evaluate.json); every @reference exists, none is circular
  imports       every _target_ imports (bare names like UNet are looked up in monai, as MONAI does)
                and accepts its arguments; every $import module is installed
  --net         builds the network (id network_def) and runs a dummy input of the metadata's
                network_data_format through it: output channels, spatial shape and dtype
  --safe        the --safe rules (no $ expressions, allow-listed _target_ only); imports nothing else

Importing _target_ modules runs their import-time code (also the bundle's scripts/); $ expressions
are never evaluated (except with --net, for the ids the network needs)."""
EPILOG = """examples:
  hpc-runner verify bundles/synthetic_seg --net
  hpc-runner verify synthetic_seg@0.1.0
  hpc-runner verify my_bundle --net --net-id network"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the verify options."""
    parser.add_argument("bundle", metavar="BUNDLE", help="bundle folder, or NAME[@VERSION] on the search path")
    parser.add_argument("--net", action="store_true", help="also build the network and check its input/output")
    parser.add_argument("--net-id", "--net_id", default="network_def", metavar="ID",
                        help="config id of the network for --net (default: network_def)")
    parser.add_argument("--safe", action="store_true", help="also apply the --safe rules")
    parser.add_argument("--no-imports", action="store_true", help="skip the _target_ import checks (fast)")


def progress_printer(stream: TextIO) -> Callable[[str], None] | None:
    """Return what shows verify's steps as they start, on a terminal only (a log or a pipe gets the result)."""
    if not stream.isatty():
        return None
    return lambda step: print(f"hpc-runner verify: checking {step}...", file=stream, flush=True)


def main(args: argparse.Namespace) -> int:
    """Run the command."""
    if args.safe and args.net:  # --net builds the network: bundle code, which --safe runs only in its sandbox

        raise UserError("verify --safe --net would build the bundle's network here, outside the --safe sandbox "
                        "(--safe runs a bundle's code only inside it); nothing was run",
                        expected="verify --safe (the rules), and the network checked by run --safe")
    bundle_dir = resolve_bundle(args.bundle)
    report = verify_bundle(bundle_dir, imports=not args.no_imports, net=args.net, net_id=args.net_id,
                           safe=args.safe, progress=progress_printer(sys.stderr))
    if report.problems:
        for p in report.problems:
            print(p.line())
        print(f"hpc-runner verify: {len(report.problems)} problem(s) in {report.name} {report.version} "
              f"({bundle_dir})" + (f"; also: {'; '.join(report.notes)}" if report.notes else ""), file=sys.stderr)
        return 2
    print(f"OK: {report.name} {report.version} ({bundle_dir}): " + "; ".join(report.notes))
    return 0

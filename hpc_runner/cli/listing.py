"""``hpc-runner list``: the bundles on the search path, and which one a name picks (module not named list.py:
importing it would bind ``list`` in the ``hpc_runner.cli`` namespace and hide the builtin there)."""

from __future__ import annotations

import argparse

from hpc_runner.errors import BundleError
from hpc_runner.registry.search import PATH_VAR, explain_choice, list_bundles, search_path, split_spec
from hpc_runner.registry.trust import manifest_status

HELP = "list the bundles on the search path ($HPCR_BUNDLE_PATH, then ./bundles)"
DESCRIPTION = """List the bundles found on the search path: every directory of $HPCR_BUNDLE_PATH
(colon-separated), then ./bundles. `--bundle NAME` picks the bundle marked `*`: the first directory
on the search path that has NAME, then the newest version in it. `--bundle NAME@VERSION` picks that
version (first directory that has it)."""
EPILOG = """examples:
  hpc-runner list
  HPCR_BUNDLE_PATH=/shared/group/bundles hpc-runner list synthetic_seg
  hpc-runner list --check            # also compare each bundle with its MANIFEST"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the list options."""
    parser.add_argument("name", nargs="?", metavar="NAME[@VERSION]", help="show only the bundles with this name")
    parser.add_argument("--check", action="store_true",
                        help="compare each bundle's files with its MANIFEST (reads every file)")


def _state(path) -> str:
    try:
        diff = manifest_status(path)
    except Exception as exc:  # a broken MANIFEST should not hide the rest of the list
        return f"unreadable MANIFEST ({type(exc).__name__})"
    return "no MANIFEST" if diff is None else ("ok" if diff.ok else "MODIFIED")


def main(args: argparse.Namespace) -> int:
    """Run the command."""
    dirs = search_path()
    print("search path: " + ", ".join(str(d) + ("" if d.is_dir() else " (missing)") for d in dirs)
          + f"   (${PATH_VAR}, then ./bundles)")
    name, version = split_spec(args.name) if args.name else (None, None)
    entries = list_bundles(name=name)
    if version:
        entries = [e for e in entries if e.version == version]
    if not entries:
        if args.name:
            raise BundleError(f"no bundle named '{args.name}' on the search path",
                              expected="a name shown by 'hpc-runner list'")
        print("no bundles found")
        return 0
    winners = {}
    for e in entries:
        winners.setdefault(e.name, e)
    header = ["", "NAME", "VERSION", "LOCATION", *(["FILES"] if args.check else []), "DESCRIPTION"]
    rows = [header]
    for e in entries:
        mark = "*" if winners[e.name] is e else ""
        rows.append([mark, e.name, e.version, str(e.path), *([_state(e.path)] if args.check else []),
                     e.description[:60] + ("..." if len(e.description) > 60 else "")])
    widths = [max(len(r[i]) for r in rows) for i in range(len(header) - 1)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1])
    for bundle_name in winners:
        same = [e for e in entries if e.name == bundle_name]
        if len(same) > 1:
            print(f"note: {explain_choice(same)}")
    spec = f"--bundle {args.name}" if args.name else "--bundle NAME"
    print(f"* = what {spec} runs")
    return 0

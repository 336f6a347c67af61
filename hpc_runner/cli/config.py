"""``hpc-runner config``: print the merged config after overrides, optionally resolved or with sources."""

from __future__ import annotations

import argparse

from hpc_runner.cli.common import add_bundle_arguments, load_config_from_args
from hpc_runner.config.display import describe_unevaluated, resolve_with_notes, to_plain
from hpc_runner.config.ids import get_by_id, iter_ids
from hpc_runner.config.values import format_value
from hpc_runner.data.cache_plan import cache_plan
from hpc_runner.errors import ConfigError
from hpc_runner.records.json_out import dumps_json
from hpc_runner.records.rundir import dump_yaml

HELP = "print the merged config after overrides (--resolve, --sources)"
DESCRIPTION = """Print the bundle's config as it would run: files merged in order, then the args
file, HPCR__ environment variables and command-line overrides applied, ${env:} expanded, and
references checked. Nothing is built or run, except with --cache-plan: that runs the bundle's
initialize and each dataset's transforms on the data to measure what caching costs and saves."""
EPILOG = """examples:
  hpc-runner config --bundle bundles/synthetic_seg
  hpc-runner config --bundle bundles/synthetic_seg --cache-plan
  hpc-runner config --bundle bundles/synthetic_seg --sources --optimizer::lr 1e-3
  hpc-runner config --bundle bundles/synthetic_seg --resolve --id network_def"""
ACCEPTS_OVERRIDES = True
MAX_IDS_LISTED = 5000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the config options."""
    add_bundle_arguments(parser)
    parser.add_argument(
        "--resolve",
        action="store_true",
        help="substitute @references and evaluate side-effect-free $expressions (nothing is built or run)",
    )
    parser.add_argument(
        "--sources", action="store_true", help="show where every overridden value came from (file, env or cli)"
    )
    parser.add_argument("--id", metavar="ID", help="print only this id")
    parser.add_argument("--ids", action="store_true",
                        help="print every id of the config, one per line (what tab completion offers after --)")
    parser.add_argument("--format", choices=("yaml", "json"), default="yaml", help="output format")
    parser.add_argument(
        "--cache-plan",
        "--cache_plan",
        action="store_true",
        help="for each dataset: the transforms cached and those run every epoch, cache memory, and one cache "
        "fill against one uncached epoch, measured on the data (runs 'initialize'; takes a few seconds)",
    )


def _sources_table(cfg) -> str:
    rows = [("ID", "VALUE", "SOURCE", "FROM", "REPLACES")]

    for ov in cfg.overrides:
        try:
            shown = format_value(ov.value)
        except TypeError:
            shown = repr(ov.value)
        rows.append((ov.spelling(), shown, ov.source, ov.origin, ov.replaced or "(new id)"))
    for use in cfg.env_uses:
        value = use.value if use.value is not None else "(default)"
        rows.append((use.id_path, value, "env", f"${{env:{use.variable}}}", use.where or ""))
    if len(rows) == 1:
        return "no overrides: every value comes from " + ", ".join(str(p) for p in cfg.config_files)
    rows = [(r[0], _short(str(r[1])), *r[2:]) for r in rows]
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _print_cache_plan(cfg, fmt: str) -> int:
    import sys

    print("measuring the cache plan: running each dataset's transforms on the data (a few seconds)...",
          file=sys.stderr, flush=True)
    plan = cache_plan(cfg)
    print(dumps_json(plan.to_dict(), indent=2) if fmt == "json" else plan.format())
    return 0


def main(args: argparse.Namespace) -> int:
    """Run the command."""
    cfg = load_config_from_args(args)
    if args.cache_plan:
        return _print_cache_plan(cfg, args.format)
    if args.sources:
        print(_sources_table(cfg))
        return 0
    data = cfg.expanded()
    if args.ids:
        # bounded: a completion must answer at once, even for a bundle of 100,000 ids
        for n, (id_path, _) in enumerate(iter_ids(data)):
            if n == MAX_IDS_LISTED:
                break
            print(id_path)
        return 0
    notes: list = []
    if args.resolve:
        data, notes = resolve_with_notes(data)
    if args.id:
        try:
            data = get_by_id(data, args.id)
        except (KeyError, IndexError, TypeError):
            raise ConfigError(f"id '{args.id}' is not in the config", expected="an existing id") from None
    data = to_plain(data)
    print(dumps_json(data, indent=2) if args.format == "json" else dump_yaml(data), end="")
    if args.id:
        notes = [n for n in notes if n.id_path == args.id or n.id_path.startswith(args.id + "::")]
    if notes:  # on stderr for JSON, so the output stays parseable
        import sys

        print(describe_unevaluated(notes), end="", file=sys.stderr if args.format == "json" else sys.stdout)
    return 0

"""``hpc-runner collect``: one table of a sweep's results (results.csv and results.md)."""

from __future__ import annotations

import argparse

HELP = "write results.csv and results.md: one row per point (params, state, cause, metrics, time, job id)"
DESCRIPTION = """Collect every point of a sweep dir (or one run dir) into results.csv and results.md
(a Markdown table): the swept parameters, the state and, for failed points, the cause (one sacct
call; see `hpc-runner status`), the final metrics from the point's summary.json, wall time, job id,
how many times its job was requeued and, for failed points, the error line; and what each point's
job used (elapsed_s of time_limit_s, cpus and cpu_efficiency, max_rss_mb of mem_request_mb, gpu_util,
gpu_mem_mb: from the same sacct call). At the end of a sweep it prints what the next submission should
ask for (`sweep --right-size DIR` applies it).
For `submit --shards` (inference, evaluation) it also merges the shards' per-case tables into
cases.csv and cases.md, names every shard without one, and prints the mean of each metric."""
EPILOG = """examples:
  hpc-runner collect runs/synthetic_seg/sweep-2026-11-21_10-00-00
  hpc-runner collect runs/synthetic_seg/sweep-2026-11-21_10-00-00 --out reports/ --quiet"""
MAX_PRINTED_ROWS = 50


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the collect options."""
    parser.add_argument("dir", metavar="DIR", help="a sweep dir (or a run dir)")
    parser.add_argument("--out", metavar="DIR", help="where to write the tables (default: DIR)")
    parser.add_argument("--quiet", action="store_true", help="do not print the table")


def main(args: argparse.Namespace) -> int:
    """Run the command."""
    from hpc_runner.cli.pipeline import collect_main, is_pipeline

    if is_pipeline(args.dir):  # a pipeline dir: its chain (cli/pipeline.py)
        return collect_main(args)
    from hpc_runner.sweep.collect import result_rows, write_results
    from hpc_runner.sweep.targets import load_target

    target = load_target(args.dir)
    states, answer = target.states()
    columns, rows = result_rows(target, states, answer)  # with what each point's job used (the same sacct call)
    csv_path, md_path = write_results(target, columns, rows, args.out)
    if not args.quiet:
        text = md_path.read_text(encoding="utf-8").splitlines()
        print("\n".join(text[: MAX_PRINTED_ROWS + 2]))
        if len(text) > MAX_PRINTED_ROWS + 2:
            print(f"... {len(text) - MAX_PRINTED_ROWS - 2} more rows in {md_path}")
    print(f"hpc-runner: {len(rows)} rows -> {csv_path} and {md_path}")
    _right_size(target, states, answer)
    if target.record and target.record.data.get("tune"):
        _collect_tune(target, args.out)
    if target.record and target.record.data.get("shards"):
        return _collect_cases(target, states, args.out)
    return 0


def _right_size(target, states, answer) -> None:
    """At the end of a sweep: what the next submission should ask for (sweep/right_size.py)."""
    from hpc_runner.sweep.right_size import for_target, suggested_for

    if suggested_for(target, states):
        suggestion = for_target(target, states, answer)
        print(f"right-size: {suggestion.line()}")
        if suggestion.changes:
            print(f"  next time: --right-size {target.path}   (or {' '.join(suggestion.options())})")


def _collect_cases(target, states, out: str | None) -> int:
    """Merge the shards' cases.csv into one table; 1 when a shard has none or a case is in two shards."""
    from pathlib import Path

    from hpc_runner.sweep.shards import merge_cases, write_cases

    merged = merge_cases([(int(s.params.get("shard_index", s.index)), s.run_dir) for s in states])
    csv_path, _ = write_cases(merged, Path(out) if out else target.path)
    means = ", ".join(f"{k} {v:.4g}" for k, v in merged.means().items())
    print(f"hpc-runner: {len(merged.rows)} cases from {len(states) - len(merged.missing)} of {len(states)} shards "
          f"-> {csv_path}{'; mean ' + means if means else ''}")
    by_index = {s.run_dir: s for s in states}
    for shard, run_dir in merged.missing:
        st = by_index.get(run_dir)
        print(f"  shard {shard} has no cases yet ({run_dir}; state {st.state if st else '?'}): "
              f"`hpc-runner resume {target.path}` runs it again, skipping its finished outputs")
    for case, shards in merged.repeated:
        print(f"  case {case} is in shards {', '.join(map(str, shards))}: the shards did not split the inputs")
    return 1 if merged.missing or merged.repeated else 0


def _collect_tune(target, out: str | None) -> None:
    """Write tune.md and tune.json (trials, best, rungs, importances) and print the summary."""
    from pathlib import Path

    from hpc_runner.tune.summary import render, summarize, write_summary

    summary = summarize(target.path)
    md, js = write_summary(summary, Path(out) if out else target.path)
    print(render(summary))
    print(f"hpc-runner: tune summary -> {md} and {js}")

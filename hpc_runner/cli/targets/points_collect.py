"""``collect DIR`` of a run, sweep or tune dir: results.csv and results.md, a sharded sweep's cases, a tune's table."""

from __future__ import annotations

import argparse
from typing import Any

from hpc_runner.jobs.usage import usages
from hpc_runner.records.read import read_record_text
from hpc_runner.sweep.collect import result_rows, summaries_of, write_results
from hpc_runner.sweep.right_size import for_target, suggested_for
from hpc_runner.sweep.shards import merge_cases, write_cases
from hpc_runner.tune.summary import render, summarize, write_summary

MAX_PRINTED_ROWS = 50


def collect_points(args: argparse.Namespace, target: Any) -> list[Any]:
    """``collect DIR`` of a run, sweep or tune dir: results.csv and results.md; return the points' states."""
    states, answer, summaries = _states_and_summaries(target)
    used = usages(states, answer) if answer is not None else None  # once, for the rows and the right-size line
    # what each point's job used: the same sacct call
    columns, rows = result_rows(target, states, answer, used, summaries)
    csv_path, md_path = write_results(target, columns, rows, args.out)
    if not args.quiet:
        text = (read_record_text(md_path, "results table") or "").splitlines()
        print("\n".join(text[: MAX_PRINTED_ROWS + 2]))
        if len(text) > MAX_PRINTED_ROWS + 2:
            print(f"... {len(text) - MAX_PRINTED_ROWS - 2} more rows in {md_path}")
    print(f"hpc-runner: {len(rows)} rows -> {csv_path} and {md_path}")
    if target.results.note():  # damaged lines of the sweep's results file: their points were read from run dirs
        print(f"hpc-runner: {target.results.note()}")
    _right_size(target, states, answer, used)
    return states


def _states_and_summaries(target: Any) -> tuple[list[Any], Any, dict[str, Any]]:
    """Every point's state, and the summary.json of each point the sweep's results file has no line of, read
    while the scheduler answers (up to 10,000 small reads at 10,000 points, hidden behind sacct's ~0.2 s)."""
    return target.states_beside(lambda: summaries_of(target))


def _right_size(target, states, answer, used=None) -> None:
    """At the end of a sweep: what the next submission should ask for (sweep/right_size.py)."""
    if suggested_for(target, states):
        suggestion = for_target(target, states, answer, used)
        print(f"right-size: {suggestion.line()}")
        if suggestion.changes:
            print(f"  next time: --right-size {target.path}   (or {' '.join(suggestion.options())})")


def collect_cases(target: Any, states: list[Any], out: str | None) -> int:
    """Merge the shards' cases.csv into one table; 1 when a shard has none or a case is in two shards."""
    from pathlib import Path

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


def collect_tune(target: Any, out: str | None) -> None:
    """Write tune.md and tune.json (trials, best, rungs, importances) and print the summary."""
    from pathlib import Path

    summary = summarize(target.path)
    md, js = write_summary(summary, Path(out) if out else target.path)
    print(render(summary))
    print(f"hpc-runner: tune summary -> {md} and {js}")

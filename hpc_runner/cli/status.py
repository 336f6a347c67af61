"""``hpc-runner status``: where every point of a sweep (or one submitted run) stands, from one sacct call."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

HELP = "show the state of a sweep's points or of a submitted run (one sacct call)"
DESCRIPTION = """Show the state of every job of a sweep dir (or of one run dir) with one `sacct` call
(`squeue` when sacct does not answer), the counts per state and per cause, and one line per failed
point: its cause (OUT_OF_MEMORY, TIMEOUT, PREEMPTED, NODE_FAIL, CANCELLED, ERROR, BAD_INPUT), job id
and error (type, message, config id, file:line; from its run.yaml, error.txt or the job's log).
Points WAITING for a free submit slot count as not finished (--wait waits for them), and are
submitted when a slot is free: the sweep's one top-up step, which --watch and resume take too. That
is the only thing status ever writes (no lock is taken when nothing waits); --no-submit makes it
strictly read-only. A tune's trials are listed from the start: PENDING until a worker claims them.
Works from the directory alone."""
EPILOG = """examples:
  hpc-runner status runs/synthetic_seg/sweep-2026-11-21_10-00-00
  hpc-runner status runs/synthetic_seg/sweep-2026-11-21_10-00-00 --all
  hpc-runner status runs/synthetic_seg/2026-11-21_10-00-00 --wait
exit codes: 0 (with --wait: every point completed), 1 some point failed (--wait), 2 not a sweep/run dir"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the status options."""
    parser.add_argument("dir", metavar="DIR",
                        help="a sweep dir (sweep.yaml), a run dir (run.yaml) or a pipeline dir (pipeline.yaml)")
    parser.add_argument("--all", action="store_true", help="list every point (default: only up to 40)")
    parser.add_argument("--json", action="store_true", help="print the states as JSON lines")
    parser.add_argument("--wait", action="store_true", help="poll until no point is queued or running")
    parser.add_argument("--interval", type=float, default=10.0, metavar="S", help="seconds between polls (--wait)")
    parser.add_argument("--timeout", type=float, default=None, metavar="S", help="give up waiting after S seconds")
    parser.add_argument(
        "--no-submit", "--no_submit", dest="no_submit", action="store_true",
        help="read only: do not submit the points that wait for a free submit slot",
    )
    parser.add_argument(
        "--watch", action="store_true",
        help="redraw the table and a progress bar every --interval s until every point is final (Ctrl-C stops)",
    )


def _top_up(path: Any, quiet: bool = False) -> int:
    """Submit the sweep's waiting points into free submit slots (the governor's one step); never fail status."""
    import sys

    from hpc_runner.sweep.submission import top_up

    def log(line: str) -> None:
        print(line, file=sys.stderr if quiet else sys.stdout)

    try:
        return top_up(path, log)
    except Exception as exc:  # e.g. no sbatch on this machine: the states are still worth showing
        log(f"hpc-runner status: the waiting points were not submitted ({exc})")
        return 0


def main(args: argparse.Namespace) -> int:
    """Run the command."""
    from hpc_runner.cli.pipeline import is_pipeline, status_main

    if is_pipeline(args.dir):  # a pipeline dir: its stages (cli/pipeline.py)
        return status_main(args)
    from hpc_runner.report.status_table import render
    from hpc_runner.report.watch import is_pending
    from hpc_runner.sweep.states import ENDED_WELL
    from hpc_runner.sweep.targets import load_target

    step = None if args.no_submit else (lambda path: _top_up(path, quiet=True))
    if args.watch:
        from hpc_runner.report.watch import watch_status

        watched = watch_status(args.dir, args.interval, timeout=args.timeout, top_up=step,
                               render=lambda t, s, a: render(t, s, a, args.all))
        if watched.interrupted:
            return 130
        return 0 if all(s.state in ENDED_WELL for s in watched.states) else 1
    started = time.monotonic()
    while True:
        target = load_target(args.dir)  # each poll reads the record again: tasks and workers change it
        if step is not None and target.kind == "sweep" and _top_up(target.path, quiet=args.json):
            target = load_target(args.dir)  # the top-up wrote the new job ids into sweep.yaml
        states, answer = target.states()
        pending = [s for s in states if is_pending(s)]
        if step is not None and target.kind == "sweep":  # failed points a --retry rule sends again: not final
            from hpc_runner.sweep.retry import pending_retries

            again = pending_retries(target.record, states)
            pending += [s for s in states if s.index in again]
        if not args.wait or not pending:
            break
        if args.timeout is not None and time.monotonic() - started > args.timeout:
            print(f"hpc-runner status: {len(pending)} point(s) still queued or running after {args.timeout:g} s")
            break
        time.sleep(args.interval)
    from hpc_runner.sweep.usage import point_usage

    if args.json:
        for s in states:
            print(
                json.dumps(
                    {
                        "point": s.index,
                        "state": s.state,
                        "cause": s.cause_kind,
                        "requeues": s.requeues,
                        "job_id": s.job_id,
                        "node": s.node,
                        "attempts": s.history,
                        "excluded": s.excluded,
                        "params": s.params,
                        "extra": s.extra,
                        "source": s.source,
                        "run_dir": str(s.run_dir),
                        **point_usage(s, answer).to_json(),  # what its job used, from the same sacct call
                        **({"error": s.cause.to_json()} if s.cause is not None else {}),
                    },
                    default=str,
                )
            )
    else:
        print(render(target, states, answer, args.all))
    _right_size(target, states, answer, args.json)
    _tune_summary(target, args.json)
    if args.wait:
        return 0 if all(s.state in ENDED_WELL for s in states) else 1
    return 0


def _right_size(target: Any, states: list[Any], answer: Any, as_json: bool) -> None:
    """At the end of a sweep (or run): what the next submission should ask for (sweep/right_size.py)."""
    from hpc_runner.sweep.right_size import for_target, suggested_for

    if not suggested_for(target, states):
        return
    suggestion = for_target(target, states, answer)
    if as_json:
        print(json.dumps({"right_size": suggestion.to_json()}, default=str))
        return
    print(f"right-size: {suggestion.line()}")
    if suggestion.changes:
        again = f"hpc-runner sweep ... --right-size {target.path}   (or " if target.kind == "sweep" else "("
        print(f"  next time: {again}{' '.join(suggestion.options())})")


def _tune_summary(target: Any, as_json: bool) -> None:
    """A tune dir also shows its trials' summary: counts, best so far, rungs, importances."""
    from hpc_runner.tune.summary import is_tune_dir, summarize
    from hpc_runner.tune.summary import render as render_tune

    if target.kind != "sweep" or not is_tune_dir(target.record):
        return
    summary = summarize(target.path)
    print(json.dumps({"tune": summary.to_json()}, default=str) if as_json else render_tune(summary))

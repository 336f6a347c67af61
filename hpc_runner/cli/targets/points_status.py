"""``status DIR`` of a run, sweep or tune dir: its points' states, the top-up step, --wait and --watch."""

from __future__ import annotations

import argparse
import time
from typing import Any

from hpc_runner.data.staging import shared_bytes_of
from hpc_runner.heap import settle_after_imports
from hpc_runner.jobs.states import ENDED_WELL
from hpc_runner.jobs.usage import point_usage
from hpc_runner.records.json_out import dumps_json
from hpc_runner.report.status_table import render
from hpc_runner.report.watch import is_pending, watch_status
from hpc_runner.sweep.right_size import for_target, suggested_for


def _top_up(target: Any, quiet: bool = False) -> int:
    """Submit the sweep's waiting points into free submit slots (the governor's one step); never fail status."""
    import sys

    def log(line: str) -> None:
        print(line, file=sys.stderr if quiet else sys.stdout)

    try:
        return target.top_up(log)  # a run dir has none waiting (jobs/targets.py)
    except Exception as exc:  # e.g. no sbatch on this machine: the states are still worth showing
        log(f"hpc-runner status: the waiting points were not submitted ({exc})")
        return 0


def _stepped_states(target: Any, step: Any) -> tuple[Any, list[Any], Any]:
    """The top-up step (when ``step``), then every point's state; return the target as read for those states.

    Where the scheduler's answers wait on its services (SLURM: sacctmgr, sacct), the states' one scheduler
    call is made while the top-up reads the limits (``states_beside``), and made again only when the top-up
    submitted (its new job ids are in sweep.yaml then): ~0.2 s of a 10,000-point status."""
    if step is None:
        return (target, *target.states())
    states, answer, submitted = target.states_beside(lambda: step(target))
    if submitted:
        target = target.reload()  # the top-up wrote the new job ids into sweep.yaml
        states, answer = target.states()
    return target, states, answer


def show_points(args: argparse.Namespace, target: Any) -> int:
    """``status DIR`` of a run, sweep or tune dir (``target``, opened by cli/targets.py): its points' states."""
    step = None if args.no_submit else (lambda t: _top_up(t, quiet=True))
    if args.watch:
        watched = watch_status(target, args.interval, timeout=args.timeout, top_up=step,
                               render=lambda t, s, a: render(t, s, a, args.all))
        if watched.interrupted:
            return 130
        return 0 if all(s.state in ENDED_WELL for s in watched.states) else 1
    started = time.monotonic()
    while True:
        target, states, answer = _stepped_states(target, None if step is None else
                                                 (lambda t: _top_up(t, quiet=args.json)))
        pending = [s for s in states if is_pending(s)]
        if step is not None:  # failed points a --retry rule sends again (a sweep's): not final
            again = target.pending_retries(states)
            pending += [s for s in states if s.index in again]
        if not args.wait or not pending:
            break
        if args.timeout is not None and time.monotonic() - started > args.timeout:
            print(f"hpc-runner status: {len(pending)} point(s) still queued or running after {args.timeout:g} s")
            break
        settle_after_imports()  # hpc_runner/heap.py: a long wait gets the collector back as CPython has it
        time.sleep(args.interval)
        target = target.reload()  # each poll reads the record again: tasks and workers change it

    if args.json:
        for s in states:
            print(
                dumps_json(
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
                        "shared_bytes": shared_bytes_of(s.run_dir) if s.run_dir else None,  # data_io.json
                        **point_usage(s, answer).to_json(),  # what its job used, from the same sacct call
                        **({"error": s.cause.to_json()} if s.cause is not None else {}),
                    },
                    default=str,
                )
            )
    else:
        print(render(target, states, answer, args.all))
    _right_size(target, states, answer, args.json)
    target.print_summary(args.json)  # a tune's trials: counts, best so far, rungs, importances
    if args.wait:
        return 0 if all(s.state in ENDED_WELL for s in states) else 1
    return 0


def _right_size(target: Any, states: list[Any], answer: Any, as_json: bool) -> None:
    """At the end of a sweep (or run): what the next submission should ask for (sweep/right_size.py)."""
    if not suggested_for(target, states):
        return
    suggestion = for_target(target, states, answer)
    if as_json:
        print(dumps_json({"right_size": suggestion.to_json()}, default=str))
        return
    print(f"right-size: {suggestion.line()}")
    if suggestion.changes:
        print(f"  next time: {target.right_size_again()}{' '.join(suggestion.options())})")

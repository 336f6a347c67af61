"""Live progress of a sweep: the state table of ``hpc-runner status`` redrawn every few seconds, and a tqdm bar
of the points that have finished, until every point is final or Ctrl-C."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from hpc_runner.heap import settle_after_imports
from hpc_runner.jobs.states import UNKNOWN, counts
from hpc_runner.jobs.targets import Target, load_target
from hpc_runner.report.status_table import render as status_table

CLEAR = "\x1b[H\x1b[2J"  # cursor home, clear screen


@dataclass
class WatchResult:
    """How watching ended: the last states, whether every point was final, and how many polls it took."""

    states: list[Any] = field(default_factory=list)
    finished: bool = False
    interrupted: bool = False
    polls: int = 0


def is_pending(state: Any) -> bool:
    """True while a point may still change: queued or running, or submitted but not yet known to sacct."""
    return bool(state.active or (state.state == UNKNOWN and state.job_id))


def _postfix(states: list[Any]) -> str:
    c = counts(states)
    return " ".join(f"{s} {n}" for s, n in sorted(c.items(), key=lambda kv: (-kv[1], kv[0])))


def watch_status(
    sweep_dir: str | Path | Target,
    interval: float = 10.0,
    *,
    render: Callable[[Any, list[Any], Any], str] | None = None,
    top_up: Callable[[Target], int] | None = None,
    stream: TextIO | None = None,
    max_polls: int | None = None,
    timeout: float | None = None,
    clear: bool | None = None,
) -> WatchResult:
    """Redraw the sweep's state table (``render``, default the one of ``status``) and a bar of finished points
    every ``interval`` s until all are final. ``sweep_dir`` is a dir or a target already opened (jobs/targets.py;
    ``status`` passes its own). ``top_up`` is the one top-up step (``status`` takes the same), called with the
    target before each poll, so points that wait for a free submit slot are sent while watching."""
    from tqdm.auto import tqdm

    render = render or (lambda t, s, a: status_table(t, s, a, False))
    stream = stream or sys.stdout
    clear = stream.isatty() if clear is None else clear
    # the table is record text (through the CLI's filter, when stream is its stdout); the screen clearing and the
    # bar are hpc-runner's own controls, written past it
    own = getattr(stream, "unfiltered", stream)
    target = sweep_dir if isinstance(sweep_dir, Target) else load_target(sweep_dir)
    result = WatchResult()
    bar = None
    last_table = None
    started = time.monotonic()
    try:
        while True:
            if top_up is not None:  # a run dir has no point waiting: its top-up sends none
                top_up(target)
            target = target.reload()  # read again each poll: tasks, workers and top-ups change it
            states, answer = target.states()
            result.states, result.polls = states, result.polls + 1
            table = render(target, states, answer)
            if table != last_table:  # in a log (no terminal) only changes are written
                if bar is not None:
                    bar.clear()
                if clear:
                    own.write(CLEAR)
                stream.write(table + "\n")
                last_table = table
            again: set[int] = set()
            if top_up is not None:  # failed points a --retry rule sends again (a sweep's)
                again = target.pending_retries(states)
            done = sum(not is_pending(s) and s.index not in again for s in states)
            if bar is None:  # the rate and ETA count from here: points already done are the initial count
                bar = tqdm(total=len(states), initial=done, desc="points finished", unit="pt", file=own,
                           dynamic_ncols=True, mininterval=0, postfix=_postfix(states))
            bar.n = done
            bar.set_postfix_str(_postfix(states), refresh=False)
            if not again and not any(is_pending(s) for s in states):
                result.finished = True
                break  # close() below draws the bar one last time
            bar.refresh()
            if max_polls is not None and result.polls >= max_polls:
                break
            if timeout is not None and time.monotonic() - started + interval > timeout:
                break
            settle_after_imports()  # hpc_runner/heap.py: a long watch gets the collector back
            time.sleep(interval)
    except KeyboardInterrupt:
        result.interrupted = True
    finally:
        if bar is not None:
            bar.close()
    return result

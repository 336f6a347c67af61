"""A command that waits gives the collector back (hpc_runner/heap.py): the entry point raises the young threshold
while the imports run (``collect_less_while_importing``), and a command that then waits for minutes or hours
(``status --wait``, ``status --watch``; a pipeline's: tests/pipeline/test_pipeline_in_memory.py) puts CPython's
thresholds back at its first poll, so a long wait does not grow a heap collected as if it were still importing.
Through the CLI in this process against the in-memory cluster, polls of 10 ms bounded by ``--timeout``; the
fixture ``importing_heap`` is in tests/conftest.py."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from hpc_runner import heap
from hpc_runner.cli import main
from tests.sweep.test_logic_in_memory import new_sweep

POLL = ["--no-submit", "--interval", "0.01", "--timeout", "0.05"]


@pytest.mark.parametrize("polling", ["--wait", "--watch"])
def test_status_that_polls_a_sweep_puts_the_thresholds_back(polling, importing_heap, make_cluster, tmp_path: Path,
                                                           capsys) -> None:
    make_cluster(max_submit=3)
    folder = new_sweep(tmp_path, 4)  # 3 queued, 1 waiting for a slot: nothing ends while the command polls
    assert main(["status", str(folder), polling, *POLL]) == 1, capsys.readouterr()
    assert gc.get_threshold() == importing_heap and heap._saved is None


def test_status_without_wait_leaves_the_thresholds_to_the_exit(importing_heap, make_cluster, tmp_path: Path,
                                                              capsys) -> None:
    """One answer and out: nothing to give back (the exit freezes the heap instead: tests/cli/test_quick_exit.py)."""
    make_cluster(max_submit=3)
    folder = new_sweep(tmp_path, 4)
    assert main(["status", str(folder), "--no-submit"]) == 0, capsys.readouterr()
    assert gc.get_threshold() != importing_heap and heap._saved == importing_heap

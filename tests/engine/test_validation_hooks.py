"""Validation listeners: the trainer tells them each value, and Pruned from one ends the run as 'pruned'."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpc_runner.engine import validation_hooks
from hpc_runner.engine.stop import Pruned


def test_listeners_are_called_in_order_and_removed() -> None:
    seen: list[tuple[str, int]] = []
    first = lambda e, n, v: seen.append(("first", e))  # noqa: E731
    with validation_hooks.listening(first), validation_hooks.listening(lambda e, n, v: seen.append(("second", e))):
        validation_hooks.notify(0, "val_dice", 0.5)
    validation_hooks.notify(1, "val_dice", 0.6)  # nobody listens any more
    validation_hooks.remove_listener(first)  # removing twice is not an error
    assert seen == [("first", 0), ("second", 0)]


@pytest.mark.slow
def test_pruned_by_a_listener_ends_the_run_as_pruned_after_that_epoch(tiny_bundle: Path, tmp_path: Path) -> None:
    from hpc_runner.config.bundle_config import load_bundle_config
    from hpc_runner.engine.runner import run_bundle
    from hpc_runner.records.rundir import RunDir

    seen: list[tuple[int, str]] = []

    def prune_at_second_validation(epoch: int, name: str, value: float) -> None:
        seen.append((epoch, name))
        if epoch == 1:
            raise Pruned(epoch, name, value)

    cfg = load_bundle_config(tiny_bundle)
    with validation_hooks.listening(prune_at_second_validation):
        outcome = run_bundle(cfg, None, tmp_path / "run")
    assert outcome.status == "pruned" and seen == [(0, "val_dice"), (1, "val_dice")]
    run = RunDir(tmp_path / "run").record()
    assert run["status"] == "pruned" and run["pruned"]["epoch"] == 2 and run["pruned"]["metric"] == "val_dice"
    assert not (tmp_path / "run" / "error.txt").exists()  # not a failure
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["kind"], r["epoch"]) for r in records if r["kind"] != "iter"][-2:] == [("val", 1), ("epoch", 1)]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())  # collect's row of a pruned trial
    assert (summary["status"], summary["epochs"]) == ("pruned", 2)
    assert summary["final_metric"] == records[-2]["val_dice"]  # the validation that was pruned
    assert not (tmp_path / "run" / "model.pt").exists()  # a pruned trial's weights are not a result


@pytest.mark.slow
def test_pruned_at_the_last_epoch_completes_the_run_instead(tiny_bundle: Path, tmp_path: Path) -> None:
    """Stopping after the last epoch (the tiny bundle's third) saves nothing: the run completes with its result."""
    from hpc_runner.config.bundle_config import load_bundle_config
    from hpc_runner.engine.runner import run_bundle
    from hpc_runner.records.rundir import RunDir

    epochs: list[int] = []

    def prune_at_the_last_validation(epoch: int, name: str, value: float) -> None:
        epochs.append(epoch)
        if epoch == 2:
            raise Pruned(epoch, name, value)

    with validation_hooks.listening(prune_at_the_last_validation):
        outcome = run_bundle(load_bundle_config(tiny_bundle), None, tmp_path / "run")
    assert epochs == [0, 1, 2]
    assert outcome.status == "completed" and RunDir(tmp_path / "run").record()["status"] == "completed"
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["epochs"] == 3

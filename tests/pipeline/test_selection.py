"""Which point is best: max or min of a metric, ties to the lowest index, and why when nothing can be chosen."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from hpc_runner.pipeline.selection import Candidate, decide, has_weights, metric_value, read_summary


def point(index: int, value: float | None, state: str = "COMPLETED", **kw) -> Candidate:
    return Candidate(index, Path(f"points/{index:04d}"), {"learning_rate": index}, state, value, **kw)


def test_max_takes_the_highest_value_and_says_which_came_next():
    d = decide([point(0, 0.5), point(1, 0.8), point(2, 0.7)], "val_dice", "max")
    assert d.chosen.index == 1 and d.ties == []
    assert d.why == "val_dice 0.8 is the max of 3 point(s) that completed (next: point 2, 0.7)"
    assert d.to_record()["run_dir"] == "points/0001" and d.to_record()["params"] == {"learning_rate": 1}


def test_min_takes_the_lowest_value():
    assert decide([point(0, 0.5), point(1, 0.2), point(2, 0.9)], "final_loss", "min").chosen.index == 1


def test_equal_values_go_to_the_lowest_point_index_and_the_tie_is_said():
    d = decide([point(3, 0.9), point(1, 0.9), point(2, 0.4)], "val_dice", "max")
    assert d.chosen.index == 1 and d.ties == [1, 3]
    assert "points 1, 3 tie, the lowest index is taken" in d.why


def test_failed_points_and_points_without_the_metric_or_weights_are_left_out_and_named():
    d = decide([point(0, None, "FAILED", cause="OUT_OF_MEMORY"), point(1, None), point(2, 0.1, has_weights=False),
                point(3, 0.3)], "val_dice", "max")
    assert d.chosen.index == 3
    assert ("3 point(s) could not be chosen: point 0 FAILED (OUT_OF_MEMORY); point 1 COMPLETED without the metric; "
            "point 2 COMPLETED without weights") in d.why


def test_no_finished_point_gives_no_choice_and_says_why_point_by_point():
    d = decide([point(0, None, "FAILED", cause="ERROR: ValueError: batch_size"), point(1, None, "TIMEOUT")],
               "val_dice", "max")
    assert d.chosen is None
    assert d.why == ("no point completed with a value of val_dice: point 0 FAILED (ERROR: ValueError: batch_size); "
                     "point 1 TIMEOUT")
    assert "point" not in d.to_record()
    assert decide([], "val_dice").why == "the stage has no points"


def test_one_run_is_chosen_without_a_metric_when_it_completed_with_weights():
    assert decide([point(0, None)], None).chosen.index == 0
    assert decide([point(0, None, has_weights=False)], None).chosen is None


@pytest.mark.parametrize(("summary", "metric", "value"), [
    ({"val_dice": 0.7, "metric_name": "val_dice", "best_metric": 0.8}, "val_dice", 0.7),
    ({"val_dice": 0.7, "metric_name": "val_dice", "best_metric": 0.8}, "best_val_dice", 0.8),
    ({"final_loss": 0.25}, "final_loss", 0.25),
    ({"val_dice": math.nan}, "val_dice", None),
    ({"val_dice": True}, "val_dice", None),
    ({}, "val_dice", None),
])
def test_the_metric_is_a_finite_number_of_the_summary(summary, metric, value):
    assert metric_value(summary, metric) == value


def test_summaries_and_weights_are_read_from_the_run_dir(tmp_path):
    assert read_summary(tmp_path) == {} and not has_weights(tmp_path)
    (tmp_path / "summary.json").write_text(json.dumps({"val_dice": 0.5}))
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "ckpt_4.pt").write_bytes(b"x")
    assert read_summary(tmp_path) == {"val_dice": 0.5} and has_weights(tmp_path)
    (tmp_path / "summary.json").write_text("{not json")
    assert read_summary(tmp_path) == {}

"""Pipeline files of the example bundle (synthetic_seg) with overrides that make each stage run in seconds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "bundles" / "synthetic_seg"


@pytest.fixture(scope="session")
def dataset_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A shared folder for the tiny synthetic dataset (the first training writes it; evaluation reads it)."""
    return tmp_path_factory.mktemp("synthetic_seg")


@pytest.fixture(scope="session")
def tiny_overrides(dataset_dir: Path) -> dict[str, Any]:
    """The pipeline-wide overrides that make the example bundle train and infer in well under a second (two
    validation volumes, so that two shards each get one)."""
    return {"num_train": 2, "num_val": 2, "image_size": 16, "val_interval": 1, "batch_size": 1,
            "dataset_dir": str(dataset_dir)}


def example_stages(search_overrides: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The issue's example: a sweep, the best point by val_dice, its evaluation, 2 shards of inference."""
    return [
        {"name": "search", "sweep": ["learning_rate=1e-3,4e-3"], "overrides": {"max_epochs": 1,
                                                                                **(search_overrides or {})}},
        {"name": "best", "select": {"from": "search", "metric": "val_dice", "mode": "max"}},
        {"name": "test", "entry": "evaluate", "from": "best"},
        {"name": "predict", "entry": "inference", "from": "best", "shards": 2},
    ]


@pytest.fixture
def write_pipeline(tmp_path: Path, tiny_overrides: dict[str, Any]):
    """``write_pipeline(stages, name=...)`` writes a pipeline file of the example bundle; returns its path."""

    def write(stages: list[dict[str, Any]], name: str = "study.yaml", **top: Any) -> Path:
        data = {"bundle": str(BUNDLE), "overrides": dict(tiny_overrides), "stages": stages, **top}
        path = tmp_path / name
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    return write


@pytest.fixture
def example():
    """``example(search_overrides)``: the stages of the issue's example pipeline."""
    return example_stages

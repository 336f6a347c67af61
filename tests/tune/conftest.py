"""A tune dir of the example bundle (synthetic_seg) with overrides that make a trial train in seconds."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "bundles" / "synthetic_seg"


@pytest.fixture(scope="session")
def dataset_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A shared folder for the tiny synthetic dataset (the first trial writes it)."""
    return tmp_path_factory.mktemp("synthetic_seg")


@pytest.fixture(scope="session")
def tiny(dataset_dir: Path) -> list[str]:
    """Overrides that make the example bundle train an epoch in well under a second on one CPU."""
    return ["--num_train", "2", "--num_val", "1", "--image_size", "16", "--max_epochs", "3",
            "--val_interval", "1", "--batch_size", "1", "--dataset_dir", str(dataset_dir)]


@pytest.fixture
def make_tune(tiny: list[str]):
    """``make_tune(directory, space, trials, **settings)`` writes a tune dir of the example bundle."""
    from hpc_runner.config.bundle_config import load_bundle_config
    from hpc_runner.config.overrides import parse_cli_overrides
    from hpc_runner.tune.settings import TuneSettings
    from hpc_runner.tune.tune_dir import create_tune_dir

    def make(directory: Path, space: Sequence[str], trials: int, extra: Sequence[str] = (), **settings: Any) -> Path:
        cfg = load_bundle_config(BUNDLE, cli_overrides=parse_cli_overrides([*tiny, *extra]))
        options = {"metric": "val_dice", "direction": "maximize", "pruner": "none", "sampler": "random", "seed": 0,
                   **settings}
        create_tune_dir(cfg, directory, None, TuneSettings(space=list(space), trials=trials, **options))
        return directory

    return make

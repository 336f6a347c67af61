"""The example's synthetic volumes: made on first use, shared safely by concurrent jobs."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from hpc_runner.data.synthetic import PARAMS_FILE, ensure_synthetic_volumes


def test_jobs_sharing_a_dataset_dir_make_it_once_and_leave_no_temp_files(tmp_path: Path) -> None:
    folder = tmp_path / "data" / "synthetic_seg"
    with ThreadPoolExecutor(4) as pool:  # four sweep points starting at once on one dataset_dir
        lists = list(pool.map(lambda _: ensure_synthetic_volumes(folder, num_train=2, num_val=1, size=16),
                              range(4)))
    assert all(lst == lists[0] for lst in lists)
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [PARAMS_FILE] + [f"{kind}{i:03d}.nii.gz" for kind in ("img", "seg") for i in range(3)]
    )
    assert json.loads((folder / PARAMS_FILE).read_text())["size"] == 16


def test_a_dataset_dir_made_with_other_parameters_is_refused(tmp_path: Path) -> None:
    ensure_synthetic_volumes(tmp_path, num_train=1, num_val=1, size=16)
    with pytest.raises(ValueError, match="use another dataset_dir"):
        ensure_synthetic_volumes(tmp_path, num_train=1, num_val=1, size=16, seed=1)

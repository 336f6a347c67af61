"""A pipeline has at most MAX_STAGES stages (issue 32, item 6): 3,000 took over 20 s to check, 100 take ~1.5 s
(plus MONAI's import when the target cache is cold, as for any pipeline)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpc_runner.errors import UserError
from hpc_runner.pipeline.spec import MAX_STAGES, parse_spec

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = str(ROOT / "bundles" / "synthetic_seg")


def pipeline(n: int, data: Path) -> dict:
    """A search, a select stage and n - 2 evaluate runs taking from it."""
    stages = [{"name": "search", "sweep": ["learning_rate=1e-3,4e-3"]},
              {"name": "best", "select": {"from": "search", "metric": "val_dice", "mode": "max"}}]
    stages += [{"name": f"s{i}", "entry": "evaluate", "from": "best"} for i in range(2, n)]
    return {"bundle": BUNDLE, "overrides": {"dataset_dir": str(data)}, "stages": stages}


def cli(*args: str, cwd: Path, timeout: float = 10) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HPCR_")}
    return subprocess.run([sys.executable, "-m", "hpc_runner", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_one_stage_over_the_bound_is_refused_naming_the_field(tmp_path: Path):
    with pytest.raises(UserError, match=f"more than the {MAX_STAGES} a pipeline may have") as err:
        parse_spec(pipeline(MAX_STAGES + 1, tmp_path), tmp_path / "p.yaml", {"stages": 3})
    assert err.value.paragraph().startswith(f"{tmp_path / 'p.yaml'}:3: at id 'stages':")


def test_a_3000_stage_pipeline_is_refused_within_seconds(tmp_path: Path):
    (tmp_path / "p.json").write_text(json.dumps(pipeline(3000, tmp_path / "data")))
    res = cli("pipeline", "--dry-run", "--cluster", "local", "--output_dir", "out", "p.json", cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert f"the pipeline has 3,000 stages, more than the {MAX_STAGES}" in res.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # a CLI process that imports MONAI for the pre-flight
def test_checking_a_pipeline_at_the_bound_is_fast(tmp_path: Path):
    start = time.monotonic()
    spec = parse_spec(pipeline(MAX_STAGES, tmp_path), tmp_path / "p.yaml")
    assert len(spec.order()) == MAX_STAGES
    assert time.monotonic() - start < 2
    (tmp_path / "data").mkdir()
    (tmp_path / "p.json").write_text(json.dumps(pipeline(MAX_STAGES, tmp_path / "data")))
    # every stage pre-flighted: ~1.5 s, and 8 s or more on a busy machine when MONAI must be imported (cold cache)
    res = cli("pipeline", "--dry-run", "--cluster", "local", "--output_dir", "out", "p.json", cwd=tmp_path, timeout=60)
    assert res.returncode == 0, res.stderr[-2000:]
    assert f"s{MAX_STAGES - 1} " in res.stdout

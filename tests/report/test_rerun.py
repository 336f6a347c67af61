"""Re-running a recorded run: exact (bit-identical weights), fresh dir, warnings when the environment differs."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml
from report_helpers import BUNDLE, hpc_runner, tiny_overrides

from hpc_runner.errors import UserError
from hpc_runner.report.rerun import RerunWarning, plan_rerun, rerun


def _fingerprint(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _pretend_recorded_elsewhere(run_dir: Path) -> None:
    rec = yaml.safe_load((run_dir / "run.yaml").read_text())
    rec["versions"]["torch"] = "1.0.0"
    rec["git"] = {**(rec.get("git") or {"root": "/somewhere", "dirty": False, "bundle_dirty": False}),
                  "commit": "0" * 40}
    (run_dir / "run.yaml").write_text(yaml.safe_dump(rec, sort_keys=False))


@pytest.mark.slow
def test_rerun_warns_about_other_versions_and_commit(run_copy: Path) -> None:
    _pretend_recorded_elsewhere(run_copy)
    before = _fingerprint(run_copy)
    with pytest.warns(RerunWarning) as caught:
        outcome = rerun(run_copy)
    text = str(caught[0].message)
    assert "torch: recorded 1.0.0, now 2." in text
    assert f"git commit: recorded {'0' * 40}, now " in text or "git: recorded" in text
    assert outcome.status == "completed", outcome.error
    new = outcome.run_dir
    assert new.parent == run_copy.parent and new.name.startswith("copy-rerun-")
    rec = yaml.safe_load((new / "run.yaml").read_text())
    assert rec["rerun_of"] == str(run_copy.resolve()) and rec["status"] == "completed"
    assert any(line.startswith("torch: recorded 1.0.0") for line in rec["rerun_differences"])
    assert yaml.safe_load((new / "config.yaml").read_text())["output_dir"] == str(new.resolve())
    assert json.loads((new / "summary.json").read_text())["resumed_from"] is None  # fresh, not resumed
    assert _fingerprint(run_copy) == before  # the source run dir is never written


def test_rerun_with_an_override_records_it(run_copy: Path, tmp_path: Path) -> None:
    outcome = rerun(run_copy, tmp_path / "one-epoch", ["--max_epochs", "1"])
    assert outcome.status == "completed", outcome.error
    assert json.loads((outcome.run_dir / "summary.json").read_text())["epochs"] == 1
    overrides = {o["id"]: o for o in yaml.safe_load((outcome.run_dir / "overrides.yaml").read_text())}
    assert overrides["max_epochs"]["value"] == 1 and "from" not in overrides["max_epochs"]
    assert overrides["num_train"]["from"] == "source run" and overrides["num_train"]["value"] == 4


def test_rerun_refuses_to_write_into_a_used_dir(run_copy: Path, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="never writes into the run it repeats"):
        plan_rerun(run_copy, run_copy)
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "x").write_text("")
    with pytest.raises(UserError, match="not empty"):
        plan_rerun(run_copy, tmp_path / "used")
    rec = yaml.safe_load((run_copy / "run.yaml").read_text())
    del rec["versions"]
    (run_copy / "run.yaml").write_text(yaml.safe_dump(rec))
    with pytest.raises(UserError, match="never started"):
        plan_rerun(run_copy)


def test_cli_dry_run_lists_the_differences_and_writes_nothing(run_copy: Path, tmp_path: Path) -> None:
    _pretend_recorded_elsewhere(run_copy)
    out = hpc_runner("rerun", str(run_copy), "--dry-run", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "torch: recorded 1.0.0" in out.stderr and "0" * 40 in out.stderr
    assert "would re-run entry 'run'" in out.stdout
    assert sorted(p.name for p in run_copy.parent.iterdir()) == ["copy"]


@pytest.mark.slow
def test_rerun_reproduces_a_cpu_run_bit_for_bit(tmp_path: Path, dataset_dir: Path) -> None:
    import torch

    first = hpc_runner("run", "--bundle", str(BUNDLE), *tiny_overrides(dataset_dir), "--output_dir", "src",
                       cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    again = hpc_runner("rerun", "src", "--output_dir", "again", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    a = torch.load(tmp_path / "src" / "model.pt", map_location="cpu")
    b = torch.load(tmp_path / "again" / "model.pt", map_location="cpu")
    assert a.keys() == b.keys() and len(a) > 10
    assert all(torch.equal(a[k], b[k]) for k in a)
    losses = [[r["loss"] for r in map(json.loads, (tmp_path / d / "metrics.jsonl").read_text().splitlines())
               if r["kind"] == "iter"] for d in ("src", "again")]
    assert losses[0] == losses[1]
    rec = yaml.safe_load((tmp_path / "again" / "run.yaml").read_text())
    assert rec["rerun_of"] == str((tmp_path / "src").resolve())
    # same packages; the git state may move if someone commits meanwhile, so only that may differ
    assert [d for d in rec["rerun_differences"] if not d.startswith("git")] == []

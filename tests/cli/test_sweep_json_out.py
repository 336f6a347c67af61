"""`sweep --json`: stdout holds exactly one strict JSON document, on the in-memory cluster and here; values that
are not finite and ids the runner sets per point are refused before anything is written (issue 44)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpc_runner.cli import main

EXAMPLE = Path(__file__).resolve().parents[2] / "bundles" / "synthetic_seg"


def _sweep(tmp_path: Path, cluster: str, *args: str) -> list[str]:
    return ["sweep", "--bundle", str(EXAMPLE), "--cluster", cluster, "--output_dir", str(tmp_path / "sw"),
            "--no-preflight", "--json", *args]


def test_sweep_json_on_the_in_memory_cluster_prints_one_document_and_prose_to_stderr(
        make_cluster, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    cluster = make_cluster(max_submit=1)  # one point queued, one waits: a partial submission
    profile = tmp_path / "mem.yaml"
    profile.write_text("executor: memory\ntime: 10\nmem_gb: 1\n")
    code = main(_sweep(tmp_path, str(profile), "--sweep", "learning_rate=1e-3,2e-3"))
    out = capsys.readouterr()
    assert code == 0, out.err
    found = json.loads(out.out, parse_constant=lambda c: pytest.fail(f"non-strict JSON {c}"))
    assert found["profile"] == "mem" and cluster.calls["sbatch"] >= 1
    assert sorted(p for a in found["arrays"] for p in a["points"]) == sorted(int(k) for k in found["job_ids"])
    assert len(found["job_ids"]) + len(found["waiting"]) == 2


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e999", "[1,.nan]"])
def test_a_non_finite_sweep_value_is_refused_naming_it(value: str, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    code = main(_sweep(tmp_path, "local", "--sweep", f"learning_rate=1e-3,{value}"))
    out = capsys.readouterr()
    assert code == 2 and out.out == "" and out.err.count("error:") == 1, out.err
    assert f"--sweep 'learning_rate=1e-3,{value}'" in out.err and "not a finite number" in out.err
    assert not (tmp_path / "sw").exists()


@pytest.mark.parametrize("sweep", ["output_dir=a,b", "+output_dir=a,b"])
def test_sweeping_an_id_the_runner_sets_per_point_is_refused(sweep: str, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    code = main(_sweep(tmp_path, "local", "--sweep", sweep))
    err = capsys.readouterr().err
    assert code == 2 and "sweeps id 'output_dir'" in err and err.count("error:") == 1, err
    assert not (tmp_path / "sw").exists()

"""--init_id / --final_id run the named ids around ENTRY, as MONAI's ConfigWorkflow does (in-process, quick)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpc_runner.cli import main as cli

STEPS = {"initialize": "$print('default initialize')", "setup": "$print('setup ran')", "go": ["$print('go ran')"],
         "teardown": "$print('teardown ran')", "finalize": "$print('default finalize')"}


@pytest.fixture
def steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "steps.json").write_text(json.dumps(STEPS))
    return tmp_path


def _printed(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return [ln for ln in capsys.readouterr().out.splitlines() if ln.endswith(" ran") or ln.startswith("default")]


def test_named_init_and_final_ids_replace_the_defaults(steps: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli(["run", "go", "--config_file", "steps.json", "--init_id", "setup", "--final_id", "teardown",
                "--output_dir", "r", "--trust"])
    assert code == 0
    assert _printed(capsys) == ["setup ran", "go ran", "teardown ran"]
    import yaml

    record = yaml.safe_load((steps / "r" / "run.yaml").read_text())
    assert (record["init_id"], record["final_id"]) == ("setup", "teardown")  # a job or a resume runs the same


def test_an_init_id_the_config_lacks_is_skipped_as_monai_skips_it(steps: Path, capsys: pytest.CaptureFixture[str]
                                                                 ) -> None:
    assert cli(["run", "go", "--config_file", "steps.json", "--init_id", "nothing", "--output_dir", "r"]) == 0
    assert _printed(capsys) == ["go ran", "default finalize"]

"""`cluster check` found no node-local scratch: staging to scratch is off, said in one warning."""

from __future__ import annotations

import pytest

from hpc_runner.cli.common import apply_profile_stage
from hpc_runner.data.staging import ENV, StageSettings, checked_staging
from hpc_runner.scheduler.profiles import ClusterProfile


def _checked(ok: bool) -> dict:
    return {"checked": {"date": "2025-01-01T00:00:00", "by": "hpc-runner cluster check x", "partitions": {
        "small": {"node": "n1", "job_id": "7", "findings": {
            "scratch": {"ok": ok, "detail": "scratch /tmp, 40 GB free" if ok else "no scratch folder"}}}}}}


def test_no_scratch_found_turns_staging_to_scratch_off_with_one_warning() -> None:
    said: list[str] = []
    assert checked_staging(_checked(False), StageSettings(), said.append) is None
    assert len(said) == 1 and "no node-local scratch" in said[0] and "staging is off" in said[0]
    assert checked_staging(_checked(True), StageSettings(), said.append) == StageSettings()
    own = StageSettings(where="/fast/stage")  # a folder the user named: the scratch finding does not apply
    assert checked_staging(_checked(False), own, said.append) == own and len(said) == 1


def test_a_profile_whose_check_found_no_scratch_sets_no_stage_for_the_jobs(monkeypatch: pytest.MonkeyPatch,
                                                                         capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv(ENV, "")  # restored (to absent or as it was) after the test
    monkeypatch.delenv(ENV)
    apply_profile_stage(ClusterProfile("x", [], {"executor": "memory", "stage": {}, **_checked(False)}))
    import os

    assert ENV not in os.environ
    assert capsys.readouterr().err.count("staging is off") == 1
    apply_profile_stage(ClusterProfile("x", [], {"executor": "memory", "stage": {}, **_checked(True)}))
    assert ENV in os.environ

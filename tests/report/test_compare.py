"""Comparing a run's recorded versions and git state with the present ones."""

from __future__ import annotations

from hpc_runner.records.compare import Difference, describe, git_differences, version_differences


def test_version_differences_list_changed_added_and_removed_packages() -> None:
    recorded = {"python": "3.11.7", "torch": "2.4.0", "monai": "1.6.1", "nibabel": "5.0"}
    now = {"python": "3.11.7", "torch": "2.13.0+cpu", "monai": "1.6.1", "numpy": "2.4.6"}
    diffs = version_differences(recorded, now)
    assert [d.what for d in diffs] == ["torch", "nibabel", "numpy"]
    text = describe(diffs)
    assert "torch: recorded 2.4.0, now 2.13.0+cpu" in text
    assert "nibabel: recorded 5.0, now (not installed)" in text
    assert "numpy: recorded (not installed), now 2.4.6" in text
    assert version_differences(now, dict(now)) == []


def test_git_differences() -> None:
    rec = {"root": "/r", "commit": "a" * 40, "dirty": False, "bundle_dirty": False}
    assert git_differences(rec, dict(rec)) == []
    now = {**rec, "commit": "b" * 40, "bundle_dirty": True}
    diffs = git_differences(rec, now)
    assert diffs == [Difference("git commit", "a" * 40, "b" * 40),
                     Difference("git uncommitted changes (bundle)", False, True)]
    assert diffs[1].line() == "git uncommitted changes (bundle): recorded no, now yes"
    assert git_differences(None, None) == []
    assert git_differences(rec, None)[0].line() == f"git: recorded repo /r at {'a' * 40}, now not in a git repo"

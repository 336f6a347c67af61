"""Search path: HPCR_BUNDLE_PATH dirs then ./bundles; NAME and NAME@VERSION; ambiguity explained."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from registry_helpers import EXAMPLE, copy_bundle, out

from hpc_runner.errors import BundleError
from hpc_runner.registry.search import (
    explain_choice,
    list_bundles,
    looks_like_path,
    resolve_bundle,
    search_path,
    version_key,
)


@pytest.fixture
def two_dirs(tmp_path: Path) -> dict[str, Path]:
    """A group dir with synthetic_seg 0.1.0 and 0.2.0, a personal dir with 0.1.5, and ./bundles with 9.0.0."""
    group, mine, cwd = tmp_path / "group", tmp_path / "mine", tmp_path / "work"
    copy_bundle(EXAMPLE, group / "synthetic_seg-0.1.0")
    copy_bundle(EXAMPLE, group / "synthetic_seg-0.2.0", version="0.2.0", description="the group's newest")
    copy_bundle(EXAMPLE, mine / "synthetic_seg-0.1.5", version="0.1.5", description="my own copy")
    copy_bundle(EXAMPLE, cwd / "bundles" / "synthetic_seg", version="9.0.0", description="checkout copy")
    copy_bundle(EXAMPLE, group / "other-1.0.0", version="1.0.0", name="other")
    return {"group": group, "mine": mine, "cwd": cwd}


def test_version_order_is_semantic() -> None:
    versions = ["1.9.2", "1.10.0", "1.10.0-rc.1", "0.1.0", "1.10.0-rc.2", "2.0.0-alpha"]
    assert sorted(versions, key=version_key) == ["0.1.0", "1.9.2", "1.10.0-rc.1", "1.10.0-rc.2", "1.10.0",
                                                 "2.0.0-alpha"]


def test_path_order_then_newest_version(two_dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(two_dirs["cwd"])
    env = {"HPCR_BUNDLE_PATH": f"{two_dirs['group']}:{two_dirs['mine']}"}
    assert search_path(env) == [two_dirs["group"], two_dirs["mine"], Path("bundles")]
    found = list_bundles(env, "synthetic_seg")
    assert [e.version for e in found] == ["0.2.0", "0.1.0", "0.1.5", "9.0.0"]
    # the group dir comes first, so its newest version wins even though ./bundles has 9.0.0
    assert resolve_bundle("synthetic_seg", env) == two_dirs["group"] / "synthetic_seg-0.2.0"
    assert resolve_bundle("synthetic_seg@0.1.5", env) == two_dirs["mine"] / "synthetic_seg-0.1.5"
    assert resolve_bundle("synthetic_seg@9.0.0", env) == Path("bundles/synthetic_seg")
    why = explain_choice(found)
    assert "synthetic_seg@0.2.0" in why and "comes before" in why and "newest version" in why
    # personal dir first: now it wins
    env = {"HPCR_BUNDLE_PATH": f"{two_dirs['mine']}:{two_dirs['group']}"}
    assert resolve_bundle("synthetic_seg", env) == two_dirs["mine"] / "synthetic_seg-0.1.5"


def test_unknown_name_or_version(two_dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(two_dirs["cwd"])
    env = {"HPCR_BUNDLE_PATH": str(two_dirs["group"])}
    with pytest.raises(BundleError, match=r"no version 3\.0\.0.*versions found: 0\.1\.0, 0\.2\.0, 9\.0\.0"):
        resolve_bundle("synthetic_seg@3.0.0", env)
    with pytest.raises(BundleError, match="no bundle named 'nope'"):
        resolve_bundle("nope", env)


def test_paths_stay_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plain").mkdir()  # a folder that is not a bundle does not hide a bundle name
    assert not looks_like_path("plain")
    copy_bundle(EXAMPLE, tmp_path / "local")
    assert looks_like_path("local") and looks_like_path("./x") and looks_like_path("a/b")
    assert resolve_bundle("local", {}) == Path("local")


def test_list_cli_two_dirs_and_ambiguous_name(cli, two_dirs: dict[str, Path]) -> None:
    path = f"{two_dirs['group']}:{two_dirs['mine']}"
    proc = cli("list", cwd=two_dirs["cwd"], bundle_path=path)
    assert proc.returncode == 0, out(proc)
    lines = proc.stdout.splitlines()
    rows = [(line[0], *line[1:].split()[:3]) for line in lines
            if "/" in line and not line.startswith(("search path", "note"))]
    assert ("*", "synthetic_seg", "0.2.0", str(two_dirs["group"] / "synthetic_seg-0.2.0")) in rows
    assert [r[2] for r in rows if r[1] == "synthetic_seg"] == ["0.2.0", "0.1.0", "0.1.5", "9.0.0"]
    assert ("*", "other", "1.0.0", str(two_dirs["group"] / "other-1.0.0")) in rows  # each name has its winner
    assert any("my own copy" in line and str(two_dirs["mine"]) in line for line in lines)
    note = next(line for line in lines if line.startswith("note:"))
    assert "4 bundles named 'synthetic_seg'" in note and f"{two_dirs['group']} comes before" in note

    proc = cli("list", "synthetic_seg@0.1.5", cwd=two_dirs["cwd"], bundle_path=path)
    assert proc.returncode == 0 and "0.1.5" in proc.stdout and "0.2.0" not in proc.stdout, out(proc)
    proc = cli("list", "nope", cwd=two_dirs["cwd"], bundle_path=path)
    assert proc.returncode == 2 and "no bundle named 'nope'" in proc.stderr


def test_name_at_version_through_the_config_loader(cli, two_dirs: dict[str, Path]) -> None:
    path = f"{two_dirs['group']}:{two_dirs['mine']}"
    for spec, version in (("synthetic_seg", "0.2.0"), ("synthetic_seg@0.1.0", "0.1.0"),
                          ("synthetic_seg@9.0.0", "9.0.0")):
        proc = cli("config", "--bundle", spec, "--id", "_meta_::version", "--format", "json",
                   cwd=two_dirs["cwd"], bundle_path=path)
        assert proc.returncode == 0, out(proc)
        assert json.loads(proc.stdout) == version

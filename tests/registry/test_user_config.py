"""The user's config file: where it is, and its safe_targets list."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpc_runner.errors import ConfigError
from hpc_runner.registry.user_config import safe_targets, user_config_path


def test_location(tmp_path: Path) -> None:
    assert user_config_path({"HPCR_CONFIG": str(tmp_path / "c.yaml")}) == tmp_path / "c.yaml"
    assert user_config_path({"XDG_CONFIG_HOME": str(tmp_path)}) == tmp_path / "hpc-runner" / "config.yaml"
    assert user_config_path({}) == Path.home() / ".config" / "hpc-runner" / "config.yaml"


def test_safe_targets(tmp_path: Path) -> None:
    assert safe_targets({"XDG_CONFIG_HOME": str(tmp_path)}) == []  # no file: nothing extra
    path = tmp_path / "c.yaml"
    path.write_text("safe_targets:\n  - ignite\n  - mygroup.transforms\nother_key: 1\n")
    assert safe_targets({"HPCR_CONFIG": str(path)}) == ["ignite", "mygroup.transforms"]


@pytest.mark.parametrize(("text", "message"), [
    ("safe_targets: [os.path, 'rm -rf']\n", "'safe_targets' holds 'rm -rf'"),
    ("safe_targets: {a: 1}\n", "'safe_targets' holds"),
    ("safe_targets: [a\n", "YAML syntax error"),
    ("- just a list\n", "not a mapping"),
])
def test_bad_user_config_names_the_file(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as info:
        safe_targets({"HPCR_CONFIG": str(path)})
    assert str(path) in (info.value.where or "")


def test_missing_file_named_by_hpcr_config_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        safe_targets({"HPCR_CONFIG": str(tmp_path / "missing.yaml")})

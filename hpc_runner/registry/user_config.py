"""The user's own settings file: ``$HPCR_CONFIG``, else ``$XDG_CONFIG_HOME/hpc-runner/config.yaml``
(default ``~/.config/hpc-runner/config.yaml``). Read here: ``safe_targets``, the extra modules that
``--safe`` allows."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hpc_runner.errors import ConfigError
from hpc_runner.records.read import RecordError, parse_yaml_record, read_record_text

CONFIG_VAR = "HPCR_CONFIG"
SAFE_TARGETS_KEY = "safe_targets"
_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def user_config_path(environ: Mapping[str, str] | None = None) -> Path:
    """Return the path of the user's config file (it need not exist)."""
    environ = os.environ if environ is None else environ
    if environ.get(CONFIG_VAR):
        return Path(environ[CONFIG_VAR]).expanduser()
    base = Path(environ["XDG_CONFIG_HOME"]) if environ.get("XDG_CONFIG_HOME") else Path.home() / ".config"
    return base / "hpc-runner" / "config.yaml"


MAX_USER_CONFIG_BYTES = 1 << 20  # a few settings


def load_user_config(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Return the user's config as a mapping ({} when the file does not exist).

    Read by the records' bounded reader (a regular file: a FIFO, a device or a link to one is refused before
    it is opened; at most 1 MiB; UTF-8) and parsed by their one YAML parser (safe loader, depth and alias
    bounds): every failure a ConfigError naming the file."""
    path = user_config_path(environ)
    try:
        text = read_record_text(path, "user config file", MAX_USER_CONFIG_BYTES, error=ConfigError)
        if text is None:
            if (environ if environ is not None else os.environ).get(CONFIG_VAR):
                raise ConfigError("the user config file does not exist", where=str(path),
                                  expected=f"an existing YAML file (${CONFIG_VAR} points to it)")
            return {}
        data = parse_yaml_record(text, path, "user config file")
    except RecordError as err:
        raise ConfigError(f"YAML syntax error in the user config file: {err.message}" if "valid YAML" in err.message
                          else err.message, where=err.where, expected=err.expected) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError("the user config file is not a mapping", where=str(path), expected="key: value pairs")
    return data


def safe_targets(environ: Mapping[str, str] | None = None) -> list[str]:
    """Return the module prefixes the user allows under ``--safe`` besides monai, torch and hpc_runner."""
    value = load_user_config(environ).get(SAFE_TARGETS_KEY) or []
    if isinstance(value, str):
        value = [value]
    good = isinstance(value, list)
    bad = [v for v in value if not isinstance(v, str) or not _DOTTED.fullmatch(v)] if good else [value]
    if bad:
        raise ConfigError(
            f"'{SAFE_TARGETS_KEY}' holds {bad[0]!r}",
            where=str(user_config_path(environ)),
            id_path=SAFE_TARGETS_KEY,
            expected="a list of module names such as [ignite, mygroup.transforms]",
        )
    return list(value)

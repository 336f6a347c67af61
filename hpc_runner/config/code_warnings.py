"""Which bundles the "this config runs code" warning was shown for: once per bundle, not on every command.

The key is each config file's path and bytes (and the metadata's): a bundle whose files changed since is warned
about again. Kept in ``$XDG_CACHE_HOME/hpc-runner/code-warnings.json`` (else ``~/.cache/...``), at most
``MAX_ENTRIES`` keys; an unreadable file is as good as none (the warning shows again).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from hpc_runner.config.bundle_config import BundleConfig
from hpc_runner.errors import UserError
from hpc_runner.records.atomic import write_text_atomic
from hpc_runner.records.read import parse_json_text, read_record_bytes, read_record_text
from hpc_runner.records.user_cache import user_cache_dir

MAX_ENTRIES = 2000
MAX_BYTES = 1 << 20


def memory_file() -> Path:
    """Return where the keys of the bundles warned about live."""
    return user_cache_dir() / "code-warnings.json"


def bundle_key(cfg: BundleConfig) -> str | None:
    """Return the key of the bundle's config files as they are now (None when one cannot be read)."""
    digest = hashlib.sha256()
    for path in [*cfg.config_files, *([cfg.meta_file] if cfg.meta_file else [])]:
        try:  # a config file over 16 MiB, or not a regular file: no key (the warning shows again)
            data = read_record_bytes(path, "config file", limit=16 << 20)
        except UserError:
            return None
        if data is None:
            return None
        digest.update(str(Path(path).resolve()).encode() + b"\0" + data + b"\0")
    return digest.hexdigest()[:32]


def _read() -> list[str]:
    try:
        text = read_record_text(memory_file(), "code-warning memory", MAX_BYTES)
        keys = parse_json_text(text, memory_file(), "code-warning memory") if text else []
    except Exception:  # damaged or unreadable: warn again
        return []
    return [k for k in keys if isinstance(k, str)] if isinstance(keys, list) else []


def warned_before(cfg: BundleConfig) -> bool:
    """True when the warning was shown for these exact config files before (in any command)."""
    key = bundle_key(cfg)
    return key is not None and key in _read()


def remember(cfg: BundleConfig) -> None:
    """Note that the warning was shown for these config files (a full or read-only cache: not noted)."""
    key = bundle_key(cfg)
    if key is None:
        return
    keys = [*[k for k in _read() if k != key][-(MAX_ENTRIES - 1):], key]
    try:
        memory_file().parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(memory_file(), json.dumps(keys))
    except OSError:
        return

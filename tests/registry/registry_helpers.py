"""Helpers shared by the registry tests (imported by name: this folder is on sys.path under pytest)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "bundles" / "synthetic_seg"
ZOO = Path(__file__).resolve().parent / "data" / "zoo_spleen_like"
# ids of bundles/synthetic_seg/configs/train.yaml: a run of a few seconds on a CPU
TINY = ["--num_train", "2", "--num_val", "1", "--image_size", "16", "--max_epochs", "1", "--val_interval", "1"]


def clean_env(tmp_path: Path, bundle_path: str | None = None, **extra: str) -> dict[str, str]:
    """The ambient environment without HPCR settings, a private user config dir, and ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HPCR")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")  # never the developer's own ~/.config/hpc-runner
    if bundle_path is not None:
        env["HPCR_BUNDLE_PATH"] = bundle_path
    env.update(extra)
    return env


def copy_bundle(src: Path, dest: Path, *, version: str | None = None, name: str | None = None,
                description: str | None = None) -> Path:
    """Copy a bundle (no data/runs) and optionally change its metadata's version, name or description."""
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("data", "runs", "__pycache__", "MANIFEST"))
    meta_path = dest / "configs" / "metadata.json"
    meta = json.loads(meta_path.read_text())
    if version:
        meta["version"] = version
        meta.setdefault("changelog", {})[version] = "test version"
    if name:
        meta["name"] = name
    if description:
        meta["description"] = description
    meta_path.write_text(json.dumps(meta, indent=4))
    return dest


def out(proc: subprocess.CompletedProcess) -> str:
    """stdout and stderr together (for assertion messages and searches)."""
    return proc.stdout + proc.stderr

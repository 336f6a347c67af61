"""The docs site: it builds with warnings as errors, and its CLI reference is the parsers' own help."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from hpc_runner.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[1]


def test_the_cli_reference_is_generated_from_every_command_s_parser() -> None:
    pytest.importorskip("mkdocs")
    spec = importlib.util.spec_from_file_location("cli_reference", ROOT / "scripts" / "mkdocs_cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    page = module.cli_reference()
    assert all(f"### `hpc-runner {name}`" in page for name in COMMANDS)
    assert "--sampler-seed" in page and "usage: hpc-runner sweep" in page


def test_the_site_builds_with_warnings_as_errors_and_a_broken_link_fails_it(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    build = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")]
    res = subprocess.run(build, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    assert (tmp_path / "site" / "cli" / "index.html").is_file()
    # the same site with one broken link: strict mode must refuse it (a --quiet build would not)
    docs = tmp_path / "docs"
    subprocess.run(["cp", "-r", str(ROOT / "docs"), str(docs)], check=True)
    (docs / "tune.md").write_text((docs / "tune.md").read_text() + "\n[gone](no-such-page.md)\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text((ROOT / "mkdocs.yml").read_text().replace("docs_dir: docs", f"docs_dir: {docs}")
                      .replace("scripts/mkdocs_cli_reference.py", str(ROOT / "scripts" / "mkdocs_cli_reference.py")))
    res = subprocess.run([*build, "--config-file", str(config)], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 1 and "no-such-page.md" in res.stderr, res.stderr[-3000:]

"""A run records hpc-runner's version from its own distribution (PyPI's "hpc-runner" is another project's)."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

from hpc_runner import __version__
from hpc_runner.records.environment import DISTRIBUTION, package_versions

ROOT = Path(__file__).resolve().parents[2]


def test_the_distribution_is_ours_and_its_version_is_recorded_under_hpc_runner() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()  # (tomllib is Python 3.11+; we support 3.10)
    assert re.search(r'^name = "([^"]+)"', pyproject, re.M).group(1) == DISTRIBUTION == "hpc-bundle-runner"
    assert re.search(r'^hpc-runner = "hpc_runner\.cli:entry"$', pyproject, re.M)  # the command keeps its name
    versions = package_versions()
    assert versions["hpc-runner"] == metadata.version(DISTRIBUTION) == __version__
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    wrong = [str(p) for p in pages if "pip install 'hpc-runner" in p.read_text(encoding="utf-8")]
    assert wrong == [] and "`hpc-bundle-runner`" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_every_install_hint_of_the_code_names_our_distribution() -> None:
    hints = [f"{p.relative_to(ROOT)}:{n}" for p in sorted((ROOT / "hpc_runner").rglob("*.py"))
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"pip install '?hpc-runner\b", line)]
    assert hints == []  # `pip install hpc-runner[...]` would install PyPI's other project

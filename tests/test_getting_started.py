"""docs/getting-started.md as a newcomer runs it: every shell command on the page, in order, in an empty folder
(the install lines and those marked `# needs a cluster` aside), each must exit 0."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "getting-started.md"
BLOCK = re.compile(r"```bash\n(.*?)```", re.S)
NOT_RUN = ("# needs a cluster", "pip install", "python3 -m venv", "source .venv")


def page_commands() -> list[str]:
    """Return the page's shell lines that the test runs, in order."""
    lines = [ln.strip() for block in BLOCK.findall(PAGE.read_text()) for ln in block.splitlines()]
    return [ln for ln in lines if ln and not ln.startswith("#") and not any(mark in ln for mark in NOT_RUN)]


def test_the_page_has_the_commands_a_newcomer_needs() -> None:
    commands = page_commands()
    assert commands[0].startswith("hpc-runner run training --bundle bundles/synthetic_seg")
    assert any(c.startswith("hpc-runner sweep") for c in commands) and any("completion bash" in c for c in commands)
    marked = [ln for b in BLOCK.findall(PAGE.read_text()) for ln in b.splitlines() if "# needs a cluster" in ln]
    assert any("cluster init" in ln for ln in marked)  # the cluster steps are shown, marked


@pytest.mark.slow
def test_every_command_of_getting_started_runs(tmp_path: Path) -> None:
    (tmp_path / "bundles").symlink_to(ROOT / "bundles")  # the clone's bundles, as in a fresh clone
    # `hpc-runner` is this interpreter's, whatever is on PATH
    prelude = f'hpc-runner() {{ "{sys.executable}" -m hpc_runner "$@"; }}\nset -euo pipefail\n'
    for command in page_commands():
        res = subprocess.run(["bash", "-c", prelude + command], cwd=tmp_path, capture_output=True, text=True,
                             timeout=600)
        assert res.returncode == 0, f"{command}\n{res.stdout[-2000:]}\n{res.stderr[-3000:]}"
        # its output is a pipe, as a batch log is: no progress-bar redraws (MONAI's "Loading dataset")
        assert "\r" not in res.stderr and "Loading dataset" not in res.stderr, (command, res.stderr[-2000:])
    assert (tmp_path / "runs" / "first" / "report.html").is_file()
    assert (tmp_path / "runs" / "first-sweep" / "results.csv").read_text().count("\n") == 3  # header + 2 points

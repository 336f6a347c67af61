"""Run one argv through ``python -m monai.bundle`` and ``python -m hpc_runner`` side by side and compare.

Each runner gets its own copy of the same workspace (data files, a checkpoint) and the same relative
paths, so files each one writes can be compared by name and content. The two processes run at the same
time: each spends most of its ~10 s importing torch and MONAI.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from warm_python import WARM

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"
INFO = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ - INFO - (.*)$")


@dataclass
class Side:
    """One runner's result: exit code, output, the folder it ran in, its wall time."""

    code: int
    stdout: str
    stderr: str
    cwd: Path
    seconds: float

    def info(self) -> list[str]:
        """The messages of the INFO lines (MONAI's logger format), the summary header made runner-neutral."""
        out = []
        for line in self.stdout.splitlines():
            m = INFO.match(line)
            if m:
                out.append(re.sub(r"input summary of (monai\.bundle\.scripts\.|hpc-runner )", "input summary of ",
                                  m.group(1)))
        return out


@dataclass
class Both:
    """The MONAI side and the hpc-runner side of one scenario."""

    monai: Side
    hpcr: Side

    def explain(self) -> str:
        """Both sides' exit codes and output tails, for assertion messages."""
        return "\n".join(f"== {name} exit {s.code}\n{s.stdout[-2500:]}\n{s.stderr[-2500:]}"
                         for name, s in (("monai.bundle", self.monai), ("hpc_runner", self.hpcr)))


def _env(extra: dict | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HPCR_", "SLURM_JOB", "SLURM_ARRAY"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(DATA)])
    env["OMP_NUM_THREADS"] = "1"
    env["CUDA_VISIBLE_DEVICES"] = ""  # both sides on the CPU, as MONAI's tests run here
    env.update(extra or {})
    return env


@dataclass
class Workspace:
    """A folder of inputs; ``run_both`` copies it once per runner."""

    root: Path

    @property
    def path(self) -> Path:
        """The folder holding the inputs (relative paths in argv start here)."""
        return self.root / "inputs"

    def run_both(self, command: str, *argv: str, timeout: float = 600, env: dict | None = None) -> Both:
        """Run ``python -m monai.bundle COMMAND ARGV`` and ``python -m hpc_runner COMMAND ARGV``, one after the
        other, each a new process forked from one with torch and MONAI imported (tests/warm_python.py)."""
        sides = {}
        for name, module in (("monai", "monai.bundle"), ("hpcr", "hpc_runner")):
            cwd = self.root / name
            shutil.rmtree(cwd, ignore_errors=True)
            shutil.copytree(self.path, cwd, symlinks=True)
            start = time.monotonic()
            done = WARM.run(module, [command, *argv], cwd=cwd, env=_env(env), timeout=timeout)
            sides[name] = Side(done.returncode, done.stdout, done.stderr, cwd, time.monotonic() - start)
        return Both(sides["monai"], sides["hpcr"])


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    """A workspace with MONAI's test configs under data/."""
    ws = Workspace(tmp_path)
    shutil.copytree(DATA, ws.path / "data", ignore=shutil.ignore_patterns("*.py", "__pycache__", "README.md"))
    return ws


def save_random_checkpoint(path: Path, key: str = "", config: Path = DATA / "inference.json") -> None:
    """Save the config's network_def with random weights (nested under ``key`` when given), as MONAI's tests do."""
    from monai.bundle import ConfigParser
    from monai.networks import save_state

    parser = ConfigParser()
    parser.read_config(str(config))
    net = parser.get_parsed_content("network_def")
    path.parent.mkdir(parents=True, exist_ok=True)
    save_state(src=net if key == "" else {key: net}, path=str(path))


def write_def_args(path: Path, content: dict) -> Path:
    """Write a MONAI ``--args_file`` (JSON or YAML by suffix) as MONAI's tests do."""
    from monai.bundle import ConfigParser

    fmt = "yaml" if path.suffix == ".yaml" else "json"
    ConfigParser.export_config_file(config=content, filepath=str(path), fmt=fmt)
    return path


def assert_both_succeed(both: Both) -> None:
    """Both runners exit 0 and log the same INFO messages (the input summary and the result line)."""
    assert both.monai.code == 0 and both.hpcr.code == 0, both.explain()
    assert both.hpcr.info() == both.monai.info(), both.explain()


def load_torchscript(path: Path, extra: list[str]) -> tuple:
    """The network, metadata and extra files of a TorchScript export."""
    from monai.data import load_net_with_metadata

    return load_net_with_metadata(str(path), more_extra_files=extra)


def assert_same_torchscript(a: Path, b: Path, extra: list[str], shape: tuple = (1, 1, 32, 32, 32)) -> None:
    """Same metadata, same embedded configs, same output on the same input."""
    import torch

    net_a, meta_a, files_a = load_torchscript(a, extra)
    net_b, meta_b, files_b = load_torchscript(b, extra)
    assert meta_a == meta_b and files_a == files_b
    x = torch.rand(shape)
    with torch.no_grad():
        assert torch.equal(net_a.eval()(x), net_b.eval()(x))

"""The tests' warm CLI processes (tests/warm_python.py) behave as `python -m` does: argv, cwd, environment,
$PYTHONPATH, stdin, stdout, stderr, exit code and a timeout, compared with a plain subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from warm_python import WARM

PROBE = '''
import json, os, sys
data = sys.stdin.read()
print(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "var": os.environ.get("PROBE_VAR"),
                  "first": sys.path[0], "second": sys.path[1], "stdin": data, "main": __name__}))
print("grüße to stderr", file=sys.stderr)
if "--sleep" in sys.argv:
    import time
    time.sleep(60)
raise SystemExit(int(sys.argv[-1]) if sys.argv[-1].isdigit() else "a message exits 1")
'''


@pytest.mark.parametrize("args", [["a b", "--x", "3"], ["--y", "oops"]])
def test_a_warm_call_gives_what_a_plain_python_dash_m_gives(tmp_path: Path, args: list[str]) -> None:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "probe.py").write_text(PROBE)
    (tmp_path / "work").mkdir()
    env = {"PATH": os.environ["PATH"], "PROBE_VAR": "é", "PYTHONPATH": str(tmp_path / "lib"),
           "PYTHONIOENCODING": "ascii"}
    warm = WARM.run("probe", args, cwd=tmp_path / "work", env=env, input="in\n", timeout=60)
    cold = subprocess.run([sys.executable, "-m", "probe", *args], cwd=tmp_path / "work", env=env, input="in\n",
                          capture_output=True, text=True, timeout=60)
    assert (warm.returncode, warm.stdout, warm.stderr) == (cold.returncode, cold.stdout, cold.stderr)
    assert warm.returncode == (3 if args[-1] == "3" else 1) and "gr\\xfc\\xdfe" in warm.stderr


def test_a_warm_call_past_its_timeout_is_killed_and_raises_as_subprocess_run_does(tmp_path: Path) -> None:
    (tmp_path / "probe.py").write_text(PROBE)
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(tmp_path)}
    with pytest.raises(subprocess.TimeoutExpired):
        WARM.run("probe", ["--sleep"], cwd=tmp_path, env=env, timeout=1)
    assert WARM.run("probe", ["0"], cwd=tmp_path, env=env, timeout=60).returncode == 0  # the parent lives on

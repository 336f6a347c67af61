"""Each entry point of ours starts its process the one way hpc_runner/process_start.py holds."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import hpc_runner

PACKAGE = Path(hpc_runner.__file__).parent
# the modules a process of ours starts in: the hpc-runner command, the sandboxed job, a job's call
ENTRY_POINTS = {"cli/__init__.py": "entry", "engine/sandbox_job.py": None, "scheduler/job_call.py": None}


def _calls_in(node: ast.AST) -> list[str]:
    return [c.func.id for c in ast.walk(node) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)]


def test_every_entry_point_calls_start_process_first() -> None:
    for relative, function in ENTRY_POINTS.items():
        tree = ast.parse((PACKAGE / relative).read_text())
        if function is None:  # the `if __name__ == "__main__":` block
            body = next(n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test)).body
        else:
            body = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function).body
        body = [n for n in body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
        assert _calls_in(body[0]) == ["start_process"], f"{relative}: first call is {ast.unparse(body[0])}"


def test_start_process_sets_the_heap_the_deferral_the_exit_and_the_bars_once() -> None:
    code = """
import atexit, gc, os, sys
from hpc_runner import heap, optional_modules, quick_exit
from hpc_runner.process_start import start_process
before = gc.get_threshold()
hooks = len(sys.meta_path)
start_process()
start_process()  # a second call changes nothing
assert gc.get_threshold() == heap.IMPORT_THRESHOLDS, gc.get_threshold()
assert len(sys.meta_path) == hooks + 1, sys.meta_path  # the finder that defers as MONAI's import begins
assert quick_exit._registered
assert os.environ["TQDM_DISABLE"] == "1"  # stderr is a pipe here
assert heap.settle_after_imports() and gc.get_threshold() == before
assert "torch" not in sys.modules and "monai" not in sys.modules
print("ok")
"""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(PACKAGE.parent)}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0 and res.stdout == "ok\n", res.stderr

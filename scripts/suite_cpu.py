"""Where the test suite's CPU goes: every Python process it starts, and every test's own, counted by test and kind.

On 2 cores the suite's wall time is its CPU time over two (the cluster's jobs, the CLI's processes and the tests
themselves share the CPUs), so a cut is a cut in CPU. This runs pytest with a `.pth` hook installed for the run in
this interpreter's site-packages: each Python process (test workers, the warm parent's children, plain subprocesses,
SLURM and Grid Engine jobs, which inherit the environment) writes its own CPU seconds at exit, with the test that
started it (``PYTEST_CURRENT_TEST``, inherited) and whether it imported MONAI; a pytest plugin writes each test's
in-process CPU. Processes killed by a signal and those in a sandbox that hides /tmp are not counted, nor non-Python
processes (the scheduler's daemons, bwrap, Chromium). The hook is removed when pytest ends, and is inert without
``HPC_RUNNER_SUITE_CPU_DIR`` even if left behind (not an ``HPCR*`` name: the cluster tests keep those out
of their jobs).

Usage (with the local SLURM started, as .ci/run's first stage):
    python scripts/suite_cpu.py -n 2 -m "not gridengine"      # any pytest arguments
    python scripts/suite_cpu.py --records DIR tests/slurm       # the records kept in DIR (one JSON file a process)
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

HOOK = '''
import atexit, json, os, sys, time
_dir = os.environ.get("HPC_RUNNER_SUITE_CPU_DIR")
_done = False
def _write():
    global _done
    if _done or not _dir:
        return
    _done = True
    t = os.times()
    record = {"pid": os.getpid(), "argv": sys.argv[:3], "test": os.environ.get("PYTEST_CURRENT_TEST", ""),
              "monai": "monai" in sys.modules, "cpu": t.user + t.system,
              "job": bool(os.environ.get("SLURM_JOB_ID") or os.environ.get("JOB_ID"))}
    try:
        with open(os.path.join(_dir, f"{os.getpid()}-{time.time_ns()}.json"), "w") as f:
            json.dump(record, f)
    except OSError:
        pass
def _forked():
    global _done
    _done = False
if _dir and os.path.isdir(_dir):
    atexit.register(_write)
    os.register_at_fork(after_in_child=_forked)
    _exit = os._exit
    def _exit_after_writing(code, _exit=_exit):
        _write()
        _exit(code)
    os._exit = _exit_after_writing
'''

PLUGIN = '''
import json, os, time
import pytest
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    start = time.process_time()
    yield
    with open(os.path.join(os.environ["HPC_RUNNER_SUITE_CPU_DIR"], f"tests-{os.getpid()}.jsonl"), "a") as f:
        f.write(json.dumps({"test": item.nodeid, "cpu": time.process_time() - start}) + "\\n")
'''


def summarize(folder: Path, top: int = 30) -> str:
    """The table: CPU seconds by kind of process, then the test files that spent the most."""
    processes = [json.loads(p.read_text()) for p in folder.glob("*.json")]
    tests = [json.loads(line) for p in folder.glob("tests-*.jsonl") for line in p.read_text().splitlines()]
    kinds: collections.Counter[str] = collections.Counter()
    counts: collections.Counter[str] = collections.Counter()
    by_file: collections.Counter[str] = collections.Counter()
    for r in processes:
        kind = ("a job (SLURM, Grid Engine)" if r["job"] else "a process a test started" if r["test"]
                else "a test worker or pytest (the tests' own CPU included)")
        kinds[kind] += r["cpu"]
        counts[kind] += 1
        if r["test"]:
            by_file[r["test"].split("::")[0]] += r["cpu"]
    for t in tests:
        by_file[t["test"].split("::")[0]] += t["cpu"]
    own = sum(t["cpu"] for t in tests)
    lines = ["| process | CPU s | processes |", "|---|---|---|"]
    lines += [f"| {k} | {v:.0f} | {counts[k]} |" for k, v in kinds.most_common()]
    lines += [f"| (of which the tests' own, in their workers) | {own:.0f} | - |"]
    lines += ["", "| test file | CPU s (its processes and its own) |", "|---|---|"]
    lines += [f"| `{f}` | {v:.1f} |" for f, v in by_file.most_common(top)]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """Run pytest with ``argv`` and the hook installed; print the table; return pytest's exit code."""
    site = Path(sysconfig.get_paths()["purelib"])
    keep = argv[1] if argv[:1] == ["--records"] and len(argv) > 1 else None
    if keep is not None:
        argv = argv[2:]
        Path(keep).mkdir(parents=True, exist_ok=True)
    with contextlib.nullcontext(keep) if keep else tempfile.TemporaryDirectory(prefix="hpcr-suite-cpu-") as tmp:
        files = {site / "_hpcr_suite_cpu.py": HOOK, site / "_hpcr_suite_cpu.pth": "import _hpcr_suite_cpu\n",
                 site / "_hpcr_suite_cpu_plugin.py": PLUGIN}
        try:
            for path, text in files.items():
                path.write_text(text)
            env = {**os.environ, "HPC_RUNNER_SUITE_CPU_DIR": tmp}
            pytest = [sys.executable, "-m", "pytest", "-p", "_hpcr_suite_cpu_plugin", *argv]
            rc = subprocess.run(pytest, env=env).returncode
        finally:
            for path in files:
                path.unlink(missing_ok=True)
        print(summarize(Path(tmp)))
    return rc


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""`python -m MODULE ARGS` in a new process whose torch and MONAI are already imported: a fork of a warm parent.

Most CLI tests start `python -m hpc_runner` (or `python -m monai.bundle`) as a user would, and each such process
spent ~5 s of its ~6 s importing torch and MONAI (`import monai` imports all of MONAI) on this 2-core VM. A
fork of a process that imported them once keeps what those tests check, a separate process with its own
argv, working directory, environment, stdin, stdout, stderr and exit code, and pays the imports once per
test worker, as MONAI's DataLoader workers do. What it does not keep is a cold interpreter: a test of what a
command imports (`--help` without torch, the pre-flight's cache across processes) starts a plain subprocess
(`HPCR_TEST_COLD=1` makes every call one, to compare).

The warm parent imports only third-party modules (torch, MONAI, numpy, nibabel, ignite, yaml, submitit), never
hpc_runner: the code under test is imported fresh in each child, so nothing of it carries from one test to
the next. It defers MLflow, pyplot and Optuna first, as the entry point does (hpc_runner/optional_modules.py, run
from its file under another name), so the children import them when used, as a job does.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from hpc_runner import optional_modules
from hpc_runner.heap import IMPORT_THRESHOLDS  # the warm parent imports as a command starts (it imports no hpc_runner)

# The warm parent: reads one request per line on stdin, forks, and in the child runs the module as
# `python -m` would; answers "pid" when the child starts and "rc" when it ends (it reaps its children).
_PARENT = r"""
import gc, json, os, sys
os.environ["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS", "1")
thresholds = gc.get_threshold()
gc.set_threshold(*IMPORT_THRESHOLDS)  # as hpc_runner/heap.py starts a command; the children get CPython's back
# as the entry point defers MLflow, pyplot and Optuna (hpc_runner/optional_modules.py), by that file under another
# name: hpc_runner itself stays out of the parent
import importlib.util
spec = importlib.util.spec_from_file_location("_warm_optional_modules", OPTIONAL_MODULES_FILE)
optional_modules = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = optional_modules
spec.loader.exec_module(optional_modules)
optional_modules.defer_optional_modules()
for name in WARM:
    try:
        __import__(name)
    except Exception:
        pass
gc.set_threshold(*thresholds)
gc.freeze()  # the imported objects stay out of the children's collections (and their pages shared)
out = os.fdopen(os.dup(1), "w", buffering=1)
child = None
for line in sys.stdin:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        child = req
        break
    out.write(json.dumps({"pid": pid}) + "\n")
    _, status = os.waitpid(pid, 0)
    out.write(json.dumps({"rc": os.waitstatus_to_exitcode(status)}) + "\n")
if child is None:
    raise SystemExit(0)
sys.stdin.close()
for fd, path, flags in ((0, child["stdin"], os.O_RDONLY), (1, child["stdout"], os.O_WRONLY),
                        (2, child["stderr"], os.O_WRONLY)):
    opened = os.open(path, flags)
    os.dup2(opened, fd)
    os.close(opened)
# the streams as the interpreter opens them: $PYTHONIOENCODING's encoding and errors (stderr backslashreplace)
encoding, _, errors = child["env"].get("PYTHONIOENCODING", "").partition(":")
encoding = encoding or "utf-8"
sys.stdin = open(0, closefd=False, encoding=encoding, errors=errors or "strict")
sys.stdout = open(1, "w", closefd=False, encoding=encoding, errors=errors or "strict",
                  buffering=1 if child["env"].get("PYTHONUNBUFFERED") else -1)
sys.stderr = open(2, "w", closefd=False, encoding=encoding, errors=errors or "backslashreplace", buffering=1)
os.chdir(child["cwd"])
os.environ.clear()
os.environ.update(child["env"])
# as the interpreter starts: the working directory first (`python -m`), then $PYTHONPATH's folders
sys.path[0] = os.getcwd()
sys.path[1:1] = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
del out, line, req, pid
import atexit, runpy, threading, traceback
sys.argv = [child["module"], *child["args"]]
try:
    runpy.run_module(child["module"], run_name="__main__", alter_sys=True)
    code = 0
except SystemExit as e:  # as the interpreter reads it
    code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    if e.code is not None and not isinstance(e.code, int):
        print(e.code, file=sys.stderr)
except KeyboardInterrupt:
    traceback.print_exc()
    code = 130
except BaseException:
    traceback.print_exc()
    code = 1
# the interpreter's exit without its teardown of every module (a second or more with torch and MONAI loaded):
# non-daemon threads joined, atexit functions run, streams flushed
threading._shutdown()
atexit._run_exitfuncs()
for stream in (sys.stdout, sys.stderr):
    try:
        stream.flush()
    except Exception:
        pass
os._exit(code)
"""

WARM_MODULES = ("numpy", "torch", "monai", "nibabel", "ignite.engine", "yaml", "submitit")


class WarmPython:
    """One warm parent per test process; `run` is `subprocess.run([python, -m, module, *args])` in a fork of it."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()

    def _parent(self) -> subprocess.Popen[str]:
        if self._proc is None or self._proc.poll() is not None:
            code = (f"WARM = {WARM_MODULES!r}\nIMPORT_THRESHOLDS = {IMPORT_THRESHOLDS!r}\n"
                    f"OPTIONAL_MODULES_FILE = {optional_modules.__file__!r}\n" + _PARENT)
            self._proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.DEVNULL, text=True, cwd="/", start_new_session=True)
        return self._proc

    def run(self, module: str, args: list[str], *, cwd: Path | str, env: dict[str, str], timeout: float | None = None,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run `python -m module *args` in a new process (a fork of the warm parent); output captured as text."""
        argv = [sys.executable, "-m", module, *args]
        if os.environ.get("HPCR_TEST_COLD") == "1":
            return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, input=input)
        with self._lock, tempfile.TemporaryDirectory(prefix="warm-") as tmp:
            files = {name: Path(tmp, name) for name in ("stdin", "stdout", "stderr")}
            files["stdin"].write_text(input or "")
            files["stdout"].touch()
            files["stderr"].touch()
            request = {"module": module, "args": [str(a) for a in args], "cwd": str(cwd), "env": dict(env),
                       **{k: str(v) for k, v in files.items()}}
            proc = self._parent()
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(json.dumps(request) + "\n")
            proc.stdin.flush()
            pid = json.loads(proc.stdout.readline())["pid"]
            answer: dict = {}
            reader = threading.Thread(target=lambda: answer.update(json.loads(proc.stdout.readline() or "{}")))
            reader.start()
            reader.join(timeout)
            if reader.is_alive():  # as subprocess.run: kill the child, then raise
                os.kill(pid, signal.SIGKILL)
                reader.join()
                raise subprocess.TimeoutExpired(argv, timeout or 0, files["stdout"].read_text(),
                                                files["stderr"].read_text())
            if "rc" not in answer:
                raise RuntimeError("the warm python parent died")
            return subprocess.CompletedProcess(argv, answer["rc"], files["stdout"].read_text(errors="replace"),
                                               files["stderr"].read_text(errors="replace"))

    def close(self) -> None:
        """Stop the warm parent (its stdin closed, it exits)."""
        if self._proc is not None and self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        self._proc = None


WARM = WarmPython()
atexit.register(WARM.close)

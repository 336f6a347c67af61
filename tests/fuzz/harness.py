"""One fuzz case: a private world for one CLI call (HOME with canary files, XDG folders, cwd, fake scheduler, an
in-memory cluster) and the contract that call must keep.

The contract (issue 44), for every subcommand and every hostile input:

- the exit code is 0, 1, 2 or 130 (a SystemExit counts as its code);
- no "Traceback" in stdout or stderr; on exit 2 exactly one ``error:`` paragraph;
- with ``--json`` and exit 0, stdout is JSON without NaN or Infinity;
- nothing written outside the allowed folders: the HOME tree is unchanged apart from ``~/.cache/hpc-runner`` (and
  the folders a surface names, such as ``~/.config/hpc-runner/clusters`` for ``cluster init``), nothing new beside
  the working folder, the example bundle unchanged, no ``PWNED`` file anywhere in the case;
- bounded time (``HPCR_FUZZ_DEADLINE_S``, default 10 s) and bounded memory (``HPCR_FUZZ_MEMORY_MB`` of resident
  growth, default 200 MB: a record's size is checked before it is read, not read up to a 512 MB cap), watched from
  a thread that interrupts the call with SIGALRM.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.fuzz.strategies import SANE_ANSWERS, Answers, FileSpec, fake_scheduler, fifo_safe_unblock

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "bundles" / "synthetic_seg"
DEADLINE_S = float(os.environ.get("HPCR_FUZZ_DEADLINE_S", "10"))
MEMORY_MB = float(os.environ.get("HPCR_FUZZ_MEMORY_MB", "200"))
EXIT_CODES = {0, 1, 2, 130}
PROBLEM_REPORT = re.compile(r"^hpc-runner verify: \d+ problem\(s\) in ")  # verify's exit 2 lists its problems
ALWAYS_WRITABLE = (".cache/hpc-runner",)  # in HOME: the kept pre-flight verdicts, limits, name lists

CANARY: dict[str, bytes] = {
    ".ssh/id_x": b"-----BEGIN OPENSSH PRIVATE KEY-----\ncanary\n",
    ".ssh/known_hosts": b"host ssh-ed25519 AAAA\n",
    ".bashrc": b"export CANARY=1\n",
    ".config/hpc-runner/clusters/canary.yaml": b"extends: local\ndescription: canary\n",
    ".config/hpc-runner/clusters/mem.yaml": b"executor: memory\ncpus_per_task: 1\ntime: 10\nmem_gb: 1\n",
    ".config/hpc-runner/clusters/fuzzslurm.yaml": b"extends: slurm\ntime: 10\n",
    ".config/hpc-runner/clusters/fuzzsge.yaml": b"extends: sge-local\n",
    ".config/other-app/settings.ini": b"[x]\ny=1\n",
    ".cache/other-app/blob": b"\x00" * 64,
    ".local/share/other-app/data": b"data\n",
}


class Overrun(BaseException):
    """The call ran past its deadline or its memory cap (a BaseException: the CLI's handlers must not eat it)."""


def _status_kb(field: str) -> int:
    """A field of /proc/self/status in kB (VmRSS: resident now; VmHWM: the peak since the last reset)."""
    with open("/proc/self/status") as f:
        return int(re.search(rf"^{field}:\s+(\d+)", f.read(), re.M).group(1))


def _reset_peak() -> None:
    """Make VmHWM start again from the resident size now (Linux 4.0+: ``5`` to /proc/self/clear_refs)."""
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as f:
        f.write("5")


@contextlib.contextmanager
def bounded(deadline_s: float = DEADLINE_S, memory_mb: float = MEMORY_MB) -> Iterator[dict[str, Any]]:
    """Interrupt the body (SIGALRM in the main thread, which raises Overrun) when it runs longer than
    ``deadline_s`` or its resident memory grows by more than ``memory_mb`` (a watcher thread samples it every
    20 ms); after the body, the kernel's peak (VmHWM, reset before) catches a growth the samples missed: Overrun
    then too. Yields the measures (``seconds``, ``peak_mb``)."""
    measures: dict[str, Any] = {"peak_mb": 0.0, "why": None}
    with contextlib.suppress(OSError, AttributeError):  # freed memory back to the system: growth is measured afresh
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    _reset_peak()
    base = _status_kb("VmRSS")
    stop = threading.Event()
    main = threading.main_thread().ident
    start = time.monotonic()

    def on_alarm(signum: int, frame: Any) -> None:
        raise Overrun(measures["why"] or f"still running after {deadline_s:g} s")

    def watch() -> None:
        while not stop.wait(0.02):
            grown = (_status_kb("VmRSS") - base) / 1024
            measures["peak_mb"] = max(measures["peak_mb"], grown)
            late = time.monotonic() - start > deadline_s
            if (grown > memory_mb or late) and measures["why"] is None:
                measures["why"] = (f"resident memory grew by {grown:.0f} MB (cap {memory_mb:g} MB)" if not late
                                   else f"still running after {deadline_s:g} s")
                signal.pthread_kill(main, signal.SIGALRM)
            if measures["why"] is not None and time.monotonic() - start > deadline_s + 5:
                signal.pthread_kill(main, signal.SIGALRM)  # interrupted again until it gives up
                time.sleep(1)

    old = signal.signal(signal.SIGALRM, on_alarm)
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield measures
    finally:
        stop.set()
        watcher.join()
        signal.signal(signal.SIGALRM, old)
        measures["seconds"] = time.monotonic() - start
        measures["peak_mb"] = max(measures["peak_mb"], (_status_kb("VmHWM") - base) / 1024)
    if measures["peak_mb"] > memory_mb and measures["why"] is None:
        measures["why"] = f"resident memory peaked {measures['peak_mb']:.0f} MB above its start (cap {memory_mb:g} MB)"
        raise Overrun(measures["why"])


def tree(root: Path, skip: Sequence[str] = ()) -> dict[str, tuple]:
    """Every entry under ``root`` (not following links) -> (kind, size, content hash for small files)."""
    out: dict[str, tuple] = {}
    if not root.exists():
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        dirnames[:] = [d for d in dirnames if os.path.normpath(os.path.join(rel_dir, d)) not in skip]
        for name in [*dirnames, *filenames]:
            rel = os.path.normpath(os.path.join(rel_dir, name))
            if any(rel == s or rel.startswith(s + os.sep) for s in skip):
                continue
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if os.path.islink(path):
                out[rel] = ("link", os.readlink(path))
            elif os.path.isfile(path):
                digest = ""
                if st.st_size <= 1 << 20:
                    with open(path, "rb") as f:
                        digest = hashlib.sha1(f.read()).hexdigest()
                out[rel] = ("file", st.st_size, digest)
            else:
                out[rel] = ("dir",) if os.path.isdir(path) else ("other", st.st_mode)
    return out


def _changes(before: dict[str, tuple], after: dict[str, tuple]) -> list[str]:
    return sorted([f"new {k}" for k in after.keys() - before.keys()] +
                  [f"gone {k}" for k in before.keys() - after.keys()] +
                  [f"changed {k}" for k in before.keys() & after.keys() if before[k] != after[k]])


@dataclass
class Outcome:
    """What a call did."""

    argv: list[str]
    code: int | str | None
    out: str
    err: str
    seconds: float
    peak_mb: float


@dataclass
class Case:
    """A private world for one or more CLI calls: ``root`` holds ``home`` (HOME, with the canary tree and the
    XDG folders), ``work`` (the cwd, where the command may write), ``bin`` (the fake scheduler), ``tmp`` (TMPDIR)."""

    root: Path
    fixtures: dict[str, Path]
    env: dict[str, str] = field(default_factory=dict)
    writable: list[str] = field(default_factory=list)  # more folders in HOME the command may write
    made: list[str] = field(default_factory=list)  # the hostile files made, for the reproduction

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    def setup(self) -> None:
        for rel, data in CANARY.items():
            (self.home / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.home / rel).write_bytes(data)
        (self.home / ".ssh").chmod(0o700)
        for sub in ("work", "tmp", "runtime"):
            (self.root / sub).mkdir()
        fake_scheduler(self.bin, SANE_ANSWERS)

    # -------------------------------------------------------------- what a surface puts in the case

    def file(self, rel: str, spec: FileSpec, original: Any = None) -> str:
        """Make the hostile file ``spec`` at ``work/rel`` (or ``~/rel`` for a path starting with ``~/``)."""
        path = self.home / rel[2:] if rel.startswith("~/") else self.work / rel
        if spec.kind == "mutate" and original is None:
            original = {"name": "x", "value": 1, "items": [1, 2], "nested": {"a": "b"}}
        spec.make(path, original)
        self.made.append(f"{rel}: {spec!r}")
        return str(path)

    def profile(self, name: str, spec: FileSpec, original: Any = None) -> str:
        """A hostile cluster profile ``~/.config/hpc-runner/clusters/NAME.yaml``; returns NAME."""
        self.file(f"~/.config/hpc-runner/clusters/{name}.yaml", spec,
                  original if original is not None else {"extends": "mem", "time": 10, "cpus_per_task": 1,
                                                         "mem_gb": 1, "partition": "debug", "setup": ["true"],
                                                         "max_array_size": 10, "description": "fuzz"})
        return name

    def answers(self, answers: Answers) -> None:
        """The fake scheduler prints ``answers`` from now on."""
        shutil.rmtree(self.bin)
        fake_scheduler(self.bin, answers)
        self.made.append(f"scheduler: {answers!r}")

    def copy(self, fixture: str, rel: str) -> Path:
        """A copy of a prepared folder (a finished run, a sweep) at ``work/rel``."""
        dest = self.work / rel
        shutil.copytree(self.fixtures[fixture], dest, symlinks=True)
        return dest

    def damage(self, folder: Path, rel: str, spec: FileSpec) -> str:
        """Replace ``folder/rel`` (a record) with ``spec`` (a mutation starts from the record's own content)."""
        path = folder / rel
        original = None
        if spec.kind == "mutate" and path.is_file():
            import yaml

            text = path.read_text()
            original = ([json.loads(line) for line in text.splitlines() if line.strip()]
                        if path.suffix == ".jsonl" else yaml.safe_load(text))
        if path.suffix == ".jsonl" and spec.kind == "mutate":
            from tests.fuzz.strategies import mutated

            rows = mutated(original, spec.index, spec.value)
            path.write_bytes(b"".join(json.dumps(r, allow_nan=True, default=str).encode("utf-8", "surrogatepass")
                                      + b"\n" for r in (rows if isinstance(rows, list) else [rows])))
        else:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            spec.make(path, original)
        self.made.append(f"{path.relative_to(self.root)}: {spec!r}")
        return str(path)

    # -------------------------------------------------------------- the call and its contract

    @contextlib.contextmanager
    def world(self, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
        """The process as the case needs it: environment, cwd, TMPDIR, a fresh in-memory cluster and fresh
        scheduler caches; everything put back after."""
        from hpc_runner.scheduler.memory.executor import MemoryCluster
        from hpc_runner.scheduler.slurm import cluster_info, resource_check

        saved_env = dict(os.environ)
        saved_cwd = os.getcwd()
        saved_signals = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2,
                                                           signal.SIGINT, signal.SIGHUP)}
        for key in [k for k in os.environ if k.startswith(("HPCR", "SLURM", "SUBMITIT"))]:
            del os.environ[key]
        os.environ.update(HOME=str(self.home), XDG_CONFIG_HOME=str(self.home / ".config"),
                          XDG_CACHE_HOME=str(self.home / ".cache"), XDG_DATA_HOME=str(self.home / ".local/share"),
                          XDG_STATE_HOME=str(self.home / ".local/state"), XDG_RUNTIME_DIR=str(self.root / "runtime"),
                          TMPDIR=str(self.root / "tmp"), PATH=f"{self.bin}{os.pathsep}{saved_env.get('PATH', '')}",
                          OMP_NUM_THREADS="1", TQDM_DISABLE="1", **self.env)
        monkeypatch.setattr(tempfile, "tempdir", str(self.root / "tmp"))
        monkeypatch.setattr(cluster_info, "_CACHE", {})
        monkeypatch.setattr(resource_check, "_ANSWERS", {})
        os.chdir(self.work)
        try:
            with MemoryCluster().installed():
                yield
        finally:
            os.chdir(saved_cwd)
            os.environ.clear()
            os.environ.update(saved_env)
            for s, handler in saved_signals.items():
                with contextlib.suppress(TypeError, ValueError):
                    signal.signal(s, handler)
            monkeypatch.undo()

    def call(self, argv: Sequence[str] | Callable[[], int], capfd: pytest.CaptureFixture[str]) -> Outcome:
        """Run ``hpc_runner.cli.main(argv)`` (or the callable) bounded in time and memory; return what it did.
        Overrun, and any exception out of main, are part of the outcome (``code`` is then the exception's text)."""
        from hpc_runner.cli import main

        capfd.readouterr()
        code: int | str | None
        shown = list(argv) if not callable(argv) else [getattr(argv, "__name__", "call")]
        measures: dict[str, Any] = {"peak_mb": 0.0}
        try:
            with bounded() as measures:
                try:
                    code = argv() if callable(argv) else main(list(argv))
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) or exc.code is None else 1
                except Overrun as exc:
                    code = f"overrun: {exc}"
                except BaseException as exc:  # an exception out of main is the finding
                    import traceback

                    code = f"raised {type(exc).__name__}: {str(exc)[:300]}"
                    print("".join(traceback.format_exception(exc)[-6:]), file=sys.stderr)
        except Overrun as exc:  # the peak after the call (bounded's last check)
            code = f"overrun: {exc}"
        fifo_safe_unblock(self.root)
        captured = capfd.readouterr()
        return Outcome(shown, 0 if code is None else code, captured.out, captured.err,
                       measures.get("seconds", 0.0), measures["peak_mb"])

    def violations(self, outcome: Outcome, before: dict[str, dict], *, json_out: bool = False) -> list[str]:
        """The ways ``outcome`` broke the contract (empty: kept)."""
        found = []
        if outcome.code not in EXIT_CODES:
            found.append(f"exit code {outcome.code!r} (expected one of {sorted(EXIT_CODES)})")
        both = outcome.out + outcome.err
        if "Traceback" in both:
            found.append("a traceback in the output")
        if outcome.code == 2:
            errors = [line for line in outcome.err.splitlines() if ": error: " in line or line.startswith("error:")]
            errors += [line for line in both.splitlines() if PROBLEM_REPORT.match(line)]  # verify's paragraph
            if len(errors) != 1:
                found.append(f"exit 2 with {len(errors)} error paragraphs (expected 1)")
        if json_out and outcome.code == 0:
            def no_constant(name: str) -> Any:
                raise ValueError(f"{name} in --json output")

            try:
                json.loads(outcome.out, parse_constant=no_constant)
            except ValueError:
                try:  # JSON lines (status --json): each line one value
                    for line in filter(str.strip, outcome.out.splitlines()):
                        json.loads(line, parse_constant=no_constant)
                except ValueError as exc:
                    found.append(f"--json output is neither JSON nor JSON lines: {exc}")
        after = self.snapshot()
        for where, then in before.items():
            changes = _changes(then, after[where])
            if changes:
                found.append(f"wrote outside the allowed folders ({where}): {changes[:8]}")
        # what `touch PWNED` (or `> PWNED`) in a value makes when a shell runs it: a file of that very name; a
        # folder or profile the command was asked to make, named `$(touch PWNED)`, is that name, not a command run
        pwned = [str(p.relative_to(self.root)) for p in self.root.rglob("PWNED")]
        if pwned or Path(tempfile.gettempdir(), "PWNED").exists():
            found.append(f"a command in a value ran: {pwned}")
        return found

    def snapshot(self) -> dict[str, dict]:
        """The trees that must not change: HOME (but the writable folders), the case folder beside ``work``
        (but ``tmp``), the example bundle."""
        skip = [*ALWAYS_WRITABLE, *self.writable]
        return {"HOME": tree(self.home, skip), "beside the working folder": tree(self.root, ["work", "tmp", "home",
                                                                                            "runtime", "bin"]),
                "bin": tree(self.bin, ["calls.txt"]), "bundle": tree(BUNDLE, ["__pycache__"])}

    def report(self, outcome: Outcome, found: list[str]) -> str:
        """A failure message with the reproduction: argv, files, and the output's last lines ($CASE: the case's
        folder; a run of one character is shown as <'x' * N>)."""
        def short(text: str) -> str:
            text = text.replace(str(self.root), "$CASE").replace(str(self.fixtures.get("data", "@")), "$DATA")
            return re.sub(r"(.)\1{39,}", lambda m: f"<{m.group(1)!r} * {len(m.group(0))}>", text)

        tail = short(outcome.out[-1500:] + "\n---- stderr ----\n" + outcome.err[-2500:])
        return (short("contract broken: " + "; ".join(found)) + f"\n  argv: {short(repr(outcome.argv))}"
                + f"\n  env: {short(repr(self.env))}\n  files: " + "\n         ".join(map(short, self.made or ["-"]))
                + f"\n  exit: {short(repr(outcome.code))} in {outcome.seconds:.2f} s, +{outcome.peak_mb:.0f} MB\n"
                + "  output:\n" + tail)

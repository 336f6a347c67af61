"""One way in (docs STYLE "One way in, one way out"): bytes from outside reach hpc_runner through one chokepoint
per kind, checked on the package's syntax trees.

- an outside command's output: ``hpc_runner.records.command_output.run_command`` (bounded, decoded with
  errors="replace"); a ``subprocess.run/check_output/Popen`` call that decodes (``text=True``,
  ``universal_newlines=True``, ``encoding=``) elsewhere is a failure;
- a file: ``hpc_runner.records.read`` (``read_record_bytes``/``read_record_text``: a regular file, a size bound);
  ``open(...)`` for reading, ``Path.read_text`` and ``Path.read_bytes`` elsewhere are failures;
- YAML and JSON text: ``records.read.parse_yaml_record``/``parse_json_text`` (ruff's banned-api, pyproject.toml).

The allow-lists below are short and each entry says why; "TODO(owner: ...)" entries belong to modules another
change is converting at the same time.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "hpc_runner"
SUBPROCESS_CALLS = {"run", "check_output", "Popen", "call", "check_call"}
DECODING_KEYWORDS = {"text", "universal_newlines", "encoding", "errors"}

# modules that may decode a subprocess's output themselves
SUBPROCESS_ALLOWED = {
    "records/command_output.py": "the chokepoint itself (it reads bytes)",
}

# modules that may read a file without records.read
READ_ALLOWED = {
    "records/atomic.py": "/proc/self/status for the umask: a kernel file, read once at import",
    "resources/cpus.py": "cgroup cpu.max / cfs_quota files: kernel files of a few bytes",
    "data/cache_plan.py": "/proc/meminfo: a kernel file",
    "data/threads.py": "/proc/self/maps: a kernel file",
    "scheduler/job_env.py": "/proc/PID/stat and comm: kernel files, decoded with errors='replace'",
    "scheduler/slurm/follow.py": "follows a growing job log by offset, in bounded chunks (rb)",
    "config/module_source.py": "ast.parse of an importable module's own source, found by importlib",
    "inference/manifest.py": "its own manifest lines, each parsed by parse_json_text; outputs hashed in 'rb' chunks",
    "registry/archive.py": "packs a bundle's files into a tar in 'rb' chunks (copying, not parsing)",
    "monai_cli/arguments.py": "copies a staged file in 'rb' chunks (copying, not parsing)",
    "jobs/states.py": "reads error.txt's head through a descriptor from records.read.open_regular",
    "scheduler/job_logs.py": "reads job logs' tails through descriptors from records.read.open_regular",
}


def _modules() -> dict[str, ast.AST]:
    return {p.relative_to(PACKAGE).as_posix(): ast.parse(p.read_text(encoding="utf-8"), filename=str(p))
            for p in sorted(PACKAGE.rglob("*.py"))}


def _call_name(call: ast.Call) -> tuple[str, str]:
    """(the object's name or '', the called name) of ``x.f(...)`` or ``f(...)``."""
    func = call.func
    if isinstance(func, ast.Attribute):
        owner = func.value.id if isinstance(func.value, ast.Name) else ""
        return owner, func.attr
    return "", func.id if isinstance(func, ast.Name) else ""


def _constant(node: ast.AST | None) -> object:
    return node.value if isinstance(node, ast.Constant) else None


def decoding_subprocess_calls(tree: ast.AST) -> list[int]:
    """Lines of ``subprocess.X(...)`` calls with a decoding keyword that is not False or None."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            owner, name = _call_name(node)
            if owner == "subprocess" and name in SUBPROCESS_CALLS:
                off = [isinstance(kw.value, ast.Constant) and kw.value.value in (False, None) for kw in node.keywords]
                if any(kw.arg in DECODING_KEYWORDS and not o for kw, o in zip(node.keywords, off, strict=True)):
                    lines.append(node.lineno)
    return lines


def _reading_mode(call: ast.Call) -> bool:
    mode = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "mode"), None)
    if mode is None:
        return True  # open(path): read, text
    value = _constant(mode)
    return not isinstance(value, str) or "r" in value


def reading_calls(tree: ast.AST) -> list[int]:
    """Lines of ``open(...)`` for reading (no mode, or a mode with r), ``.read_text()``, ``.read_bytes()`` and
    ``x.open("r...")`` (a Path's)."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        owner, name = _call_name(node)
        method = isinstance(node.func, ast.Attribute)
        if (method and name in ("read_text", "read_bytes")) or (name == "open" and not method and _reading_mode(node)):
            lines.append(node.lineno)
        elif name == "open" and isinstance(node.func, ast.Attribute) and owner not in ("os", "tarfile", "gzip", "io"):
            # p.open("rb"), p.open(encoding=...); a bare x.open() is too often a method of another kind
            path_mode = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "mode"), None)
            value = _constant(path_mode) if path_mode is not None else ("r" if node.keywords else None)
            if isinstance(value, str) and "r" in value:
                lines.append(node.lineno)
    return lines


def test_no_module_decodes_a_subprocess_answer_but_the_chokepoint():
    found = {name: lines for name, tree in _modules().items() if (lines := decoding_subprocess_calls(tree))
             and name not in SUBPROCESS_ALLOWED}
    assert not found, f"use hpc_runner.records.command_output.run_command: {found}"


def test_no_module_reads_a_file_but_through_records_read():
    found = {name: lines for name, tree in _modules().items() if (lines := reading_calls(tree))
             and name not in READ_ALLOWED}
    assert not found, f"read files through hpc_runner.records.read (read_record_text/bytes): {found}"


def test_the_allow_lists_name_modules_that_exist_and_still_need_it():
    modules = _modules()
    stale = [name for name in SUBPROCESS_ALLOWED if name not in modules]
    stale += [name for name in READ_ALLOWED if name not in modules]
    assert not stale, f"allow-list entries for modules that no longer exist: {stale}"
    unneeded = [name for name, why in READ_ALLOWED.items() if not why.startswith("TODO(owner")
                and not reading_calls(modules[name])]
    kept = ("TODO(owner", "the chokepoint")
    unneeded += [name for name, why in SUBPROCESS_ALLOWED.items()
                 if not why.startswith(kept) and not decoding_subprocess_calls(modules[name])]
    assert not unneeded, f"allow-list entries no longer needed: {unneeded}"


def test_the_checks_see_what_they_ban():
    bad = ast.parse("import subprocess\nsubprocess.run(['x'], text=True)\nsubprocess.Popen(['x'], encoding='utf-8')\n"
                    "subprocess.check_output(['x'], universal_newlines=True)\nsubprocess.run(['x'], text=flag)\n")
    assert decoding_subprocess_calls(bad) == [2, 3, 4, 5]
    assert decoding_subprocess_calls(ast.parse("subprocess.run(['x'], capture_output=True, text=False)")) == []
    reads = ast.parse("open(p)\nopen(p, 'rb')\nopen(p, 'w')\nopen(p, mode='a')\np.read_text()\np.read_bytes()\n"
                      "p.open('rb')\np.open(encoding='utf-8')\nos.open(p, 0)\nopen(p, 'r+b')\n")
    assert reading_calls(reads) == [1, 2, 5, 6, 7, 8, 10]
    assert reading_calls(ast.parse("run.open()\np.open('wb')")) == []

"""The house's plan, checked: no import cycle between modules, scheduler words only in scheduler/, executors and
target kinds as types (docs/architecture.md; the package layers are import-linter's, run by .ci/run)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "hpc_runner"
SCHEDULER_COMMANDS = {"sacct", "squeue", "scontrol", "sbatch", "scancel", "sinfo", "sacctmgr", "srun"}


def _modules() -> dict[str, Path]:
    return {".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__"): p
            for p in PACKAGE.rglob("*.py")}


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """The nodes under ``if TYPE_CHECKING:``: imports for annotations only, never run."""
    blocks = [b for b in ast.walk(tree) if isinstance(b, ast.If) and "TYPE_CHECKING" in ast.unparse(b.test)]
    return {id(n) for block in blocks for n in ast.walk(block)}


def _scheduler_words(path: Path) -> set[str]:
    """SLURM variables and commands named in a module's code (not its docstrings or comments)."""
    tree = ast.parse(path.read_text())
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    words = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            text = node.value.strip()
            if text.startswith("SLURM_") and text.replace("_", "").isalnum():
                words.add(text)
            first = text.split(" ", 1)[0]
            options = text.split()[1:2]
            if first in SCHEDULER_COMMANDS and (text == first or (options and options[0].startswith("-"))):
                words.add(first)
        if isinstance(node, ast.List) and node.elts and isinstance(node.elts[0], ast.Constant) \
                and node.elts[0].value in SCHEDULER_COMMANDS:
            words.add(node.elts[0].value)
    return words


def test_the_package_has_no_import_cycle():
    """Module-level and function-level imports together (a lazy import may hide a cycle, not excuse one); imports
    under ``if TYPE_CHECKING:`` only name types for annotations and never run, so they do not count."""
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        typing_only = _type_checking_nodes(tree)
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # `from pkg import sub` needs the module pkg.sub (as the shared tools/import_cycles.py counts it)
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                           for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            graph[name] |= {t for t in targets if t in modules and t != name}
    seen, stack = set(), set()

    def visit(node: str, path: list[str]) -> None:
        if node in stack:
            raise AssertionError("import cycle: " + " -> ".join([*path[path.index(node):], node]))
        if node in seen:
            return
        seen.add(node)
        stack.add(node)
        for nxt in sorted(graph[node]):
            visit(nxt, [*path, node])
        stack.discard(node)

    for m in sorted(graph):
        visit(m, [])


def test_only_the_scheduler_names_slurm_variables_and_commands():
    """Outside scheduler/, no module names SLURM (run.yaml's capture of the job's variables is the job side's)."""
    found = {p.relative_to(PACKAGE).as_posix(): sorted(_scheduler_words(p)) for p in PACKAGE.rglob("*.py")
             if not p.relative_to(PACKAGE).as_posix().startswith("scheduler/")}
    assert {k: v for k, v in found.items() if v} == {}


def test_the_word_finder_sees_a_variable_and_a_command_but_not_prose(tmp_path):
    path = tmp_path / "probe.py"
    path.write_text('"""squeue -j 1 in a docstring does not count."""\nA = "SLURM_JOB_ID"\nB = "scancel --batch 1"\n'
                    'C = ["sacct", "-j", "1"]\nD = "srun is a word"\n')
    assert _scheduler_words(path) == {"SLURM_JOB_ID", "scancel", "sacct"}


def test_no_code_compares_the_executor_kind_with_a_string():
    pattern = re.compile(r"""executor\s*[!=]=\s*["']|[!=]=\s*["']local["']|["']local["']\s*[!=]=""")
    found = [f"{p.relative_to(PACKAGE)}:{n}" for p in PACKAGE.rglob("*.py")
             for n, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == []


def test_no_code_outside_a_kind_compares_a_target_or_stage_kind_with_a_string():
    """Targets (run, sweep, tune, pipeline) and stage kinds are classes: a kind is asked, not compared."""
    names = "run|sweep|tune|pipeline|select|shards|export"
    pattern = re.compile(rf"""kind["')\]]*\s*(?:[!=]=|\bin\b)\s*[(\[{{]?\s*["'](?:{names})["']""")
    allowed = {"jobs/ledger.py", "jobs/targets.py"}
    found = [f"{p.relative_to(PACKAGE)}:{n}" for p in PACKAGE.rglob("*.py")
             if p.relative_to(PACKAGE).as_posix() not in allowed and "stages" not in p.parts
             for n, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == []

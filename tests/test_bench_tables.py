"""The docs' benchmark tables come from the benches' result files (bench/results/*.json, docs/hooks/bench_tables.py):
every number in a rendered table is one a result file holds (or a ratio of two of them), no page types a
benchmark table by hand, and stale, missed and never-measured figures are rendered as such."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")
# what marks a hand-typed table as a benchmark table: a goal/ratio column, a bench's name, a timing unit
BENCH_WORDS = re.compile(r"\bgoal\b|\bmet\?|\bratio\b|speedup|(?<!tests/)bench/|items/s|ms/batch|volumes/s|points/min",
                         re.I)


def _hook() -> Any:
    spec = importlib.util.spec_from_file_location("bench_tables", DOCS / "hooks" / "bench_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


HOOK = _hook()


def _numbers(text: str) -> list[float]:
    return [float(t.replace(",", "")) for t in NUMBER.findall(text)]


def _walk(value: Any) -> list[float]:
    """Every number a result file holds: its numeric fields and the numbers written in its text fields."""
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, (int, float)):
        return [float(value)]
    if isinstance(value, str):
        return _numbers(value)
    if isinstance(value, dict):
        return [n for v in value.values() for n in _walk(v)]
    return [n for v in value for n in _walk(v)]


def _allowed(names: list[str]) -> list[float]:
    allowed = _numbers(" ".join(names))
    for name in names:
        result = HOOK.load(name)
        if result is None:
            continue
        allowed += _walk(result)
        allowed += [n for fig in result["figures"] for n in _numbers(HOOK.ratio(fig))]
    return allowed


def _tables(markdown: str) -> list[list[str]]:
    """Every Markdown table of a page: its lines."""
    tables, current = [], []
    for line in [*markdown.splitlines(), ""]:
        if line.startswith("|"):
            current.append(line)
        elif current:
            tables.append(current)
            current = []
    return tables


def _cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def test_no_page_types_a_benchmark_table_by_hand() -> None:
    typed = []
    for page in PAGES:
        for table in _tables(page.read_text()):
            if BENCH_WORDS.search("\n".join(table)) or page.name == "benchmarks.md":
                typed.append(f"{page.name}: {table[0]}")
    assert not typed, "benchmark tables typed by hand (use <!-- bench-table: NAME -->):\n" + "\n".join(typed)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_number_of_a_rendered_table_comes_from_a_result_file(page: Path) -> None:
    source = page.read_text()
    for match in HOOK.MARKER.finditer(source):
        names = match.group(1).split()
        rendered = HOOK.table(names)
        table = _tables(rendered)[0]
        assert _cells(table[0]) == list(HOOK.HEADER)
        allowed = _allowed(names)
        rows = iter(table[2:])
        for name in names:
            result = HOOK.load(name)
            if result is None:
                assert HOOK.NEVER in next(rows)
                continue
            for fig in result["figures"]:
                cells = _cells(next(rows))
                assert cells[0].startswith(fig["name"].replace("|", "\\|"))
                assert cells[1] == HOOK.quantity(fig["value"], fig["unit"])
                assert cells[3] == HOOK.ratio(fig) and cells[5] == HOOK.verdict(fig)
                assert result["date"] in cells[6] and cells[7].startswith(f"`{result['commit'][:7]}`")
                for i, cell in enumerate(cells):
                    if i == 7:  # the commit, compared above
                        continue
                    for n in _numbers(cell):
                        assert any(abs(n - abs(a)) <= 1e-9 * max(1.0, abs(a)) for a in allowed), (
                            f"{page.name}: {n} in {cell!r} ({name}) is in no result file")
        assert next(rows, None) is None
        # the page as the build sees it: the marker replaced by exactly this table
        assert rendered in HOOK.render(source) and match.group(0) not in HOOK.render(source)


def test_the_gpu_figures_the_issue_names_are_measured_and_missed_not_never_measured() -> None:
    page = HOOK.render((DOCS / "benchmarks.md").read_text())
    amp = [line for line in page.splitlines() if line.startswith("|") and "with AMP" in line]
    assert len(amp) == 2 and all("**missed**" in line and HOOK.NEVER not in line for line in amp), amp
    guide = (DOCS / "guide.md").read_text()
    assert "not built" not in guide and "--gpu_transforms" in guide


def _result(folder: Path, name: str, commit: str, paths: list[str], met: bool | None) -> None:
    fig = {"name": f"{name} figure", "value": 1.5, "unit": "s", "anchor_name": "peer", "anchor_value": 3.0,
           "goal": "<= 1x" if met is not None else None, "goal_met": met}
    data = {"bench": name, "command": f"python bench/{name}.py", "commit": commit, "date": "2026-01-02",
            "machine": {"cpus": 2, "gpu": None, "load": [0.5, 0.4, 0.3]}, "measured_paths": paths, "figures": [fig]}
    (folder / f"{name}.json").write_text(json.dumps(data))


def _git(*args: str) -> str:
    out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else ""


def test_fresh_stale_missed_and_never_measured_are_rendered_as_such(tmp_path: Path) -> None:
    head = _git("rev-parse", "HEAD")
    if not head:
        pytest.skip("not a git checkout")
    _result(tmp_path, "fresh", head, ["bench/results.py"], True)
    _result(tmp_path, "missed", head, ["bench/results.py"], False)
    _result(tmp_path, "unknown", "0" * 40, ["bench/results.py"], None)
    page = HOOK.render("<!-- bench-table: fresh missed unknown absent -->\n", tmp_path)
    rows = {line.split("|")[1].strip(): line for line in page.splitlines() if line.startswith("| ")}
    assert "| met | 2026-01-02 |" in rows["fresh figure"] and "0.50x" in rows["fresh figure"]
    assert "| **missed** | 2026-01-02 |" in rows["missed figure"]
    assert "stale? (measured 2026-01-02" in rows["unknown figure"]
    assert HOOK.NEVER in rows["`absent`"] and "`absent`: never measured" in page
    parent = _git("rev-parse", "HEAD~1")
    if not parent:
        pytest.skip("a shallow checkout: no commit before HEAD")
    HOOK.changed_since.cache_clear()
    _result(tmp_path, "stale", parent, ["."], False)
    line = next(x for x in HOOK.table(["stale"], tmp_path).splitlines() if x.startswith("| stale figure"))
    assert "**stale** (measured 2026-01-02)" in line and "**missed**" in line

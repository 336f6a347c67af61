#!/usr/bin/env python3
"""Print the slowest tests and test files of a pytest JUnit XML report as Markdown tables.

Usage: ``python scripts/slowest_tests.py JUNIT.xml [JUNIT.xml ...] [N]`` (N: how many rows, default 30; several
reports are read as one). `.ci/run` prints it after the tests, so every CI log carries the table that
docs/testing.md quotes.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path


def test_times(junit: Path) -> list[tuple[str, float, str]]:
    """Return (test id, seconds, outcome) for every test case of the report."""
    rows = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        path = (case.get("classname") or "").replace(".", "/")
        name = f"{path}.py::{case.get('name')}" if path else case.get("name", "?")
        outcome = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed")
        rows.append((name, float(case.get("time") or 0), outcome))
    return rows


def tables(rows: list[tuple[str, float, str]], n: int) -> str:
    """Return the N slowest tests, then the N slowest files, with the total."""
    by_file: dict[str, float] = defaultdict(float)
    for name, seconds, _ in rows:
        by_file[name.split("::", 1)[0]] += seconds
    out = [f"{len(rows)} tests, {sum(s for _, s, _ in rows):.0f} s of test time in all", "",
           "| # | test | s | outcome |", "|---|---|---|---|"]
    for i, (name, seconds, outcome) in enumerate(sorted(rows, key=lambda r: -r[1])[:n], 1):
        out.append(f"| {i} | `{name}` | {seconds:.1f} | {outcome} |")
    out += ["", "| # | file | s |", "|---|---|---|"]
    for i, (name, seconds) in enumerate(sorted(by_file.items(), key=lambda r: -r[1])[:n], 1):
        out.append(f"| {i} | `{name}` | {seconds:.1f} |")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    """Print the tables for the reports named on the command line."""
    n = int(argv.pop()) if len(argv) > 1 and argv[-1].isdigit() else 30
    if not argv or not all(Path(a).is_file() for a in argv):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    print(tables([row for a in argv for row in test_times(Path(a))], n))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

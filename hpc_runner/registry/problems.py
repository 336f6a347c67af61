"""A problem found in a bundle, reported as one line: ``file:line: id 'x': what is wrong``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hpc_runner.errors import BundleError


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a bundle: where (file:line), which id, and what."""

    where: str | None
    id_path: str | None
    message: str

    def line(self) -> str:
        """Return the problem as one line."""
        parts = [f"{self.where}:" if self.where else "", f"id '{self.id_path}':" if self.id_path else "", self.message]
        return " ".join(p for p in parts if p)


def problems_error(problems: Sequence[Problem], what: str, *, expected: str, hint: str | None = None) -> BundleError:
    """Return one BundleError whose message says what was expected, then lists every problem, one per line."""
    lines = "\n".join("  " + p.line() for p in problems)
    head = f"{what}: {len(problems)} problem(s). Expected {expected}."
    if hint:
        head += f" {hint}."
    return BundleError(f"{head}\n{lines}")

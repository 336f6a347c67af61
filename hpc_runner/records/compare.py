"""Compare where a run ran (run.yaml's ``versions`` and ``git``) with where it would run now."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MISSING = "(not installed)"
GIT_FIELDS = ("commit", "dirty", "bundle_dirty")


@dataclass(frozen=True)
class Difference:
    """One thing that differs between the record and now."""

    what: str  # "torch", "git commit", ...
    recorded: Any
    now: Any

    def line(self) -> str:
        """Return ``what: recorded X, now Y``."""
        return f"{self.what}: recorded {_show(self.recorded)}, now {_show(self.now)}"


def _show(value: Any) -> str:
    if value is None:
        return "(none)"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _where(git: Mapping[str, Any] | None) -> str:
    return f"repo {git.get('root')} at {git.get('commit')}" if git else "not in a git repo"


def version_differences(recorded: Mapping[str, Any] | None, now: Mapping[str, Any]) -> list[Difference]:
    """Return the packages whose version differs (or that are installed on one side only)."""
    recorded = recorded or {}
    out = []
    for name in dict.fromkeys([*recorded, *now]):
        before, after = recorded.get(name, MISSING), now.get(name, MISSING)
        if str(before) != str(after):
            out.append(Difference(name, before, after))
    return out


def git_differences(recorded: Mapping[str, Any] | None, now: Mapping[str, Any] | None) -> list[Difference]:
    """Return how the bundle's git state differs: commit, uncommitted changes, or in/out of a repo."""
    if not recorded and not now:
        return []
    if not recorded or not now:
        return [Difference("git", _where(recorded), _where(now))]
    labels = {"commit": "git commit", "dirty": "git uncommitted changes (repo)",
              "bundle_dirty": "git uncommitted changes (bundle)"}
    return [
        Difference(labels[k], recorded.get(k), now.get(k)) for k in GIT_FIELDS if recorded.get(k) != now.get(k)
    ]


def describe(differences: list[Difference]) -> str:
    """Return the differences as one indented line each."""
    return "\n".join(f"  {d.line()}" for d in differences)

"""Where the pipeline finds a stage's kind by name: the registry ``pipeline/stages/__init__.py`` fills.

The kinds' classes call the pipeline's steps (configs, submission, views, resume), and those steps turn a
name from a file or a record into its kind here, so this module imports no kind (only model.py's ``Kind``,
the interface): the kinds are registered when the ``hpc_runner.pipeline`` package is imported (its
``__init__`` imports ``stages``), which Python does before any module of the package runs.
"""

from __future__ import annotations

from typing import Any

from hpc_runner.pipeline.model import Kind

KINDS: dict[str, type[Kind]] = {}  # name -> StageKind subclass, in the order a stage's kind is looked for
UNKNOWN: list[type[Kind]] = []  # [StageKind]: the defaults a name no class claims gets (a record of another version)


def register(kinds: list[type[Kind]], unknown: type[Kind]) -> None:
    """Register the kinds' classes (``kinds``, in look-up order) and the class of an unknown name."""
    KINDS.clear()
    KINDS.update((cls.name, cls) for cls in kinds)
    UNKNOWN[:] = [unknown]


def kinds() -> list[Kind]:
    """Return one object of every registered kind, in the registry's order."""
    return [cls() for cls in KINDS.values()]


def kind_of(name: Any) -> Kind:
    """Return the kind named ``name`` (a stage's ``kind`` in the record); an unknown name gets the base's defaults."""
    cls = KINDS.get(name) if isinstance(name, str) else None
    return cls() if cls is not None else UNKNOWN[0](str(name or ""))

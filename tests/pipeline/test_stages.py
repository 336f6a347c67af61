"""The stage kinds' registry: one class per kind, looked up by the name the record keeps; a new kind is one class
and one registry line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hpc_runner.errors import UserError
from hpc_runner.pipeline.spec import parse_spec
from hpc_runner.pipeline.stages import KINDS, StageKind, kind_of


def test_every_registered_kind_is_found_by_the_name_the_record_keeps() -> None:
    assert list(KINDS) == ["select", "sweep", "tune", "export", "shards", "run"]
    for name, cls in KINDS.items():
        kind = kind_of(name)
        assert type(kind) is cls and kind.name == name and str(kind) == name
    unknown = kind_of("bogus")  # a record written by another version: the defaults of a one-job stage
    assert type(unknown) is StageKind and unknown.name == "bogus" and not unknown.takes_choice
    assert kind_of(None).name == ""


class NoteKind(StageKind):
    """A kind made up for the test: ``note: TEXT``, nothing else."""

    name = "note"
    key = "note"
    keys = frozenset({"note"})

    def parse(self, stage: Any, raw: dict[str, Any], at: str, fail: Any) -> None:
        if not isinstance(raw["note"], str):
            raise fail("note is not a text", f"{at}::note", expected="note: TEXT")


def test_a_new_kind_is_one_class_and_one_registry_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(KINDS, NoteKind.name, NoteKind)
    spec = parse_spec({"bundle": "b", "stages": [{"name": "n", "note": "hello"}]}, Path("p.yaml"))
    assert spec.stages[0].kind == NoteKind() and spec.stages[0].to_record()["kind"] == "note"
    with pytest.raises(UserError, match="a note stage takes no entry"):
        parse_spec({"bundle": "b", "stages": [{"name": "n", "note": "hi", "entry": "x"}]}, Path("p.yaml"))
    with pytest.raises(UserError, match="note is not a text"):
        parse_spec({"bundle": "b", "stages": [{"name": "n", "note": 3}]}, Path("p.yaml"))

"""A fuzzed CLI (issue 44): every subcommand, called in process with generated values of every hostile input class
(tests/fuzz/strategies.py) in each of its inputs (tests/fuzz/surfaces.py), keeps the contract of
tests/fuzz/harness.py: exit 0, 1, 2 or 130; no traceback; one error paragraph on exit 2; JSON without NaN for
--json; nothing written outside its folders; bounded time and memory.

Run: ``pytest tests/fuzz`` (about two minutes on two cores; one example per surface and class, the same ones every
time). More: ``HPCR_FUZZ_EXAMPLES=20 pytest tests/fuzz`` (examples per surface and class);
``HPCR_FUZZ_PROFILE=dev`` also draws new examples each run and shrinks a failure to its smallest form. One
surface: ``pytest tests/fuzz -k 'sweep and sweep-file'``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from hpc_runner.cli import build_parser
from tests.fuzz.harness import Case
from tests.fuzz.strategies import fifo_safe_unblock
from tests.fuzz.surfaces import CLASSES, SURFACES, Surface

settings.register_profile(
    "hpcr-fuzz",  # CI: the same examples every run, no shrinking (a finding is reported as drawn)
    max_examples=int(os.environ.get("HPCR_FUZZ_EXAMPLES", "1")),
    derandomize=True,
    database=None,
    deadline=None,  # the harness's own wall-clock guard bounds each call (HPCR_FUZZ_DEADLINE_S)
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
    print_blob=False,
)
settings.register_profile(
    "hpcr-fuzz-dev",  # a developer hunting: new examples each run, failures shrunk
    parent=settings.get_profile("hpcr-fuzz"),
    derandomize=False,
    phases=[Phase.explicit, Phase.generate, Phase.shrink],
)
FUZZ = settings.get_profile("hpcr-fuzz-dev" if os.environ.get("HPCR_FUZZ_PROFILE") == "dev" else "hpcr-fuzz")


def test_every_subcommand_has_a_surface() -> None:
    _, subparsers = build_parser()
    covered = {s.command for s in SURFACES}
    missing = sorted(set(subparsers) - covered)
    assert not missing, f"subcommands with no line in tests/fuzz/surfaces.py SURFACES: {missing}"
    unknown = sorted(c for c in covered - set(subparsers) if not c.startswith("("))
    assert not unknown, f"SURFACES names commands the CLI does not have: {unknown}"


def test_every_surface_names_a_known_kind_once() -> None:
    assert all(s.kind in CLASSES for s in SURFACES)
    ids = [s.id for s in SURFACES]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


def one_case(surface: Surface, value: object, base: Path, fixtures: dict[str, Path], capfd) -> None:
    """Build the case for ``value``, run its set-up and its call, assert the contract."""
    from hpc_runner.cli import main

    case = Case(Path(tempfile.mkdtemp(prefix="case-", dir=base)), fixtures)
    try:
        case.setup()
        case.writable.extend(surface.writable)
        with pytest.MonkeyPatch.context() as mp, case.world(mp):
            for argv in surface.setup(case) if surface.setup else []:
                capfd.readouterr()
                code = main(argv)
                assert code == 0, f"set-up {argv} exited {code}: {capfd.readouterr().err[-2000:]}"
            argv = surface.build(case, value)
            os.environ.update(case.env)
            before = case.snapshot()
            outcome = case.call(argv, capfd)
            found = case.violations(outcome, before, json_out=isinstance(argv, list) and "--json" in argv)
            assert not found, case.report(outcome, found)
    finally:
        fifo_safe_unblock(case.root)
        shutil.rmtree(case.root, ignore_errors=True)


@pytest.mark.parametrize("surface", SURFACES, ids=[s.id for s in SURFACES])
def test_a_hostile_value_keeps_the_contract(surface: Surface, fuzz_base: Path, fuzz_fixtures: dict[str, Path],
                                           capfd: pytest.CaptureFixture[str]) -> None:
    """Every class of the surface's kind, FUZZ.max_examples examples each; all broken classes are reported."""
    failures = []
    for name, strategy in CLASSES[surface.kind].items():

        @FUZZ
        @given(value=strategy)
        def check(value: object) -> None:
            one_case(surface, value, fuzz_base, fuzz_fixtures, capfd)

        try:
            check()
        except AssertionError as exc:
            notes = "\n".join(getattr(exc, "__notes__", []))
            failures.append(f"[{surface.id} / {name}]\n{exc}\n{notes}")
    assert not failures, "\n\n".join(failures)

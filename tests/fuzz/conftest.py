"""The prepared folders the fuzz cases copy (a finished run, a finished two-point local sweep, a Decathlon folder,
the synthetic data), made once per session in a world of their own, and the warm-up that imports torch and MONAI
before any case is timed."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fuzz.harness import BUNDLE, Case


@pytest.fixture(scope="session")
def fuzz_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder under which every case gets its own (removed after the case)."""
    return tmp_path_factory.mktemp("fuzz")


@pytest.fixture(scope="session")
def fuzz_fixtures(fuzz_base: Path) -> Iterator[dict[str, Path]]:
    """{name: folder} of the prepared inputs; made with the real CLI, in process (which also warms it up)."""
    from hpc_runner.cli import main
    from tests.fuzz.surfaces import TINY
    from tests.registry.registry_helpers import make_decathlon_folder

    maker = Case(fuzz_base / "maker", {})
    maker.root.mkdir()
    maker.setup()
    made = maker.root / "made"
    made.mkdir()
    data = made / "data"
    with pytest.MonkeyPatch.context() as mp, maker.world(mp):
        tiny = ["--bundle", str(BUNDLE), *TINY, "--dataset_dir", str(data)]
        for argv in (["run", *tiny, "--output_dir", str(made / "run")],
                     ["sweep", *tiny, "--cluster", "local", "--sweep", "seed=1,2", "--output_dir", str(made / "sweep")],
                     ["config", "--bundle", str(BUNDLE), "--ids"],
                     ["sweep", *tiny, "--cluster", "mem", "--sweep", "seed=1,2", "--dry-run"]):
            assert main(argv) == 0, argv
    make_decathlon_folder(made / "decathlon", cases=2, size=32)  # 32: the smallest crop init takes without --pad-small
    yield {"run": made / "run", "sweep": made / "sweep", "decathlon": made / "decathlon", "data": data,
           "bundle": BUNDLE}
    shutil.rmtree(fuzz_base, ignore_errors=True)

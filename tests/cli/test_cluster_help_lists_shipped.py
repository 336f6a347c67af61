"""`--cluster`'s help lists every shipped profile, read from the shipped profiles folder (not a list by hand)."""

from __future__ import annotations

from hpc_runner.cli import build_parser
from hpc_runner.cli.slurm_options import shipped_profiles
from hpc_runner.scheduler.profiles import BUILTIN_DIR


def test_the_cluster_help_names_every_shipped_profile() -> None:
    shipped = sorted(p.stem for p in BUILTIN_DIR.glob("*.y*ml"))
    assert "sge-local" in shipped and shipped_profiles() == shipped
    _, subparsers = build_parser()
    help_text = " ".join(subparsers["submit"].format_help().split())
    assert f"a name ({', '.join(shipped)};" in help_text

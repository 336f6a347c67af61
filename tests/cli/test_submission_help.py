"""submit, sweep and tune share one builder of named option groups; sweep --help shows what a sweep needs first."""

from __future__ import annotations

import argparse

import pytest

from hpc_runner.cli import build_parser, main

UNNAMED = ("options", "optional arguments")  # argparse's own title for options put in no group


def test_sweep_help_shows_sweep_cluster_and_dry_run_on_its_first_screen(capsys) -> None:
    # 6ca9a4e: 167 lines, the usage alone a screen, --dry-run past line 100
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    first = capsys.readouterr().out.splitlines()[:30]
    for option in ("--sweep", "--cluster", "--dry-run"):
        assert any(line.lstrip().startswith(option + " ") for line in first), (option, "\n".join(first))


@pytest.mark.parametrize("command", ["submit", "sweep", "tune"])
def test_every_option_of_a_submitting_command_sits_in_a_named_group(command: str) -> None:
    _, commands = build_parser()
    parser = commands[command]
    for group in parser._action_groups:
        if group.title in UNNAMED:
            shown = [a for a in group._group_actions if a.help != argparse.SUPPRESS]
            assert not shown, f"{command}: {[a.option_strings for a in shown]} in no named group"


def test_pack_retry_and_right_size_are_explained_once_in_sweep_help(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    text = capsys.readouterr().out
    for option in ("--pack ", "--retry ", "--right-size "):
        assert sum(line.lstrip().startswith(option) for line in text.splitlines()) == 1, option


def test_submit_sweep_and_tune_share_the_cluster_and_bundle_groups() -> None:
    _, commands = build_parser()
    titles = {c: [g.title for g in commands[c]._action_groups] for c in ("submit", "sweep", "tune")}
    for shared in ("cluster", "bundle", "job resources", "checks before queueing", "profiling"):
        assert all(shared in t for t in titles.values()), (shared, titles)

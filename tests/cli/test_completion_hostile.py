"""Completion never lets the shell expand a candidate, drops candidates with control characters, quotes the
rest, and never imports a module from the folder where TAB is pressed (issue 44)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from hpc_runner.cli import main

HOSTILE = "$(touch pwned)"


def _script(tmp_path: Path, capsys, shell: str) -> Path:
    assert main(["completion", shell]) == 0
    script = tmp_path / f"hpc-runner.{shell}"
    script.write_text(capsys.readouterr().out)
    return script


def _hostile_folder(tmp_path: Path) -> Path:
    """A folder named $(touch pwned) holding a bundle, a profile and a folder of that name, and a module that
    shadows hpc_runner and yaml."""
    cwd = tmp_path / HOSTILE
    (cwd / "bundles" / HOSTILE / "configs").mkdir(parents=True)
    (cwd / "bundles" / "bad\nname" / "configs").mkdir(parents=True)
    (cwd / HOSTILE).mkdir()
    (cwd / "clusters").mkdir()
    (cwd / "clusters" / f"{HOSTILE}.yaml").write_text("extends: slurm\n")
    for shadow in ("hpc_runner", "yaml"):
        (cwd / shadow).mkdir()
        (cwd / shadow / "__init__.py").write_text("open('pwned', 'w').close()\n")
    return cwd


def _bash(script: Path, cwd: Path, *words: str) -> list[str]:
    line = " ".join(shlex.quote(w) for w in words)
    program = (f"source {shlex.quote(str(script))}\n"
               f"COMP_WORDS=(hpc-runner {line}); COMP_CWORD={len(words)}\n"
               f"COMP_LINE={shlex.quote('hpc-runner ' + ' '.join(words))}; COMP_POINT=${{#COMP_LINE}}\n"
               "_hpcr_complete hpc-runner \"${COMP_WORDS[COMP_CWORD]}\" \"${COMP_WORDS[COMP_CWORD-1]}\"\n"
               "printf '%s\\n' \"${COMPREPLY[@]}\"\n")
    env = {**os.environ, "HPCR_CLUSTER_PATH": str(cwd / "clusters"), "HPCR_BUNDLE_PATH": str(cwd / "bundles")}
    res = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=60, cwd=cwd, env=env)
    assert res.returncode == 0, res.stderr
    return res.stdout.splitlines()


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_completion_in_a_hostile_folder_expands_nothing_and_quotes_every_candidate(
        tmp_path: Path, capsys) -> None:
    script = _script(tmp_path, capsys, "bash")
    cwd = _hostile_folder(tmp_path)
    bundles = _bash(script, cwd, "run", "--bundle", "")
    profiles = _bash(script, cwd, "sweep", "--cluster", "")
    folders = _bash(script, cwd, "status", "")
    ids = _bash(script, cwd, "run", "--bundle", f"bundles/{HOSTILE}", "--x")
    assert not (cwd / "pwned").exists() and not (tmp_path / "pwned").exists()
    quoted = "\\$\\(touch\\ pwned\\)"
    assert quoted in bundles and quoted in profiles, (bundles, profiles)
    assert HOSTILE not in bundles and HOSTILE not in profiles  # never inserted as words the shell would run
    assert not any("bad" in c or c == "name" for c in bundles)  # the name with a newline is dropped
    assert HOSTILE in folders  # folders: bash quotes them itself (-o filenames)
    assert [i for i in ids if i] == []


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bundle_ids_with_shell_words_or_control_characters_are_quoted_or_dropped(tmp_path: Path, capsys) -> None:
    script = _script(tmp_path, capsys, "bash")
    cwd = _hostile_folder(tmp_path)
    bundle = Path(__file__).resolve().parents[2] / "bundles" / "synthetic_seg"
    shutil.copytree(bundle, cwd / "b", ignore=shutil.ignore_patterns("runs", "*.pt", "__pycache__"))
    train = next((cwd / "b" / "configs").glob("train.*"))
    text = train.read_text()
    extra = '\n"$(touch pwned)": 1\n"esc\\u001b[31m": 2\n' if train.suffix != ".json" else None
    if extra is None:
        pytest.skip("the example's config is JSON")
    train.write_text(text + extra)
    ids = _bash(script, cwd, "run", "--bundle", "b", "--")
    assert not (cwd / "pwned").exists()
    assert "--max_epochs" in ids, ids  # the real hpc_runner answered, not the folder's shadow module
    assert "--\\$\\(touch\\ pwned\\)" in ids and not any("\x1b" in i for i in ids), ids


@pytest.mark.skipif(shutil.which("zsh") is None, reason="needs zsh")
def test_zsh_completion_in_a_hostile_folder_expands_nothing(tmp_path: Path, capsys) -> None:
    script = _script(tmp_path, capsys, "zsh")
    cwd = _hostile_folder(tmp_path)
    program = (f"autoload -U compinit && compinit -u -d '{tmp_path}/zcompdump'\nsource '{script}'\n"
               "compadd() { while [[ $1 == -* && $1 != -- ]]; do shift; done; [[ $1 == -- ]] && shift\n"
               "  print -l -- $@ }\n"
               "_files() { : }\n"
               "_hpcr_zsh_profiles\n_hpcr_zsh_bundles\n"
               f"words=(hpc-runner run --bundle 'bundles/{HOSTILE}' --x); PREFIX=--x\n_hpcr_zsh_ids\n")
    res = subprocess.run(["zsh", "-c", program], capture_output=True, text=True, timeout=60, cwd=cwd,
                         env={**os.environ, "HPCR_CLUSTER_PATH": str(cwd / "clusters"),
                              "HPCR_BUNDLE_PATH": str(cwd / "bundles")})
    assert res.returncode == 0, res.stderr
    assert not (cwd / "pwned").exists()
    assert HOSTILE in res.stdout.splitlines() and "bad" not in res.stdout  # compadd quotes it when inserting

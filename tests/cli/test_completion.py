"""Shell completion, driven as bash drives it: the generated script is sourced and its completer called."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hpc_runner.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _complete(script: Path, *words: str, cwd: Path = ROOT, env: dict[str, str] | None = None) -> list[str]:
    """COMPREPLY for the command line ``hpc-runner WORDS`` (the last word being completed)."""
    line = " ".join(f"'{w}'" for w in words)
    program = (f"source {script}\n"
               f"fn=$(complete -p hpc-runner | sed -E 's/.*-F ([^ ]+) .*/\\1/')\n"
               f"COMP_WORDS=(hpc-runner {line}); COMP_CWORD={len(words)}\n"
               f"COMP_LINE=\"hpc-runner {' '.join(words)}\"; COMP_POINT=${{#COMP_LINE}}\n"
               "$fn hpc-runner \"${COMP_WORDS[COMP_CWORD]}\" \"${COMP_WORDS[COMP_CWORD-1]}\"\n"
               "printf '%s\\n' \"${COMPREPLY[@]}\"\n")
    res = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=30, cwd=cwd,
                         env={**os.environ, **(env or {})})
    assert res.returncode == 0, res.stderr
    return [w.strip() for w in res.stdout.splitlines() if w.strip()]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_completes_commands_options_and_choices_from_the_parsers(tmp_path: Path, capsys) -> None:
    assert main(["completion", "bash"]) == 0
    script = tmp_path / "hpc-runner.bash"
    script.write_text(capsys.readouterr().out)
    assert {"sweep", "submit", "status"} <= set(_complete(script, "s"))
    assert _complete(script, "sweep", "--clu") == ["--cluster"]
    assert "--max-submit-calls" in _complete(script, "sweep", "--max")
    assert set(_complete(script, "completion", "")) == {"bash", "zsh", "tcsh"}


def test_zsh_and_tcsh_scripts_are_made_and_a_shell_we_do_not_know_is_refused(capsys) -> None:
    for shell, marker in (("zsh", "#compdef hpc-runner"), ("tcsh", "complete hpc-runner")):
        assert main(["completion", shell]) == 0
        assert marker in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        main(["completion", "fish"])
    assert exit_.value.code == 2 and "invalid choice: 'fish'" in capsys.readouterr().err


@pytest.fixture
def bash_script(tmp_path: Path, capsys) -> Path:
    """The bash script ``hpc-runner completion bash`` prints."""
    assert main(["completion", "bash"]) == 0
    script = tmp_path / "hpc-runner.bash"
    script.write_text(capsys.readouterr().out)
    return script


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_completes_profiles_bundles_folders_and_the_bundle_s_own_ids(bash_script: Path, tmp_path: Path) -> None:
    clusters = tmp_path / "clusters"
    clusters.mkdir()
    (clusters / "mygpu.yaml").write_text("extends: slurm\n")
    env = {"HPCR_CLUSTER_PATH": str(clusters), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    assert {"jade", "local", "slurm", "mygpu"} <= set(_complete(bash_script, "sweep", "--cluster", "", env=env))
    assert _complete(bash_script, "submit", "--cluster", "my", env=env) == ["mygpu"]
    assert "synthetic_seg" in _complete(bash_script, "run", "--bundle", "synth")  # a name on ./bundles
    # the bundle's ids after --, as bash shows them after a colon (the part after the last : is completed)
    bundle = "bundles/synthetic_seg"
    assert "--max_epochs" in _complete(bash_script, "run", "training", "--bundle", bundle, "--max_ep")
    assert {"_target_", "lr"} <= set(_complete(bash_script, "sweep", "--bundle", bundle, "--optimizer::"))
    assert _complete(bash_script, "status", "--bundle", bundle, "--max_ep") == []  # status takes no ids
    (tmp_path / "runs" / "lr-sweep").mkdir(parents=True)
    assert _complete(bash_script, "status", "runs/lr", cwd=tmp_path) == ["runs/lr-sweep"]


@pytest.mark.skipif(shutil.which("zsh") is None, reason="needs zsh")
def test_zsh_adds_profiles_and_the_bundle_s_own_ids(tmp_path: Path, capsys) -> None:
    assert main(["completion", "zsh"]) == 0
    script = tmp_path / "_hpc-runner"
    script.write_text(capsys.readouterr().out)
    clusters = tmp_path / "clusters"
    clusters.mkdir()
    (clusters / "mygpu.yml").write_text("extends: slurm\n")
    # compadd and _files stand in for zsh's completion widgets (they need a line editor): they print their words
    program = (f"autoload -U compinit && compinit -u -d {tmp_path}/zcompdump\nsource {script}\n"
               "compadd() { while [[ $1 == -* && $1 != -- ]]; do shift; done; [[ $1 == -- ]] && shift\n"
               "  print -l -- $@ }\n"
               "_files() { : }\n"
               "_hpcr_zsh_profiles\n"
               "words=(hpc-runner run --bundle bundles/synthetic_seg --max_ep); PREFIX=--max_ep\n_hpcr_zsh_ids\n")
    res = subprocess.run(["zsh", "-c", program], capture_output=True, text=True, timeout=60, cwd=ROOT,
                         env={**os.environ, "HPCR_CLUSTER_PATH": str(clusters),
                              "XDG_CONFIG_HOME": str(tmp_path / "config")})
    words = res.stdout.split()
    assert res.returncode == 0, res.stderr
    assert {"jade", "local", "slurm", "mygpu"} <= set(words) and "--max_epochs" in words, res.stdout


def _shell_start_s(startup: str, runs: int = 5) -> float:
    """The fastest of ``runs`` starts of a bash that runs ``startup``."""
    import time

    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(["bash", "--norc", "--noprofile", "-c", startup], check=True, timeout=30)
        best = min(best, time.perf_counter() - start)
    return best


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_completion_file_adds_under_a_tenth_of_a_second_to_a_shell_start(tmp_path: Path, capsys) -> None:
    # 6ca9a4e's advice, eval "$(hpc-runner completion bash)" in ~/.bashrc, started Python in every shell (~0.9 s)
    assert main(["completion", "bash"]) == 0
    script = tmp_path / "hpc-runner"  # as written to ~/.local/share/bash-completion/completions/hpc-runner
    script.write_text(capsys.readouterr().out)
    added = _shell_start_s(f"source {script}") - _shell_start_s(":")
    assert added < 0.1, f"sourcing the completion script adds {added:.3f} s to a shell's start"
    readme = (ROOT / "README.md").read_text()
    assert "completion bash > ~/.local/share/bash-completion/completions/hpc-runner" in readme
    # first hour, again (issue 47): the file's own head (shtab's) said to copy it to ~/.local/share/bash_completion/
    # and add a `source` line to ~/.bashrc
    head = script.read_text().split("\n\n", 1)[0]
    assert "bash-completion/completions/hpc-runner" in head and "bash_completion/" not in head, head
    assert 'eval "$(hpc-runner completion bash)"' not in readme


def test_the_readme_installs_the_cpu_wheel_of_torch_on_a_machine_without_a_gpu() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in readme

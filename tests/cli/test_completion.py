"""Shell completion, driven as bash drives it: the generated script is sourced and its completer called."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from hpc_runner.cli import main


def _complete(script: Path, *words: str) -> list[str]:
    """COMPREPLY for the command line ``hpc-runner WORDS`` (the last word being completed)."""
    line = " ".join(f"'{w}'" for w in words)
    program = (f"source {script}\n"
               f"fn=$(complete -p hpc-runner | sed -E 's/.*-F ([^ ]+) .*/\\1/')\n"
               f"COMP_WORDS=(hpc-runner {line}); COMP_CWORD={len(words)}\n"
               f"COMP_LINE=\"hpc-runner {' '.join(words)}\"; COMP_POINT=${{#COMP_LINE}}\n"
               "$fn hpc-runner \"${COMP_WORDS[COMP_CWORD]}\" \"${COMP_WORDS[COMP_CWORD-1]}\"\n"
               "printf '%s\\n' \"${COMPREPLY[@]}\"\n")
    res = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=30)
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

"""Progress bars only on a terminal: a run whose stderr is a file (a batch log) gets no tqdm redraws. The end to
end check is in tests/test_getting_started.py: every command there runs with its output in a pipe."""

from __future__ import annotations

import io
from pathlib import Path

from hpc_runner.progress_bars import no_bars_without_a_terminal

EXAMPLE = Path(__file__).resolve().parents[2] / "bundles" / "synthetic_seg"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_bars_go_off_only_without_a_terminal_and_a_user_s_own_setting_wins() -> None:
    env: dict[str, str] = {}
    assert no_bars_without_a_terminal(env, io.StringIO()) and env == {"TQDM_DISABLE": "1"}
    env = {}
    assert not no_bars_without_a_terminal(env, Terminal()) and env == {}
    env = {"TQDM_DISABLE": ""}  # the user asked for bars in the log
    assert not no_bars_without_a_terminal(env, io.StringIO()) and env == {"TQDM_DISABLE": ""}

"""Progress bars only on a terminal: a run whose stderr is a file (a batch log) gets no tqdm redraws."""

from __future__ import annotations

import io
import os
import subprocess
import sys
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


def test_a_run_logged_to_a_file_has_no_carriage_returns(tmp_path: Path) -> None:
    # MONAI's CacheDataset draws "Loading dataset" with tqdm: one \r redraw per item without this
    env = {k: v for k, v in os.environ.items() if k != "TQDM_DISABLE"}
    with (tmp_path / "err.log").open("w") as err:
        res = subprocess.run([sys.executable, "-m", "hpc_runner", "run", "training", "--bundle", str(EXAMPLE),
                              "--max_epochs", "1", "--num_train", "2", "--num_val", "1", "--image_size", "32",
                              "--output_dir", "r", "--dataset_dir", "d"], cwd=tmp_path, env=env, stdout=err,
                             stderr=err, timeout=300)
    log = (tmp_path / "err.log").read_text(errors="replace")
    assert res.returncode == 0, log[-3000:]
    assert "\r" not in log and "Loading dataset" not in log, log[-3000:]

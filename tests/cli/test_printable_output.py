"""Text from records, logs and bundles reaches the terminal without its control characters, whichever print
writes it: the CLI's stdout and stderr pass hpc_runner.control_chars' filter while a command runs."""

from __future__ import annotations

import io
import sys
from pathlib import Path

from hpc_runner.cli import main
from hpc_runner.control_chars import PrintableStream, printable

HOSTILE = "\x1b]0;pwned\x07boom\x1b[2J\rhidden\u202egnp.exe\x9b31m"


def test_printable_shows_every_control_but_newline_and_tab():
    shown = printable(HOSTILE + "\n\tend")
    assert shown == "\\x1b]0;pwned\\x07boom\\x1b[2J\\x0dhidden\\u202egnp.exe\\x9b31m\n\tend"
    assert printable("\rbar 50%", keep_cr=True) == "\rbar 50%"  # a progress bar's redraw on stderr


def test_a_failed_runs_error_text_reaches_status_output_escaped(tmp_path: Path, capsys, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.yaml").write_text("status: failed\n")
    (run / "error.txt").write_text(f"Traceback (most recent call last):\nValueError: {HOSTILE}\n")
    monkeypatch.chdir(tmp_path)
    assert main(["status", "run"]) == 0
    out = capsys.readouterr().out
    assert "ValueError: \\x1b]0;pwned\\x07boom" in out
    assert not any(c in out for c in "\x1b\x07\r\u202e\x9b")


def test_an_error_paragraph_quoting_a_hostile_record_is_printed_escaped(tmp_path: Path, capsys, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.yaml").write_text(f"status: [{HOSTILE!r}\n")  # not YAML: the error quotes the line
    (run / f"x{HOSTILE[:5]}").mkdir()
    monkeypatch.chdir(tmp_path)
    code = main(["status", str(run / f"x{HOSTILE[:5]}")])
    err = capsys.readouterr().err
    assert code == 2 and "\x1b" not in err and "\\x1b" in err


def test_the_streams_are_the_callers_again_after_the_command(capsys):
    before = sys.stdout, sys.stderr
    main(["completion", "bash"])
    assert (sys.stdout, sys.stderr) == before


def test_what_hpc_runner_means_as_a_control_goes_past_the_filter():
    raw = io.StringIO()
    stream = PrintableStream(raw)
    stream.write("table \x1b[31m\n")
    stream.unfiltered.write("\x1b[H\x1b[2J")  # report --watch clearing the screen
    assert raw.getvalue() == "table \\x1b[31m\n\x1b[H\x1b[2J"

"""A command ends with its heap frozen (no last garbage collection), and its records are complete."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

# The atexit hook registered first runs last (LIFO), so it sees what the entry point's hook did.
PROBE = (
    "import atexit, gc, runpy, sys\n"
    "atexit.register(lambda: print('frozen at exit:', gc.get_freeze_count() > 0, file=sys.stderr))\n"
    "sys.argv = ['hpc_runner', *sys.argv[1:]]\n"
    "runpy.run_module('hpc_runner', run_name='__main__', alter_sys=True)\n"
)
RUN = ("run", "--config_file", "train.json", "--output_dir", "r")  # the bundle's train.json, as PROBE's argv


def python(cwd: Path, code: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -c CODE ARGS`` in a fresh interpreter in ``cwd``; its output captured as text."""
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def test_a_run_through_the_entry_point_freezes_the_heap_at_exit_and_leaves_a_complete_run_dir(tmp_path: Path) -> None:
    (tmp_path / "train.json").write_text(json.dumps({"run": ["$print('one line', flush=True)"]}))
    res = python(tmp_path, PROBE, *RUN)
    assert res.returncode == 0, res.stderr
    assert "one line" in res.stdout
    assert res.stderr.strip().endswith("frozen at exit: True"), res.stderr
    assert yaml.safe_load((tmp_path / "r" / "run.yaml").read_text())["status"] == "completed"


def test_main_called_in_process_leaves_the_collector_alone(tmp_path: Path) -> None:
    code = ("import atexit, gc, sys\n"
            "from hpc_runner.cli import main\n"
            "atexit.register(lambda: print('frozen at exit:', gc.get_freeze_count() > 0, file=sys.stderr))\n"
            "main(['--help'])\n")
    res = python(tmp_path, code, timeout=60)
    assert res.returncode == 0 and "frozen at exit: False" in res.stderr, res.stderr


# a collection between the run's end and the exit hook: the case the flush at failure is for
COLLECT_FIRST = PROBE.replace(
    "runpy.run_module('hpc_runner', run_name='__main__', alter_sys=True)\n",
    "try:\n    runpy.run_module('hpc_runner', run_name='__main__', alter_sys=True)\n"
    "finally:\n    print('collected before exit:', gc.collect() > 0, file=sys.stderr)\n",
)


@pytest.mark.parametrize("probe", [PROBE, COLLECT_FIRST], ids=["exit", "collected-before-exit"])
def test_a_failed_run_loses_no_write_of_a_buffered_file_held_in_a_reference_cycle(tmp_path: Path, probe) -> None:
    """A config item holds a buffered file with 8 bytes not yet flushed, in a reference cycle; the run fails.
    Once the run's config is dropped the cycle is garbage, and CPython's collection may finalize the raw
    file before its buffer and lose the bytes. The runner flushes open writers when a run fails (the config
    still holds them), and the exit hook flushes again, then freezes the heap."""
    keep = "$(lambda cycle: (cycle.append(cycle), cycle[0].write(b'12345678'), cycle)[-1])([open('out.bin', 'wb')])"
    (tmp_path / "train.json").write_text(json.dumps({"keep": keep, "run": ["@keep", "$1 / 0"]}))
    res = python(tmp_path, probe, *RUN)
    assert res.returncode == 1, res.stderr
    assert res.stderr.strip().endswith("frozen at exit: True"), res.stderr
    assert (tmp_path / "out.bin").read_bytes() == b"12345678"


# what the run itself sees, printed by the bundle's one line (hpc_runner/heap.py): the full collections CPython
# ran while the command started, the thresholds the loop runs under, and whether the imports are frozen
SEEN = ("$print('seen:', __import__('gc').get_stats()[2]['collections'], list(__import__('gc').get_threshold()), "
        "__import__('gc').get_freeze_count() > 0, flush=True)")


def test_a_command_starts_without_a_full_collection_and_its_run_finds_the_imports_frozen(tmp_path: Path) -> None:
    (tmp_path / "train.json").write_text(json.dumps({"run": [SEEN]}))
    res = python(tmp_path, PROBE, *RUN)
    assert res.returncode == 0, res.stderr
    # CPython's thresholds (700, 10, 10) run ~8 full collections while torch and MONAI are imported
    assert "seen: 0 [700, 10, 10] True" in res.stdout, res.stdout


def test_a_run_called_in_process_keeps_the_callers_collector(tmp_path: Path) -> None:
    (tmp_path / "train.json").write_text(json.dumps({"run": [SEEN]}))
    code = ("import gc, sys\ngc.set_threshold(900, 11, 12)\nfrom hpc_runner.cli import main\n"
            "rc = main(['run', '--config_file', 'train.json', '--output_dir', 'r'])\n"
            "print('after:', rc, gc.get_threshold(), gc.get_freeze_count())\n")
    res = python(tmp_path, code)
    assert res.returncode == 0, res.stderr
    assert "[900, 11, 12] False" in res.stdout and "after: 0 (900, 11, 12) 0" in res.stdout, res.stdout


def test_a_buffered_writer_frozen_with_the_imports_is_still_flushed(tmp_path: Path) -> None:
    """hpc_runner/heap.py freezes the heap once a run's imports are done, and ``gc.get_objects`` leaves frozen
    objects out: a file opened before then, with bytes still in its buffer, is flushed all the same."""
    code = ("import gc, os\nfrom hpc_runner.quick_exit import flush_open_files\n"
            "f = open('out.bin', 'wb')\nf.write(b'12345678')\ngc.freeze()\nflushed = flush_open_files(frozen=True)\n"
            "print('on disk:', os.path.getsize('out.bin'), 'still frozen:', gc.get_freeze_count() > 0, flush=True)\n"
            "os._exit(0)\n")
    res = python(tmp_path, code, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "on disk: 8 still frozen: True" in res.stdout, res.stdout


def test_a_failed_runs_flush_leaves_its_garbage_collectable(tmp_path: Path) -> None:
    """The runner flushes open files when a run fails, and a packed task goes on to its next point: that flush must
    not freeze the failed point's objects (a frozen cycle is never freed), and still flushes its unfrozen writer."""
    code = ("import gc, os\nfrom hpc_runner.quick_exit import flush_open_files\n"
            "gc.freeze()\nfrozen = gc.get_freeze_count()\n"
            "class Node:\n    pass\n"
            "a, b = Node(), Node()\na.other, b.other = b, a\nf = open('out.bin', 'wb')\nf.write(b'123')\na.f = f\n"
            "flushed = flush_open_files()\ndel a, b\n"
            "print('on disk:', os.path.getsize('out.bin'), 'freeze count kept:', gc.get_freeze_count() == frozen,"
            " 'cycle freed:', gc.collect() >= 2, flush=True)\n"
            "os._exit(0)\n")
    res = python(tmp_path, code, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "on disk: 3 freeze count kept: True cycle freed: True" in res.stdout, res.stdout


def test_a_bundle_that_turned_the_collector_off_still_gets_its_thresholds_back(tmp_path: Path) -> None:
    """heap.py's settle with the collector off (a bundle's ``$gc.disable()``): CPython's thresholds come back, nothing
    is frozen, and a second settle does nothing."""
    code = ("import gc\nfrom hpc_runner import heap\ngc.set_threshold(700, 10, 10)\n"
            "heap.collect_less_while_importing()\nraised = gc.get_threshold()\ngc.disable()\n"
            "print('raised', raised, 'settled', heap.settle_after_imports(), gc.get_threshold(), gc.get_freeze_count(),"
            " 'again', heap.settle_after_imports())\n")
    res = python(tmp_path, code, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "raised (20000, 20, 20) settled True (700, 10, 10) 0 again False" in res.stdout, res.stdout

"""One bounded reader for every file hpc-runner parses (issue 32, item 4).

A config, a macro's file, a MANIFEST, a metadata file, an args file, a record or a log that is a device, a
named pipe, a socket or a folder is bad input naming it: ``os.stat`` is asked before the file is opened,
so a FIFO never blocks, and ``/dev/zero`` is never read. Through the real CLI each attack exits 2 with one
paragraph and no traceback, within 10 s and 1 GiB of address space.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hpc_runner.errors import BundleError, UserError
from hpc_runner.records.read import RecordError, read_record_bytes, read_record_text

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")

ROOT = Path(__file__).resolve().parents[2]
META = ROOT / "bundles" / "synthetic_seg" / "configs" / "metadata.json"


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run hpc-runner with 1 GiB of address space; TimeoutExpired (a failure) after 10 s."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HPCR_")}
    return subprocess.run([sys.executable, "-m", "hpc_runner", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=10, preexec_fn=_limit)


def refused(res: subprocess.CompletedProcess[str], *culprits: str) -> str:
    """Assert exit 2 with one error paragraph naming each culprit and no traceback; return the paragraph."""
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    assert "Traceback" not in res.stderr + res.stdout
    errors = [line for line in res.stderr.splitlines() if ": error: " in line]
    assert len(errors) == 1, res.stderr
    for culprit in culprits:
        assert culprit in errors[0], errors[0]
    return errors[0]


def small_bundle(root: Path) -> Path:
    (root / "configs").mkdir(parents=True)
    (root / "configs" / "train.json").write_text(json.dumps({"lr": 0.1}))
    (root / "configs" / "metadata.json").write_text(META.read_text())
    return root


def finishes(fn: Callable[[], Any], fifo: Path, seconds: float = 5) -> Any:
    """Return ``fn()``, failing if it blocks on ``fifo`` (then a writer is opened once, to let it go)."""
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # handed to the test
            out["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # a reader is waiting: this open succeeds
        thread.join(5)
        pytest.fail(f"blocked on the named pipe {fifo}")
    if "error" in out:
        raise out["error"]
    return out.get("value")


# ------------------------------------------------------------------------------------------- the CLI attacks

def test_config_file_linked_to_dev_zero_is_refused_before_it_is_read(tmp_path: Path):
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    refused(cli("config", "--config_file", "zero.json", cwd=tmp_path), "zero.json", "character device")


def test_a_macro_naming_a_named_pipe_is_refused_without_blocking(tmp_path: Path):
    os.mkfifo(tmp_path / "fifo.json")
    (tmp_path / "m.json").write_text(json.dumps({"a": "%fifo.json::x"}))
    refused(cli("config", "--config_file", "m.json", cwd=tmp_path), "fifo.json", "named pipe")


def test_a_manifest_linked_to_dev_zero_is_refused(tmp_path: Path):
    bundle = small_bundle(tmp_path / "b")
    (bundle / "MANIFEST").symlink_to("/dev/zero")
    refused(cli("config", "--bundle", str(bundle), cwd=tmp_path), "MANIFEST", "character device")


def test_metadata_and_args_files_that_are_not_files_are_refused(tmp_path: Path):
    bundle = small_bundle(tmp_path / "b")
    (bundle / "configs" / "metadata.json").unlink()
    os.mkfifo(bundle / "configs" / "metadata.json")
    refused(cli("config", "--bundle", str(bundle), cwd=tmp_path), "metadata.json", "named pipe")
    (tmp_path / "args.json").symlink_to("/dev/zero")
    refused(cli("config", "--config_file", str(bundle / "configs" / "train.json"), "--args_file", "args.json",
                cwd=tmp_path), "args.json")


def test_a_config_of_millions_of_values_is_refused_before_it_is_built(tmp_path: Path):
    (tmp_path / "dense.json").write_text('{"a": [' + ",".join(["0"] * 300_000) + "]}")
    refused(cli("config", "--config_file", "dense.json", cwd=tmp_path), "dense.json", "200,000 values")


def test_aliases_of_a_large_string_are_refused_before_they_are_printed(tmp_path: Path):
    # 2,000 aliases are 2,000 nodes, far under the alias node bound, but 2 GB of text
    (tmp_path / "bomb.yaml").write_text("a: &a " + "x" * 1_000_000 + "\nb: [" + ", ".join(["*a"] * 2000) + "]\n")
    refused(cli("config", "--config_file", "bomb.yaml", cwd=tmp_path), "bomb.yaml:2", "alias *a", "16 MiB")


# ------------------------------------------------------------------------------------------- the reader itself

@pytest.mark.parametrize("kind", ["fifo", "device", "folder"])
def test_the_reader_names_what_is_not_a_regular_file_and_never_opens_a_fifo(tmp_path: Path, kind: str):
    path = tmp_path / "sweep.yaml"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()
    with pytest.raises(RecordError, match="not a regular file") as err:
        finishes(lambda: read_record_bytes(path, "sweep record"), path)
    assert str(path) in err.value.paragraph()
    assert read_record_text(tmp_path / "absent.yaml") is None


def test_the_reader_raises_the_callers_error_and_bounds_the_size(tmp_path: Path):
    big = tmp_path / "big.json"
    big.write_bytes(b" " * 2048)
    with pytest.raises(BundleError, match="larger than 1 KiB"):
        read_record_text(big, "MANIFEST", 1024, error=BundleError)


def test_bundle_files_and_metadata_that_are_pipes_do_not_block(tmp_path: Path):
    from hpc_runner.registry.manifest import sha256_file
    from hpc_runner.registry.search import read_entry

    bundle = small_bundle(tmp_path / "b")
    fifo = bundle / "configs" / "metadata.json"
    fifo.unlink()
    os.mkfifo(fifo)
    assert finishes(lambda: read_entry(bundle, tmp_path, 0), fifo) is None  # `list`: no bundle, not a hang
    with pytest.raises(BundleError, match="named pipe"):
        finishes(lambda: sha256_file(fifo), fifo)  # `pack`/`verify`: a pipe in the bundle


def test_the_logs_status_reads_do_not_block_on_a_named_pipe(tmp_path: Path):
    from hpc_runner.jobs import states

    os.mkfifo(tmp_path / "run.yaml")
    os.mkfifo(tmp_path / "error.txt")
    os.mkfifo(tmp_path / "job.err")
    assert finishes(lambda: states.run_status(tmp_path), tmp_path / "run.yaml") is None
    assert finishes(lambda: states._first_exception(tmp_path / "error.txt"), tmp_path / "error.txt") is None
    from hpc_runner.scheduler.job_logs import tail_line  # a job log's tail, as status reads a failed job's

    assert finishes(lambda: tail_line(tmp_path / "job.err"), tmp_path / "job.err") is None


def test_a_regular_file_still_reads(tmp_path: Path):
    from hpc_runner.jobs import states

    (tmp_path / "run.yaml").write_text("status: completed\n")
    (tmp_path / "error.txt").write_text("Traceback (most recent call last):\nValueError: boom\n")
    assert states.run_status(tmp_path) == "completed"
    assert states._first_exception(tmp_path / "error.txt") == "ValueError: boom"
    with pytest.raises(UserError):
        read_record_text(tmp_path, "run record")  # a folder


def test_summaries_and_gpu_samples_of_a_shared_sweep_folder_do_not_block(tmp_path: Path):
    from hpc_runner.jobs.usage import GPU_SAMPLES_FILE, sampled_gpu
    from hpc_runner.pages.rundata import _read_json
    from hpc_runner.pipeline.selection import read_summary
    from hpc_runner.sweep.collect import _summary

    summary = tmp_path / "summary.json"
    os.mkfifo(summary)
    os.mkfifo(tmp_path / GPU_SAMPLES_FILE)
    assert finishes(lambda: _summary(tmp_path), summary) == {}  # collect
    assert finishes(lambda: read_summary(tmp_path), summary) == {}  # a select stage
    assert finishes(lambda: _read_json(summary), summary) == {}  # report
    assert finishes(lambda: sampled_gpu(tmp_path), tmp_path / GPU_SAMPLES_FILE) is None  # status, report
    summary.unlink()
    summary.write_text('{"best_metric": 0.5}')
    assert _summary(tmp_path) == read_summary(tmp_path) == _read_json(summary) == {"best_metric": 0.5}


def test_a_file_over_its_kinds_bound_is_refused_by_its_size_before_a_byte_is_read(tmp_path: Path, monkeypatch):
    """A 600 MB (sparse) record is refused at once, not read up to the bound first; a run record's bound is 16 MiB,
    so a 64 MB one is refused too (reading it would grow memory by its size, twice over once decoded)."""
    from hpc_runner.records import read as rr
    from hpc_runner.records.rundir import RunDir

    reads: list[int] = []
    real_read = os.read
    for size in (600 << 20, 64 << 20):
        path = tmp_path / f"{size}" / "run.yaml"
        path.parent.mkdir()
        with open(path, "wb") as f:
            f.truncate(size)
        monkeypatch.setattr(rr.os, "read", lambda fd, n: reads.append(n) or real_read(fd, n))
        with pytest.raises(RecordError, match="larger than 16 MiB") as err:
            RunDir(path.parent).record()
        monkeypatch.setattr(rr.os, "read", real_read)
        assert reads == [] and str(path) in err.value.paragraph()
    ledger = tmp_path / "sweep.yaml"  # a sweep's ledger may be larger (100,000 points: ~30 MB)
    ledger.write_bytes(b"{}" + b" " * (20 << 20))
    assert len(read_record_bytes(ledger, "sweep record", rr.LEDGER_MAX_BYTES)) == (20 << 20) + 2


def test_every_json_parse_of_the_record_reader_bounds_the_nesting(tmp_path: Path):
    """A kept cache, a JSON record or a JSON-lines line nested 100,000 deep: refused (a cache: none), never a
    RecursionError."""
    from hpc_runner.records.read import read_json_cache, read_json_lines, read_json_record

    deep = "[" * 100_000 + "]" * 100_000
    cache = tmp_path / "limits.json"
    cache.write_text('{"a": ' + deep + "}")
    assert read_json_cache(cache, "kept scheduler limits") == {}
    with pytest.raises(RecordError, match="levels deep"):
        read_json_record(cache, "run summary")
    lines = tmp_path / "metrics.jsonl"
    lines.write_text('{"step": 1}\n{"a": ' + deep + '}\n{"step": 2}\n')
    found = read_json_lines(lines)
    assert [r["step"] for r in found.records] == [1, 2] and found.damaged == [2]

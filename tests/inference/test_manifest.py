"""OutputManifest: what it trusts (size and sha256 match), what it names (truncated files, damaged lines)."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import pytest

from hpc_runner.inference.manifest import ManifestEntry, OutputManifest


def _output(folder: Path, name: str, data: bytes) -> ManifestEntry:
    (folder / name).write_bytes(data)
    return ManifestEntry(name.split(".")[0], name, len(data), hashlib.sha256(data).hexdigest(), {})


def test_recorded_case_with_its_file_intact_is_completed(tmp_path):
    entry = _output(tmp_path, "case_000.nii.gz", b"x" * 1000)
    OutputManifest(tmp_path).record(entry)
    assert OutputManifest(tmp_path).completed("case_000") == entry
    assert OutputManifest(tmp_path).completed("case_001") is None


def test_truncated_file_is_named_with_sizes_and_not_trusted(tmp_path):
    entry = _output(tmp_path, "case_000.nii.gz", b"x" * 1000)
    OutputManifest(tmp_path).record(entry)
    (tmp_path / "case_000.nii.gz").write_bytes(b"x" * 400)
    with pytest.warns(UserWarning, match=r"case_000\.nii\.gz: found 400 bytes, the manifest recorded 1000"):
        assert OutputManifest(tmp_path).completed("case_000") is None


def test_changed_file_of_the_same_size_is_named_and_not_trusted(tmp_path):
    entry = _output(tmp_path, "case_000.nii.gz", b"x" * 1000)
    OutputManifest(tmp_path).record(entry)
    (tmp_path / "case_000.nii.gz").write_bytes(b"y" * 1000)
    with pytest.warns(UserWarning, match=r"case_000\.nii\.gz: .*sha256 differs"):
        assert OutputManifest(tmp_path).completed("case_000") is None


def test_missing_file_is_named_and_not_trusted(tmp_path):
    entry = _output(tmp_path, "case_000.nii.gz", b"x" * 10)
    OutputManifest(tmp_path).record(entry)
    (tmp_path / "case_000.nii.gz").unlink()
    with pytest.warns(UserWarning, match="missing"):
        assert OutputManifest(tmp_path).completed("case_000") is None


def test_metrics_only_entry_is_completed_without_a_file(tmp_path):
    entry = ManifestEntry("case_000", None, None, None, {"dice": 0.5, "hd95": None})
    OutputManifest(tmp_path).record(entry)
    assert OutputManifest(tmp_path).completed("case_000") == entry


def test_damaged_line_is_named_and_the_others_kept(tmp_path):
    manifest = OutputManifest(tmp_path)
    manifest.record(_output(tmp_path, "a.nii.gz", b"a"))
    with open(manifest.path, "a") as f:
        f.write('{"case": "b", "file": "b.nii.gz", "si')  # a crash cut this line
    manifest.record(_output(tmp_path, "c.nii.gz", b"c"))
    with pytest.warns(UserWarning, match=r"manifest\.jsonl:2: damaged manifest line"):
        entries = OutputManifest.read_all(tmp_path)
    assert sorted(entries) == ["a", "c"]


def test_later_lines_win_and_every_shard_manifest_is_read(tmp_path):
    OutputManifest(tmp_path, "manifest-000-of-002.jsonl").record(ManifestEntry("a", None, None, None, {"d": 1.0}))
    OutputManifest(tmp_path, "manifest-001-of-002.jsonl").record(ManifestEntry("b", None, None, None, {"d": 2.0}))
    OutputManifest(tmp_path, "manifest-001-of-002.jsonl").record(ManifestEntry("b", None, None, None, {"d": 3.0}))
    entries = OutputManifest.read_all(tmp_path)
    assert entries["a"].metrics == {"d": 1.0} and entries["b"].metrics == {"d": 3.0}


def test_record_from_many_threads_gives_one_whole_line_each(tmp_path):
    manifest = OutputManifest(tmp_path)

    def work(t: int) -> None:
        for i in range(50):
            manifest.record(ManifestEntry(f"c{t}-{i}", None, None, None, {"x": float(i)}))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = manifest.path.read_text().splitlines()
    assert len(lines) == 400
    assert len(OutputManifest.read_all(tmp_path)) == 400

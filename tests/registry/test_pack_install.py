"""pack -> install into a shared dir -> another user lists and runs it by name; tampering; unsafe archives."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest
import yaml
from registry_helpers import EXAMPLE, TINY, copy_bundle, out

from hpc_runner.config.verify import check_packable
from hpc_runner.errors import BundleError
from hpc_runner.registry.archive import pack_bundle
from hpc_runner.registry.install import install_archive
from hpc_runner.registry.trust import manifest_record


def _publish(tmp_path: Path) -> dict[str, Path]:
    dev, group, user = tmp_path / "dev", tmp_path / "group" / "bundles", tmp_path / "user"
    user.mkdir()
    copy_bundle(EXAMPLE, dev / "bundles" / "synthetic_seg")
    return {"dev": dev, "group": group, "user": user, "dist": tmp_path / "dist",
            "archive": tmp_path / "dist" / "synthetic_seg-0.1.0.tar.gz", "installed": group / "synthetic_seg-0.1.0"}


@pytest.fixture
def shared(tmp_path: Path) -> dict[str, Path]:
    """A developer has packed synthetic_seg 0.1.0 and installed it into a group's shared dir."""
    dirs = _publish(tmp_path)
    pack_bundle(dirs["dev"] / "bundles" / "synthetic_seg", dirs["dist"])
    install_archive(dirs["archive"], dirs["group"])
    return dirs


def test_pack_install_list_and_load_by_name_from_another_user(cli, tmp_path: Path) -> None:
    dirs = _publish(tmp_path)
    proc = cli("pack", "synthetic_seg", "--out", dirs["dist"], cwd=dirs["dev"])
    assert proc.returncode == 0, out(proc)
    assert dirs["archive"].is_file() and str(dirs["archive"]) in proc.stdout
    proc = cli("install", dirs["archive"], "--to", dirs["group"], cwd=dirs["dev"])
    assert proc.returncode == 0, out(proc)
    assert "installed synthetic_seg 0.1.0" in proc.stdout and (dirs["installed"] / "MANIFEST").is_file()
    # another user: another cwd, the group dir on the search path
    path = str(dirs["group"])
    proc = cli("list", cwd=dirs["user"], bundle_path=path)
    assert proc.returncode == 0, out(proc)
    row = next(line for line in proc.stdout.splitlines() if str(dirs["installed"]) in line)
    assert row.split()[:3] == ["*", "synthetic_seg", "0.1.0"] and "A small 3D UNet" in row
    proc = cli("config", "--bundle", "synthetic_seg", "--max_epochs", "3", "--format", "json", cwd=dirs["user"],
               bundle_path=path)
    assert proc.returncode == 0, out(proc)
    config = json.loads(proc.stdout)
    assert config["max_epochs"] == 3 and config["_meta_"]["version"] == "0.1.0"


def _members(archive: Path) -> list[str]:
    with tarfile.open(archive) as tar:
        return tar.getnames()


def test_pack_is_reproducible_and_leaves_out_data_and_caches(tmp_path: Path) -> None:
    bundle = copy_bundle(EXAMPLE, tmp_path / "synthetic_seg")
    for rel in ("data/img000.nii.gz", "runs/x/log.txt", "scripts/__pycache__/m.pyc"):
        (bundle / rel).parent.mkdir(parents=True, exist_ok=True)
        (bundle / rel).write_bytes(b"x")
    first = pack_bundle(bundle, tmp_path / "a").archive
    second = pack_bundle(bundle, tmp_path / "b").archive
    assert first.read_bytes() == second.read_bytes()
    names = _members(first)
    assert "synthetic_seg-0.1.0/MANIFEST" in names and "synthetic_seg-0.1.0/configs/train.yaml" in names
    assert not any("/data/" in n or "/runs/" in n or "__pycache__" in n for n in names)
    assert all(n.startswith("synthetic_seg-0.1.0") for n in names)


def test_pack_refuses_a_bundle_that_does_not_load(tmp_path: Path) -> None:
    bundle = copy_bundle(EXAMPLE, tmp_path / "b")
    (bundle / "configs" / "train.yaml").write_text("a: '@missing'\nrun: []\n")
    with pytest.raises(BundleError, match="'@missing' refers to an id that is not in the config"):
        pack_bundle(bundle, tmp_path, check=check_packable)


@pytest.mark.parametrize("out_is", ["a file", "inside a file"])
def test_pack_out_naming_an_existing_file_exits_2_in_one_paragraph_and_writes_nothing(cli, tmp_path: Path,
                                                                                       out_is: str) -> None:
    """Issue 32: `pack --out FILE` gave a FileExistsError traceback."""
    (tmp_path / "notes.txt").write_text("mine")
    dest = tmp_path / "notes.txt" if out_is == "a file" else tmp_path / "notes.txt" / "dist"
    before = sorted(p.name for p in tmp_path.rglob("*"))
    proc = cli("pack", EXAMPLE, "--out", dest)
    assert proc.returncode == 2, out(proc)
    assert "Traceback" not in out(proc) and out(proc).count("error:") == 1
    assert f"--out {dest}" in proc.stderr and "existing file, not a folder" in proc.stderr
    assert "Expected --out naming a folder" in proc.stderr
    assert sorted(p.name for p in tmp_path.rglob("*")) == before and (tmp_path / "notes.txt").read_text() == "mine"


@pytest.mark.slow
def test_another_user_runs_it_by_name_with_overrides(cli, shared: dict[str, Path]) -> None:
    user = shared["user"]
    proc = cli("run", "--bundle", "synthetic_seg", *TINY, "--dataset_dir", user / "data", "--output_dir",
               user / "run", cwd=user, bundle_path=str(shared["group"]))
    assert proc.returncode == 0, out(proc)
    record = yaml.safe_load((user / "run" / "run.yaml").read_text())
    assert record["status"] == "completed"
    assert Path(record["bundle"]["dir"]) == shared["installed"].resolve()
    assert json.loads((user / "run" / "summary.json").read_text())["epochs"] == 1
    assert not (shared["installed"] / "data").exists()  # nothing written into the shared bundle


def test_install_defaults_to_the_first_search_dir(cli, shared: dict[str, Path], tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    proc = cli("install", shared["archive"], cwd=shared["user"], bundle_path=f"{first}:{second}")
    assert proc.returncode == 0, out(proc)
    assert (first / "synthetic_seg-0.1.0" / "MANIFEST").is_file() and not second.exists()
    proc = cli("install", shared["archive"], cwd=shared["user"])  # no HPCR_BUNDLE_PATH: ./bundles
    assert proc.returncode == 0 and (shared["user"] / "bundles" / "synthetic_seg-0.1.0").is_dir(), out(proc)


def test_same_version_identical_is_a_noop_different_is_refused(cli, shared: dict[str, Path], tmp_path: Path) -> None:
    proc = cli("install", shared["archive"], "--to", shared["group"])
    assert proc.returncode == 0 and "already installed with the same content" in proc.stdout, out(proc)
    changed = copy_bundle(EXAMPLE, tmp_path / "changed" / "synthetic_seg")
    with open(changed / "configs" / "train.yaml", "a") as f:
        f.write("# someone changed it but kept the version\n")
    proc = cli("pack", changed, "--out", tmp_path / "dist2")
    assert proc.returncode == 0, out(proc)
    before = (shared["installed"] / "configs" / "train.yaml").read_text()
    proc = cli("install", tmp_path / "dist2" / "synthetic_seg-0.1.0.tar.gz", "--to", shared["group"])
    assert proc.returncode == 2, out(proc)
    assert "already holds synthetic_seg 0.1.0 with different content" in proc.stderr
    assert "changed: configs/train.yaml" in proc.stderr and "new version" in proc.stderr
    assert (shared["installed"] / "configs" / "train.yaml").read_text() == before
    assert sorted(p.name for p in shared["group"].iterdir()) == ["synthetic_seg-0.1.0"]  # no temp dirs left


def test_versions_install_side_by_side(cli, shared: dict[str, Path], tmp_path: Path) -> None:
    newer = copy_bundle(EXAMPLE, tmp_path / "v2" / "synthetic_seg", version="0.2.0")
    archive = pack_bundle(newer, tmp_path / "dist3").archive
    assert archive.name == "synthetic_seg-0.2.0.tar.gz"
    proc = cli("install", archive, "--to", shared["group"])
    assert proc.returncode == 0, out(proc)
    assert sorted(p.name for p in shared["group"].iterdir()) == ["synthetic_seg-0.1.0", "synthetic_seg-0.2.0"]
    for spec, version in (("synthetic_seg", "0.2.0"), ("synthetic_seg@0.1.0", "0.1.0")):
        proc = cli("config", "--bundle", spec, "--id", "_meta_::version", "--format", "json",
                   cwd=shared["user"], bundle_path=str(shared["group"]))
        assert proc.returncode == 0 and json.loads(proc.stdout) == version, out(proc)


def test_tampered_copy_is_refused_naming_the_file(cli, shared: dict[str, Path]) -> None:
    installed = shared["installed"]
    with tarfile.open(shared["archive"]) as tar:  # the MANIFEST as packed, not as installed
        (member,) = [m for m in tar.getmembers() if m.name.endswith("/MANIFEST")]
        packed = tar.extractfile(member).read()
    assert manifest_record(installed) == {"sha256": hashlib.sha256(packed).hexdigest(), "matches": True,
                                          "differences": None}
    with open(installed / "configs" / "train.yaml", "a") as f:
        f.write("learning_rate: 0.5\n")
    (installed / "configs" / "metadata.json").rename(installed / "configs" / "meta.json.bak")
    (installed / "configs" / "metadata.json").write_text((installed / "configs" / "meta.json.bak").read_text())
    proc = cli("run", "--bundle", "synthetic_seg", *TINY, cwd=shared["user"], bundle_path=str(shared["group"]))
    assert proc.returncode == 2, out(proc)
    assert "no longer match its MANIFEST" in proc.stderr
    assert "changed: configs/train.yaml" in proc.stderr and "added: configs/meta.json.bak" in proc.stderr
    assert "--trust" in proc.stderr and not (shared["user"] / "runs").exists()
    record = manifest_record(installed)
    assert not record["matches"] and "changed: configs/train.yaml" in record["differences"]
    # the same check guards every command that loads a bundle; --trust lets it through with a warning
    proc = cli("config", "--bundle", "synthetic_seg", "--trust", "--id", "learning_rate", "--format", "json",
               cwd=shared["user"], bundle_path=str(shared["group"]))
    assert proc.returncode == 0 and json.loads(proc.stdout) == 0.5, out(proc)
    assert "differs from its MANIFEST (--trust)" in proc.stderr
    proc = cli("verify", installed, "--no-imports")
    assert proc.returncode == 2 and "'configs/train.yaml' changed since the bundle was packed" in proc.stdout


@pytest.mark.slow
def test_trust_runs_the_tampered_copy(cli, shared: dict[str, Path]) -> None:
    user = shared["user"]
    with open(shared["installed"] / "configs" / "train.yaml", "a") as f:
        f.write("# local note\n")
    proc = cli("run", "--bundle", "synthetic_seg", "--trust", *TINY, "--dataset_dir", user / "data",
               "--output_dir", user / "run", cwd=user, bundle_path=str(shared["group"]))
    assert proc.returncode == 0, out(proc)
    assert "changed: configs/train.yaml" in proc.stderr
    assert yaml.safe_load((user / "run" / "run.yaml").read_text())["status"] == "completed"


def _archive(path: Path, members: list[tuple[str, bytes | None, str]]) -> Path:
    """Write a tar.gz of (name, data or None for a folder, kind) members; kind 'file', 'dir' or 'symlink'."""
    with tarfile.open(path, "w:gz") as tar:
        for name, data, kind in members:
            info = tarfile.TarInfo(name)
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
                tar.addfile(info)
            else:
                info.size = len(data or b"")
                tar.addfile(info, io.BytesIO(data or b""))
    return path


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ([("b-1.0.0/configs/x.yaml", b"a: 1", "file"), ("b-1.0.0/../../escaped.txt", b"x", "file")], "unsafe"),
        ([("/tmp/absolute.txt", b"x", "file")], "unsafe"),
        ([("b-1.0.0/configs/link.yaml", None, "symlink")], "is a link"),
        ([("a-1.0.0/x.txt", b"x", "file"), ("b-1.0.0/y.txt", b"y", "file")], "exactly one top folder"),
        ([("b-1.0.0/x.txt", b"x", "file"), ("b-1.0.0/x.txt", b"y", "file")], "appears twice"),
        ([("b-1.0.0/configs/train.yaml", b"run: []", "file")], "has no MANIFEST"),
    ],
)
def test_unsafe_or_broken_archives_are_refused(tmp_path: Path, members: list, message: str) -> None:
    archive = _archive(tmp_path / "b-1.0.0.tar.gz", members)
    dest = tmp_path / "shared"
    with pytest.raises(BundleError, match=message):
        install_archive(archive, dest)
    assert not dest.exists() or list(dest.iterdir()) == []  # nothing written: no half install, no temp folder
    assert not (tmp_path / "escaped.txt").exists() and not Path("/tmp/absolute.txt").exists()


def test_archive_that_does_not_match_its_manifest_is_refused(tmp_path: Path) -> None:
    bundle = copy_bundle(EXAMPLE, tmp_path / "synthetic_seg")
    archive = pack_bundle(bundle, tmp_path / "dist").archive
    with tarfile.open(archive) as tar:
        members = [(m.name, tar.extractfile(m).read() if m.isfile() else None, "file" if m.isfile() else "dir")
                   for m in tar.getmembers()]
    members = [(n, (d + b"\n# appended" if n.endswith("train.yaml") else d), k) for n, d, k in members]
    forged = _archive(tmp_path / "forged.tar.gz", members)
    with pytest.raises(BundleError, match=r"does not match its own MANIFEST: changed: configs/train\.yaml"):
        install_archive(forged, tmp_path / "shared")


def _bundle_archive(path: Path, meta: dict | None = None, extra: list[tuple[str, bytes]] = (),
                    top: str = "b-1.0.0", unlisted: list[tuple[str, int]] = ()) -> Path:
    """A bundle archive with a MANIFEST that matches it, as a forger would make one: the example's files with
    ``meta`` merged into its metadata, ``extra`` files (listed), and ``unlisted`` zero-filled files (not listed)."""
    files = {p.relative_to(EXAMPLE).as_posix(): p.read_bytes() for p in sorted(EXAMPLE.rglob("*"))
             if p.is_file() and "data" not in p.parts and "__pycache__" not in p.parts}
    metadata = {**json.loads(files["configs/metadata.json"]), **(meta or {})}
    files["configs/metadata.json"] = json.dumps(metadata).encode()
    files.update(dict(extra))
    manifest = "".join(f"{hashlib.sha256(d).hexdigest()}  {rel}\n" for rel, d in sorted(files.items()))
    with tarfile.open(path, "w:gz") as tar:
        for rel, data in [*files.items(), ("MANIFEST", manifest.encode())]:
            info = tarfile.TarInfo(f"{top}/{rel}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for rel, size in unlisted:
            info = tarfile.TarInfo(f"{top}/{rel}")
            info.size = size
            tar.addfile(info, io.BytesIO(bytes(size)))
    return path


@pytest.mark.parametrize(
    ("meta", "message"),
    [
        ({"name": "../../ESC16"}, "cannot name an installed bundle's folder"),
        ({"name": "/tmp/hpcr-abs-install-escape"}, "cannot name an installed bundle's folder"),
        ({"name": ".."}, "cannot name an installed bundle's folder"),
        ({"version": "1.0/../../x"}, "metadata version"),
        ({"name": "a b"}, "cannot name an installed bundle's folder"),
        ({"name": 7}, "has no name"),
    ],
)
def test_install_refuses_a_name_or_version_that_would_leave_to(cli, tmp_path: Path, meta: dict, message: str):
    archive = _bundle_archive(tmp_path / "evil.tar.gz", meta)
    dest = tmp_path / "deep" / "er" / "shared"
    proc = cli("install", archive, "--to", dest)
    assert proc.returncode == 2, out(proc)
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert not dest.exists()  # refused before anything was written, --to included
    assert not (tmp_path / "deep" / "ESC16-0.1.0").exists() and not Path("/tmp/hpcr-abs-install-escape-0.1.0").exists()


def test_install_refuses_a_file_its_manifest_does_not_list_before_writing_a_byte(tmp_path: Path):
    archive = _bundle_archive(tmp_path / "b.tar.gz", unlisted=[("models/extra.bin", 256 << 20)])
    dest = tmp_path / "shared"
    with pytest.raises(BundleError, match=r"files its MANIFEST does not list: models/extra\.bin"):
        install_archive(archive, dest)
    assert not dest.exists()


def test_install_refuses_an_archive_of_too_many_members_from_its_headers(tmp_path: Path):
    from hpc_runner.registry import install

    archive = _bundle_archive(tmp_path / "b.tar.gz", extra=[(f"many/{i}.txt", b"") for i in range(install.MAX_MEMBERS)])
    dest = tmp_path / "shared"
    with pytest.raises(BundleError, match=f"more than {install.MAX_MEMBERS} members"):
        install_archive(archive, dest)
    assert not dest.exists()


@pytest.mark.parametrize("damage", [b"not a tar at all", b"\x1f\x8b\x08\x00garbage"])
def test_a_damaged_archive_is_bad_input(cli, tmp_path: Path, damage: bytes):
    (tmp_path / "b.tar.gz").write_bytes(damage)
    proc = cli("install", tmp_path / "b.tar.gz", "--to", tmp_path / "shared")
    assert proc.returncode == 2 and "cannot read the archive" in proc.stderr and "Traceback" not in proc.stderr


def test_the_install_limit_is_read_when_installing_and_a_value_that_is_not_bytes_is_refused_naming_it() -> None:
    from hpc_runner.errors import UserError
    from hpc_runner.registry.install import MAX_BYTES, max_bytes

    assert max_bytes({}) == MAX_BYTES == 256 << 30 and max_bytes({"HPCR_INSTALL_MAX_BYTES": " "}) == MAX_BYTES
    assert max_bytes({"HPCR_INSTALL_MAX_BYTES": "1000"}) == 1000
    for bad in ("1e9", "-5", "0", "lots", "10GB"):
        with pytest.raises(UserError, match="HPCR_INSTALL_MAX_BYTES") as err:
            max_bytes({"HPCR_INSTALL_MAX_BYTES": bad})
        assert "positive whole number" in str(err.value.expected)


@pytest.mark.parametrize("content", ["zeros", "text", "zstd"])
def test_a_file_that_is_no_tar_archive_is_refused_by_its_first_bytes_at_once(tmp_path: Path, content: str) -> None:
    """600 MB of zeros (tarfile would try every decompressor over all of it), a text file, a zstd archive this
    Python cannot read: refused from the first bytes, before tarfile opens them."""
    import time

    archive = tmp_path / "b.tar.gz"
    if content == "zeros":
        with open(archive, "wb") as f:
            f.truncate(600 << 20)
    else:
        archive.write_bytes(b"name: b\n" if content == "text" else b"\x28\xb5\x2f\xfd" + b"\x00" * 64)
    t0 = time.monotonic()
    with pytest.raises(BundleError, match="not a tar archive" if content != "zstd" else "zstd") as err:
        install_archive(archive, tmp_path / "shared")
    assert time.monotonic() - t0 < 1 and str(archive) in err.value.paragraph()
    assert not (tmp_path / "shared").exists()


def test_an_archive_larger_than_its_files_may_add_up_to_is_refused_by_its_size(tmp_path: Path, monkeypatch) -> None:
    archive = tmp_path / "b.tar.gz"
    with open(archive, "wb") as f:  # gzip's magic, then 64 MB of holes: more than 1000 bytes and the tar headers
        f.write(b"\x1f\x8b")
        f.truncate(64 << 20)
    monkeypatch.setenv("HPCR_INSTALL_MAX_BYTES", "1000")
    with pytest.raises(BundleError, match="HPCR_INSTALL_MAX_BYTES"):
        install_archive(archive, tmp_path / "shared")


@pytest.mark.parametrize("mode", ["w:", "w:bz2", "w:xz"])
def test_plain_bzip2_and_xz_archives_still_install(tmp_path: Path, mode: str) -> None:
    bundle = copy_bundle(EXAMPLE, tmp_path / "synthetic_seg")
    packed = pack_bundle(bundle, tmp_path / "dist").archive
    other = tmp_path / f"b.tar{mode[2:] and '.' + mode[2:]}"
    with tarfile.open(packed) as src, tarfile.open(other, mode) as dst:
        for m in src.getmembers():
            dst.addfile(m, src.extractfile(m) if m.isfile() else None)
    assert install_archive(other, tmp_path / "shared").status == "installed"

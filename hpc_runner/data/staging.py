"""Stage a run's data on node-local disk once per node and dataset version; bound the node's reads of shared storage.

What is staged: the folders that the config's ``dataset_dir`` and ``cache_dir`` ids name (the files its
datalist names, the persistent cache's entries), each copied whole to ``<stage dir>/<name>-<version>/``.
The version is a hash of every file's relative path, size and mtime (and, for files of 4 KiB or less, their
content), so a changed source is staged again, and two versions on one node live side by side.

How a copy is made (``stage_folder``): under the node's lock for that name one task copies into
``.tmp-<version>-<pid>``, checks every source file's size and mtime again after its copy (a source that
changed meanwhile is refused, the temporary folder removed), then renames it to its final name in one
step; the others waited on the lock and find the finished folder. A copy killed half-way leaves only a
``.tmp-`` folder, which is never read and is removed by the next copy of that name. Each file copy holds one
of the node's read slots (``read-slot-<i>`` lock files in the stage dir, default 4), so a node reads shared
storage with at most that many streams, whatever the number of tasks or transform threads.

Cleaning: before a copy, the least recently used copies (``.last-used``) not in use by a run (a shared
lock on ``.in-use``) are removed until the new one fits under ``max_gb``; ``clean: never`` keeps them.
``clean: end`` does that too, and removes a sweep's copy when the last point of the sweep on the node ends: a
sweep task holds a shared lock on ``.sweep-<key>.hold`` while it runs its points (``sweep_hold``), each run
marks the copies it read ``.used-by-<key>``, and the task that ends last on the node (it gets the lock
exclusively) removes the copies its sweep used that no other run reads and no other running sweep marked.
A run outside a sweep with ``clean: end`` removes its copies itself when it ends.
A copy that cannot fit (over ``max_gb``, or not enough free space) is not made: the run reads in place and
says so once. The run reads the copy through an override of the id (never by editing the bundle); run.yaml
``data:`` says where it read from, and ``data_io.json`` in the run dir the bytes read from shared storage.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import random
import shutil
import socket
import stat
import time
import uuid
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hpc_runner.config.ids import get_by_id, set_by_id
from hpc_runner.errors import UserError
from hpc_runner.records.atomic import write_text_atomic
from hpc_runner.records.file_lock import exclusive
from hpc_runner.records.json_out import dumps_json
from hpc_runner.records.numbers import require_decimal, require_int
from hpc_runner.records.read import RecordError, open_regular, parse_json_text, read_json_record
from hpc_runner.scheduler.job_env import node_name as scheduler_node
from hpc_runner.scheduler.job_env import scratch_dir
from hpc_runner.scheduler.site_findings import NO_STAGING, uses_workaround

ENV = "HPCR_STAGE"  # the settings as JSON: set by --stage (or a profile's stage:), inherited by jobs
STAGE_IDS = ("dataset_dir", "cache_dir")  # the ids whose folders are staged, when the config has them
CLEAN_POLICIES = ("lru", "never", "end")
DEFAULT_READ_SLOTS = 4
HASHED_UP_TO = 4096  # files this small are hashed too: an edit that keeps size and mtime is still seen
IO_FILE = "data_io.json"
SWEEP_ENV = "HPCR_STAGE_SWEEP"  # set by sweep_hold while a sweep task runs its points: the copies' user key
LAST_USED, IN_USE = ".last-used", ".in-use"
GB = 1 << 30


@dataclass(frozen=True)
class StageSettings:
    """Where and how to stage: from ``--stage*`` or a cluster profile's ``stage:`` mapping."""

    where: str = "scratch"  # scratch: the job's node-local folder (SLURM_TMPDIR/TMPDIR), $VAR/..., or a path; {node}
    max_gb: float | None = None  # the copies on a node together; the least recently used go first
    node_gb: float | None = None  # the node's scratch size, when known: a dataset over it is refused before queueing
    clean: str = "lru"
    read_slots: int = DEFAULT_READ_SLOTS
    ids: tuple[str, ...] = STAGE_IDS

    def to_env(self) -> str:
        """The settings as the JSON that ``HPCR_STAGE`` carries to the jobs."""
        return dumps_json({**asdict(self), "ids": list(self.ids)})


def parse_stage_settings(raw: Any, where: str) -> StageSettings:
    """Return the StageSettings a ``stage:`` mapping (or ``--stage`` options) state; a UserError naming ``where``."""
    if raw is True or raw is None:
        return StageSettings()
    if isinstance(raw, str):
        raw = {"where": raw}
    if not isinstance(raw, Mapping):
        raise UserError(f"stage: {str(raw)[:60]!r} is not a mapping", where=where,
                        expected="stage: {where: scratch|$TMPDIR|/local/$USER, max_gb: 50, node_gb: 400, "
                        "clean: lru|never|end, read_slots: 4}")
    known = {"where", "max_gb", "node_gb", "clean", "read_slots", "ids"}
    unknown = sorted(str(k)[:40] for k in raw if k not in known)
    if unknown:
        raise UserError(f"stage: unknown key(s) {', '.join(unknown)}", where=where,
                        expected=f"keys among: {', '.join(sorted(known))}")
    out: dict[str, Any] = {}
    if raw.get("where") is not None:
        out["where"] = _stage_where(raw["where"], where)
    for key in ("max_gb", "node_gb"):
        if raw.get(key) is not None:
            out[key] = require_decimal(raw[key], where, f"stage {key}", low=0.0, high=1e6)
    if raw.get("clean") is not None:
        if raw["clean"] not in CLEAN_POLICIES:
            raise UserError(f"stage clean {str(raw['clean'])[:40]!r} is not a cleaning policy", where=where,
                            expected=f"one of {', '.join(CLEAN_POLICIES)}")
        out["clean"] = raw["clean"]
    if raw.get("read_slots") is not None:
        slots = raw["read_slots"]  # a YAML/JSON int, or the text of --read-slots
        text = str(slots) if isinstance(slots, int) and not isinstance(slots, bool) and abs(slots) < 1 << 20 else slots
        out["read_slots"] = require_int(text, where, "stage read_slots", low=1, high=256)
    if raw.get("ids") is not None:
        ids = raw["ids"]
        if not isinstance(ids, (list, tuple)) or not ids or not all(isinstance(i, str) and 0 < len(i) < 200
                                                                     and i.isprintable() for i in ids):
            raise UserError("stage ids is not a list of config ids", where=where, expected="ids: [dataset_dir]")
        out["ids"] = tuple(ids)
    return StageSettings(**out)


def _stage_where(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > 1024 or not value.isprintable():
        raise UserError(f"stage where {str(value)[:60]!r} is not a folder", where=where,
                        expected="scratch (the job's node-local folder), $TMPDIR/..., or an absolute path")
    if value != "scratch" and not (value.startswith("$") or os.path.isabs(value)):
        raise UserError(f"stage where {value!r} is relative: every node would stage into another folder", where=where,
                        expected="scratch, $TMPDIR, $SLURM_TMPDIR/..., or an absolute path such as /local/$USER")
    return value


def checked_staging(profile_settings: Mapping[str, Any], settings: StageSettings | None, warn: Any = None,
                    partition: str | None = None) -> StageSettings | None:
    """``settings``, or None (staging off, said in one warning) when they stage to the node's scratch and the
    profile's ``cluster check`` found none there (scheduler/site_findings.py ``NO_STAGING``)."""

    if settings is None or not (settings.where == "scratch" or settings.where.startswith("$")):
        return settings
    if not uses_workaround(profile_settings, NO_STAGING, partition):
        return settings
    message = ("hpc-runner: warning: `cluster check` found no node-local scratch on this profile's nodes: staging "
               "is off, the runs read their data in place (`hpc-runner cluster show NAME`; --stage-dir PATH stages "
               "to a folder of your choosing)")
    if warn is None:
        import sys

        print(message, file=sys.stderr, flush=True)
    else:
        warn(message)
    return None


def settings_from_env(environ: Mapping[str, str] | None = None) -> StageSettings | None:
    """The settings ``HPCR_STAGE`` carries; None without it."""
    text = (os.environ if environ is None else environ).get(ENV)
    if not text:
        return None
    raw = parse_json_text(text, ENV, "stage settings")
    return parse_stage_settings(raw, ENV)


# ---------------------------------------------------------------- what a dataset is


@dataclass(frozen=True)
class Listing:
    """The regular files under a source folder: relative path -> (size, mtime_ns); and its version key."""

    source: Path
    files: dict[str, tuple[int, int]]
    version: str
    hashed_bytes: int  # the bytes read to hash the small files (read from shared storage too)

    @property
    def total_bytes(self) -> int:
        return sum(size for size, _ in self.files.values())


def list_source(source: Path, limit: int = 1_000_000) -> Listing:
    """The files of ``source`` (links and special files are skipped) and their version key."""
    files: dict[str, tuple[int, int]] = {}
    digest = hashlib.sha256()
    hashed = 0
    for folder, dirs, names in os.walk(source, followlinks=False):
        dirs.sort()
        dirs[:] = [d for d in dirs if not d.startswith(".tmp-")]
        for name in sorted(names):
            path = Path(folder) / name
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode):
                continue
            rel = path.relative_to(source).as_posix()
            files[rel] = (st.st_size, st.st_mtime_ns)
            digest.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
            if st.st_size <= HASHED_UP_TO:
                digest.update(_small_content(path))
                hashed += st.st_size
            if len(files) > limit:
                raise UserError(f"{source} holds more than {limit} files: too many to stage file by file",
                                where=str(source), expected="a dataset folder, or no --stage")
    return Listing(source, files, digest.hexdigest()[:16], hashed)


def folder_bytes(folder: Path, limit: int = 1_000_000) -> int:
    """The bytes of the regular files under ``folder`` (the first ``limit`` files; links are not followed)."""
    total = seen = 0
    for base, _, names in os.walk(folder, followlinks=False):
        for name in names:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(base, name))
                total += st.st_size if stat.S_ISREG(st.st_mode) else 0
            seen += 1
            if seen >= limit:
                return total
    return total


def _small_content(path: Path) -> bytes:
    fd = open_regular(path, "dataset file")
    if fd is None:
        return b""
    with os.fdopen(fd, "rb") as f:
        return f.read(HASHED_UP_TO + 1)


# ---------------------------------------------------------------- where the copies go


def node_name(environ: Mapping[str, str] | None = None) -> str:
    """This node's name (the scheduler's word for it, else the host name)."""
    return scheduler_node(environ) or socket.gethostname().split(".")[0] or "node"


def stage_root(settings: StageSettings, environ: Mapping[str, str] | None = None) -> Path | None:
    """The node's stage folder for ``settings`` (None: ``scratch`` outside a job that has one and no $TMPDIR)."""
    env = os.environ if environ is None else environ
    where = settings.where
    if where == "scratch":
        base = scratch_dir(env) or env.get("TMPDIR")
        if not base:
            return None
        where = os.path.join(base, "hpcr-stage")
    expanded = os.path.expandvars(where.replace("{node}", node_name(env)).replace("{user}", env.get("USER", "")))
    if "$" in expanded:  # a variable this node does not set
        return None
    return Path(expanded)


def check_stage_root(root: Path) -> Path:
    """Make ``root`` if needed and return it; a UserError when it (or a folder on its way) is a link, or it is
    not a writable folder: a link could send the copies (and the cleaning) anywhere."""
    resolved = root.resolve()
    if resolved == Path(resolved.anchor) or resolved == Path.home().resolve() or not root.is_absolute():
        raise UserError(f"the stage folder {root} is /, $HOME or relative: staging and its cleaning would write "
                        "among other files", where=str(root),
                        expected="an absolute folder of its own on node-local disk, e.g. /local/$USER/hpcr-stage")
    if os.path.islink(root):
        raise UserError(f"the stage folder {root} is a symbolic link", where=str(root),
                        expected="a real folder on node-local disk (stage where:), not a link")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot make the stage folder {root} ({exc.strerror or exc})", where=str(root),
                        expected="a folder on node-local disk that this user may write") from None
    if not root.is_dir() or not os.access(root, os.W_OK | os.X_OK):
        raise UserError(f"the stage folder {root} is not a folder this user may write", where=str(root),
                        expected="a writable folder on node-local disk (stage where:)")
    return root


# ---------------------------------------------------------------- read slots


@contextlib.contextmanager
def read_slot(root: Path, slots: int, poll_s: float = 0.01) -> Iterator[int]:
    """Hold one of the node's ``slots`` read slots (lock files in ``root``) for the block; yield its number.

    The slots are tried from a random one on, each file opened only while it is tried: a free slot costs one
    open and one lock, whatever ``slots`` is (a bound on every load of a run must not slow it)."""
    start = random.randrange(slots) if slots > 1 else 0
    while True:
        for n in range(slots):
            i = (start + n) % slots
            fd = os.open(root / f"read-slot-{i}", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue
                try:
                    yield i
                finally:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                return
            finally:
                os.close(fd)
        time.sleep(poll_s)


# ---------------------------------------------------------------- one copy


@dataclass
class Staged:
    """Where one id's data is read from."""

    id: str
    source: str
    read_from: str
    version: str | None = None
    copied_bytes: int = 0  # read from shared storage by this task's copy (0: another task or run made it)
    hashed_bytes: int = 0
    total_bytes: int = 0
    note: str | None = None

    def record(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


class SourceChanged(UserError):
    """A source file changed while it was copied: the copy is not used."""


def stage_folder(source: Path, root: Path, settings: StageSettings, id_path: str = "dataset_dir",
                 warn: Any = print) -> Staged:
    """Copy ``source`` into ``root`` once per version (see the module doc); return where to read it from."""
    check_stage_root(root)
    listing = list_source(source)
    staged = Staged(id_path, str(source), str(source), listing.version, hashed_bytes=listing.hashed_bytes,
                    total_bytes=listing.total_bytes)
    name = f"{_safe(source.name) or 'data'}-{listing.version}"
    final = root / name
    with exclusive(root / f".{name}.lock", timeout=24 * 3600, what=f"the copy of {source} on this node"):
        if final.is_dir() and not final.is_symlink():
            _touch(final)
            staged.read_from, staged.note = str(final), "staged on this node before"
            return staged
        for old in root.glob(f".tmp-{listing.version}-*"):  # a copy killed half-way: never read, removed here
            shutil.rmtree(old, ignore_errors=True)
        need = listing.total_bytes
        why = _room_for(root, need, settings, keep=name)
        if why:
            warn(f"hpc-runner: not staging {source} ({need / GB:.2f} GB): {why}; the run reads it in place")
            staged.note = f"read in place: {why}"
            return staged
        tmp = root / f".tmp-{listing.version}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            staged.copied_bytes = _copy_all(source, tmp, listing, root, settings.read_slots)
            (tmp / LAST_USED).touch()
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        staged.read_from, staged.note = str(final), "copied by this task"
    return staged


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[:60].lstrip(".")


def _touch(folder: Path) -> None:
    with contextlib.suppress(OSError):
        (folder / LAST_USED).touch()


def _copy_all(source: Path, tmp: Path, listing: Listing, root: Path, slots: int) -> int:
    tmp.mkdir()

    def one(rel: str) -> int:
        with read_slot(root, slots):
            return _copy_one(source / rel, tmp / rel, listing.files[rel])

    with ThreadPoolExecutor(max_workers=max(1, slots)) as pool:
        return sum(pool.map(one, sorted(listing.files)))


def _copy_one(src: Path, dst: Path, before: tuple[int, int]) -> int:
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd = open_regular(src, "dataset file", error=SourceChanged)
    if fd is None:
        raise SourceChanged(f"{src} went away while the dataset was staged", where=str(src),
                            expected="a dataset that nothing writes while runs stage it; run again once it is")
    copied = 0
    with os.fdopen(fd, "rb") as f, open(dst, "wb") as out:
        while chunk := f.read(1 << 20):
            out.write(chunk)
            copied += len(chunk)
        st = os.fstat(f.fileno())
    after = os.stat(src)
    if (copied, st.st_size, after.st_size, after.st_mtime_ns) != (before[0], before[0], before[0], before[1]):
        raise SourceChanged(f"{src} changed while it was staged (size/mtime {before} before, "
                            f"{(after.st_size, after.st_mtime_ns)} after); the copy is not used", where=str(src),
                            expected="a dataset that nothing writes while runs stage it; run again once it is")
    return copied


def _room_for(root: Path, need: int, settings: StageSettings, keep: str) -> str | None:
    """Make room for ``need`` bytes (least recently used copies first, unless clean: never); return why not."""
    cap = int(settings.max_gb * GB) if settings.max_gb is not None else None
    if cap is not None and need > cap:
        return f"larger than the stage cap max_gb={settings.max_gb:g}"
    if settings.clean != "never":
        for entry in _copies_oldest_first(root):
            if entry.name == keep:
                continue
            over_cap = cap is not None and _copies_bytes(root) + need > cap
            short = shutil.disk_usage(root).free < need * 1.05
            if not (over_cap or short):
                break
            _remove_unless_in_use(entry)
    if cap is not None and _copies_bytes(root) + need > cap:
        return f"the copies in use on this node leave less than that under max_gb={settings.max_gb:g}"
    free = shutil.disk_usage(root).free
    if free < need * 1.05:
        return f"only {free / GB:.2f} GB free in {root}"
    return None


def _copies_oldest_first(root: Path) -> list[Path]:
    entries = [p for p in root.iterdir() if p.is_dir() and not p.is_symlink() and not p.name.startswith(".")]
    return sorted(entries, key=lambda p: _mtime(p / LAST_USED))


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _copies_bytes(root: Path) -> int:
    total = 0
    for entry in _copies_oldest_first(root):
        for folder, _, names in os.walk(entry):
            total += sum(os.lstat(os.path.join(folder, n)).st_size for n in names)
    return total


def _remove_unless_in_use(entry: Path) -> bool:
    fd = os.open(entry / IN_USE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        doomed = entry.with_name(f".tmp-evicted-{entry.name}-{uuid.uuid4().hex[:6]}")
        os.rename(entry, doomed)  # gone from readers' view in one step, then removed
        shutil.rmtree(doomed, ignore_errors=True)
        return True
    finally:
        os.close(fd)


@contextlib.contextmanager
def in_use(folders: list[str]) -> Iterator[None]:
    """Hold a shared lock on each staged copy for the block: the cleaning of another task leaves them be."""
    fds = []
    try:
        for folder in folders:
            with contextlib.suppress(OSError):
                fd = os.open(Path(folder) / IN_USE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
                fds.append(fd)
                fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        for fd in fds:
            os.close(fd)


# ---------------------------------------------------------------- a run's data


@dataclass
class RunData:
    """Where a run reads its data from, and what it read from shared storage."""

    staged: list[Staged] = field(default_factory=list)
    root: str | None = None
    node: str | None = None
    warning: str | None = None

    @property
    def overrides(self) -> dict[str, str]:
        return {s.id: s.read_from for s in self.staged if s.read_from != s.source}

    @property
    def shared_bytes(self) -> int:
        """Bytes this task read from shared storage: its copies and hashes, or (reading in place) every file once."""
        return sum(s.copied_bytes + s.hashed_bytes + (s.total_bytes if s.read_from == s.source else 0)
                   for s in self.staged)

    def record(self) -> dict[str, Any]:
        return {"staged": bool(self.overrides), "node": self.node, "stage_dir": self.root,
                **({"warning": self.warning} if self.warning else {}),
                "ids": {s.id: s.record() for s in self.staged}}


def data_folders(expanded: Mapping[str, Any], ids: tuple[str, ...]) -> list[tuple[str, Path]]:
    """The (id, folder) of each of ``ids`` the config sets to an existing folder."""
    found = []
    for id_path in ids:
        try:
            value = get_by_id(expanded, id_path)
        except (KeyError, IndexError, TypeError):
            continue
        if isinstance(value, str) and value and not value.startswith(("$", "@", "%")) and os.path.isdir(value):
            found.append((id_path, Path(value).resolve()))
    return found


def prepare_run_data(expanded: Mapping[str, Any], settings: StageSettings | None,
                     environ: Mapping[str, str] | None = None, warn: Any = print) -> RunData:
    """Stage the run's data folders on this node (with ``settings``), or say that it reads them in place."""
    folders = data_folders(expanded, settings.ids if settings else STAGE_IDS)
    if settings is None:
        data = RunData(node=node_name(environ))
        for id_path, folder in folders:
            data.staged.append(Staged(id_path, str(folder), str(folder), total_bytes=folder_bytes(folder),
                                      note="read in place (no --stage)"))
        return data
    root = stage_root(settings, environ)
    data = RunData(root=str(root) if root else None, node=node_name(environ))
    if root is None:
        data.warning = (f"stage where {settings.where!r} names no folder on this node (no scratch folder or "
                        "variable unset): the run reads its data in place")
        warn(f"hpc-runner: {data.warning}")
        for id_path, folder in folders:
            data.staged.append(Staged(id_path, str(folder), str(folder), note="read in place"))
        return data
    check_stage_root(root)
    for id_path, folder in folders:
        data.staged.append(stage_folder(folder, root, settings, id_path, warn=warn))
    key = (os.environ if environ is None else environ).get(SWEEP_ENV)
    if settings.clean == "end" and key:
        mark_users(data, key)  # the sweep task that ends last on this node removes them (sweep_hold)
    return data


def staged_config(expanded: dict, data: RunData) -> dict:
    """``expanded`` with each staged id pointing at its copy (a copy of the dict; the bundle is untouched)."""
    if not data.overrides:
        return expanded
    import copy

    out = copy.deepcopy(expanded)
    for id_path, path in data.overrides.items():
        set_by_id(out, id_path, path)
    return out


def record_io(run_dir: Path, data: RunData, attempt: int | None = None) -> dict[str, Any]:
    """Add this task's reads to ``run_dir/data_io.json`` (one entry per attempt and node); return the record."""
    path = Path(run_dir) / IO_FILE
    with exclusive(Path(run_dir) / f".{IO_FILE}.lock", what="the data I/O record"):
        try:
            previous = read_json_record(path, "data I/O record") or {}
        except RecordError:
            previous = {}
        entries = [e for e in previous.get("tasks", []) if isinstance(e, dict)] if isinstance(previous, dict) else []
        entries.append({"node": data.node, "attempt": attempt, "staged": bool(data.overrides),
                        "shared_bytes": data.shared_bytes,
                        "copied_bytes": sum(s.copied_bytes for s in data.staged),
                        "upfront_bytes": sum(s.copied_bytes + s.hashed_bytes for s in data.staged),
                        "read_from": {s.id: s.read_from for s in data.staged}})
        out = {"shared_bytes": sum(int(e.get("shared_bytes") or 0) for e in entries), "tasks": entries}
        write_text_atomic(path, dumps_json(out, indent=1) + "\n")
    return out


def shared_bytes_of(run_dir: Path) -> int | None:
    """The bytes a run read from shared storage (data_io.json), None when it has no record."""
    try:
        rec = read_json_record(Path(run_dir) / IO_FILE, "data I/O record")
    except RecordError:
        return None
    value = rec.get("shared_bytes") if isinstance(rec, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def check_fits_before_queueing(expanded: Mapping[str, Any], settings: StageSettings, where: str) -> int:
    """Exit 2 before anything is queued when the data is larger than the node's scratch (``node_gb``) or the
    stage cap; return its size in bytes. Without ``node_gb`` nothing can be known here: the job checks."""
    # sizes only (no file is read here: the login side's reads would count as shared-storage reads of the sweep)
    total = sum(folder_bytes(folder) for _, folder in data_folders(expanded, settings.ids))
    for key, limit in (("node_gb", settings.node_gb), ("max_gb", settings.max_gb)):
        if key == "max_gb" and settings.node_gb is None:
            continue  # a cap alone says nothing about the node: the run reads in place with one warning
        if limit is not None and total * 1.05 > limit * GB:
            raise UserError(f"the data to stage is {total / GB:.2f} GB, more than the stage {key}={limit:g} GB of "
                            "a node; nothing was queued", where=where,
                            expected="a larger stage max_gb/node_gb, a node-local folder with room, or no --stage")
    return total


# ---------------------------------------------------------------- clean: end (the end of a sweep on a node)


def sweep_key(sweep_dir: str | os.PathLike) -> str:
    """The short key of a sweep (its resolved folder) that names its hold file and its marks on the copies."""
    return hashlib.sha256(str(Path(sweep_dir).resolve()).encode()).hexdigest()[:12]


def _hold_file(root: Path, key: str) -> Path:
    return root / f".sweep-{key}.hold"


def _held_by_others(hold: Path) -> bool:
    """Whether some process holds ``hold`` (a sweep task still runs points on this node)."""
    try:
        fd = os.open(hold, os.O_RDWR | os.O_NOFOLLOW)
    except OSError:
        return False  # never made, or removed: no task of that sweep holds it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def _end_root() -> Path | None:
    settings = settings_from_env()
    if settings is None or settings.clean != "end":
        return None
    root = stage_root(settings)
    return check_stage_root(root) if root is not None else None


@contextlib.contextmanager
def sweep_hold(sweep_dir: str | os.PathLike) -> Iterator[str | None]:
    """While a sweep task runs its points (with ``clean: end``): hold the sweep's hold file shared, and let the runs
    mark their copies with the sweep's key; when the task ends last on the node, remove the sweep's copies
    (``clean_sweep_end``). Without ``clean: end`` (or a stage folder) it does nothing."""
    try:
        root = _end_root()
    except UserError:
        root = None
    if root is None:
        yield None
        return
    key = sweep_key(sweep_dir)
    before = os.environ.get(SWEEP_ENV)
    fd = os.open(_hold_file(root, key), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        os.environ[SWEEP_ENV] = key
        yield key
    finally:
        os.close(fd)
        if before is None:
            os.environ.pop(SWEEP_ENV, None)
        else:
            os.environ[SWEEP_ENV] = before
    if before is None:  # a nested task of the same sweep (an in-process executor) leaves it to the outer one
        clean_sweep_end(root, key)


def mark_users(data: RunData, key: str) -> None:
    """Mark each copy ``data`` reads as used by the sweep (or run) ``key``."""
    for folder in data.overrides.values():
        with contextlib.suppress(OSError):
            (Path(folder) / f".used-by-{key}").touch()


def _removable(copy: Path, key: str, root: Path) -> bool:
    """No other sweep that marked ``copy`` still runs points on this node."""
    for mark in copy.glob(".used-by-*"):
        other = mark.name[len(".used-by-"):]
        if other != key and _held_by_others(_hold_file(root, other)):
            return False
    return True


def clean_sweep_end(root: Path, key: str) -> list[str]:
    """Remove the copies the sweep ``key`` used on this node, when no task of it still runs here, no run reads
    them and no other running sweep marked them; return the removed copies' names."""
    hold = _hold_file(root, key)
    try:
        fd = os.open(hold, os.O_RDWR | os.O_NOFOLLOW)
    except OSError:
        return []
    removed = []
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held while removing: a new task of the sweep waits
        except BlockingIOError:
            return []  # another task of this sweep still runs points on this node: it cleans when it ends
        for copy in _copies_oldest_first(root):
            if (copy / f".used-by-{key}").exists() and _removable(copy, key, root):
                with exclusive(root / f".{copy.name}.lock", timeout=60, what=f"the copy {copy.name}"):
                    if _remove_unless_in_use(copy):
                        removed.append(copy.name)
        with contextlib.suppress(OSError):
            hold.unlink()
    finally:
        os.close(fd)
    return removed


def clean_after_run(data: RunData) -> list[str]:
    """``clean: end`` after a run ends (its copies no longer held by it): a run of a sweep task leaves the cleaning
    to the task (``sweep_hold``); a run on its own removes its copies unless another run reads them or a running
    sweep marked them. Return the removed copies' names."""
    try:
        root = _end_root()
    except UserError:
        return []
    if root is None or not data.overrides or os.environ.get(SWEEP_ENV):
        return []
    removed = []
    for folder in data.overrides.values():
        copy = Path(folder)
        if copy.parent == root and copy.is_dir() and _removable(copy, "", root):
            with exclusive(root / f".{copy.name}.lock", timeout=60, what=f"the copy {copy.name}"):
                if _remove_unless_in_use(copy):
                    removed.append(copy.name)
    return removed


# ---------------------------------------------------------------- measured loads


def record_loads(run_dir: Path, data: RunData, loads: Mapping[str, int], attempt: int | None = None) -> dict | None:
    """Add what this process's file-reading transforms loaded (``hpc_runner.data.reads.snapshot``) to this node's
    and attempt's entry of ``data_io.json``: a measured count replaces the estimate of a run that reads in place
    (every file once). Nothing loaded in this process (e.g. loads in torch worker processes): left as it is."""
    if not loads.get("loads"):
        return None
    path = Path(run_dir) / IO_FILE
    with exclusive(Path(run_dir) / f".{IO_FILE}.lock", what="the data I/O record"):
        try:
            previous = read_json_record(path, "data I/O record") or {}
        except RecordError:
            previous = {}
        entries = [e for e in previous.get("tasks", []) if isinstance(e, dict)] if isinstance(previous, dict) else []
        mine = next((e for e in reversed(entries) if e.get("node") == data.node and e.get("attempt") == attempt), None)
        if mine is None:
            mine = {"node": data.node, "attempt": attempt, "staged": bool(data.overrides),
                    "copied_bytes": 0, "read_from": {s.id: s.read_from for s in data.staged}}
            entries.append(mine)
        for key in ("loads", "loaded_bytes", "shared_loads", "shared_load_bytes"):
            old = mine.get(key)
            mine[key] = (old if isinstance(old, int) and not isinstance(old, bool) else 0) + int(loads.get(key) or 0)
        mine["measured"] = True
        upfront = mine.get("upfront_bytes")
        if not isinstance(upfront, int) or isinstance(upfront, bool):
            upfront = sum(s.copied_bytes + s.hashed_bytes for s in data.staged)
        mine["shared_bytes"] = upfront + mine["shared_load_bytes"]
        out = {"shared_bytes": sum(int(e.get("shared_bytes") or 0) for e in entries),
               "measured": all(e.get("measured") for e in entries), "tasks": entries}
        write_text_atomic(path, dumps_json(out, indent=1) + "\n")
    return out

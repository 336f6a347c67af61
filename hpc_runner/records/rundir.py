"""The run directory: the resolved config, overrides, command, environment, log, metrics, checkpoints.

Layout (every file written atomically)::

    config.yaml      the config that ran: files merged, overrides and ${env:} applied, macros expanded
    overrides.yaml   each override with its source (cli, env, args_file) and what it replaced
    run.yaml         entry, bundle, command line, cwd, host, SLURM_*, versions, git, status, times
    log.txt          stdout of the run and hpc-runner's log
    metrics.jsonl    one JSON object per iteration / validation / epoch (written by the trainer)
    summary.json     final figures (written by the trainer)
    val_sample.npz   the middle slice of the latest validation's first item: image, label, prediction
    checkpoints/     trainer checkpoints
    error.txt        the traceback of a failed run
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from hpc_runner.control_chars import find_control_character
from hpc_runner.errors import UserError
from hpc_runner.records.atomic import write_text_atomic
from hpc_runner.records.file_lock import exclusive
from hpc_runner.records.read import RecordError, read_yaml_record
from hpc_runner.records.shape import first_non_string_key

CONFIG_FILE = "config.yaml"
OVERRIDES_FILE = "overrides.yaml"
RUN_FILE = "run.yaml"
LOG_FILE = "log.txt"
METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"
ERROR_FILE = "error.txt"
VAL_SAMPLE_FILE = "val_sample.npz"
CHECKPOINT_DIR = "checkpoints"
RECORD_LOCK = ".run.lock"  # the lock of run.yaml's one writer (records/file_lock.py)


# run.yaml's fields as hpc-runner writes them: a hand-edited record whose field holds another type (``entry: .nan``,
# ``bundle: [1]``) is refused where it is read (``check_run_record``), not met as an AttributeError deep in a command
_RUN_RECORD_TYPES: dict[str, tuple[type, ...]] = {
    **dict.fromkeys(("entry", "status", "init_id", "final_id", "rerun_of"), (str,)),
    **dict.fromkeys(("bundle", "command", "env", "cpus", "host", "scheduler", "versions", "git", "container",
                     "sandbox"), (dict,)),
}


def check_run_record(data: dict, path: Path | str) -> dict:
    """Return run.yaml's ``data`` once its shape is the one hpc-runner writes: every key a string (at every
    level: ids and fields are looked up as text) and each known field of its type (or null); RecordError naming
    the file and the field otherwise."""
    bad = first_non_string_key(data)
    if bad is not None:
        raise RecordError(f"the run record has a key that is not text: {bad}", where=str(path),
                          expected="the run record as hpc-runner wrote it (keys are text)")
    for key, kinds in _RUN_RECORD_TYPES.items():
        value = data.get(key)
        if value is not None and not isinstance(value, kinds):
            raise RecordError(f"the run record's '{key}' is a {type(value).__name__}, not a "
                              f"{' or '.join(k.__name__ for k in kinds)}", where=str(path),
                              expected="the run record as hpc-runner wrote it")
    return data


class _Dumper(yaml.SafeDumper):
    """Block-style YAML that keeps key order and writes multi-line strings as literal blocks."""


def _str_representer(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str_representer)
_Dumper.add_representer(tuple, lambda d, v: d.represent_list(list(v)))


def dump_yaml(data: Any) -> str:
    """Return ``data`` as readable block YAML with keys in their original order."""
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)


def now_iso() -> str:
    """Return the local time as an ISO-8601 string with offset."""
    return _dt.datetime.now().astimezone().isoformat(timespec="seconds")


def timestamp_name() -> str:
    """Return a sortable folder name for a new run (``2026-11-21_14-03-07``)."""
    return _dt.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")


def default_run_dir(bundle_name: str, root: Path = Path("runs")) -> Path:
    """Return ``runs/<bundle>/<timestamp>``, made unique with a suffix if it already exists."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", bundle_name) or "bundle"
    base = root / safe / timestamp_name()
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}_{n}")
    return path


def check_folder_path(path: str | os.PathLike, what: str = "the run dir") -> None:
    """Raise UserError when ``path``, or a folder it would be made in, exists as something other than a folder."""
    found = find_control_character(str(path))
    if found:
        raise UserError(
            f"{what} {str(path)[:120]!r} holds a control character ({found[1]!r} at position {found[0]})",
            expected="--output_dir on one line, without control characters (it reaches job scripts and logs)",
        )
    path = Path(path)
    for part in (path, *path.parents):
        if part.is_dir():
            return
        if part.exists() or part.is_symlink():  # a file, or a dangling link mkdir cannot replace
            inside = "" if part == path else f" would be made inside {part}, which"
            raise UserError(
                f"{what} {path}{inside} {'is' if inside else 'names'} an existing file, not a folder",
                expected="--output_dir naming a folder, or a path where a folder can be made",
            )


def command_line(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Return the command as a list and as a shell line, with the working directory."""
    argv = list(sys.argv if argv is None else argv)
    return {"argv": argv, "shell": shlex.join(argv), "cwd": os.getcwd()}


class RunDir:
    """A run directory on disk, and the one place that knows its file names."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

    def file(self, name: str) -> Path:
        """Return the path of a file in the run dir."""
        return self.path / name

    @property
    def checkpoints(self) -> Path:
        """Return the checkpoint folder."""
        return self.path / CHECKPOINT_DIR

    def create(self) -> RunDir:
        """Create the folder (and parents); raise UserError when a file is in the way."""
        check_folder_path(self.path)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError, PermissionError) as exc:  # raced, or not ours to write
            raise UserError(f"cannot make the run dir {self.path} ({exc.strerror or exc})") from None
        self.check_links()
        return self

    def check_links(self) -> None:
        """Refuse a run dir holding a symbolic link where we write (its top level, checkpoints/): appends and
        checkpoints would follow it out of the run dir (a shared sweep folder's ``checkpoints -> ~/.ssh``)."""
        found: list[str] = []
        for folder in (self.path, self.checkpoints):  # checkpoints/ itself a link: found at the top level
            if found:
                break
            try:
                found = [entry.path for entry in os.scandir(folder) if entry.is_symlink()]
            except (FileNotFoundError, NotADirectoryError):
                continue
        if found:
            raise UserError(f"the run dir holds a symbolic link, which hpc-runner would follow when it writes there: "
                            f"{found[0]} -> {os.readlink(found[0])}; nothing was run", where=str(self.path),
                            expected="a run dir without links (remove the link, or use another --output_dir)")

    def write_yaml(self, name: str, data: Any) -> Path:
        """Write ``data`` as YAML atomically."""
        return write_text_atomic(self.file(name), dump_yaml(data))

    def read_yaml(self, name: str) -> Any:
        """Read a YAML file of the run dir (None when absent); RecordError naming it when it is damaged."""
        # libyaml when PyYAML has it: status/collect read run.yaml of every point (10,000 at ~2 ms each in pure Python)
        data = read_yaml_record(self.file(name), name, kind=None)
        if name == RUN_FILE and isinstance(data, dict):
            check_run_record(data, self.file(name))
        return data

    def record(self) -> dict:
        """Return run.yaml (empty when absent); RecordError naming it when it is damaged or not a mapping."""
        return check_run_record(read_yaml_record(self.file(RUN_FILE), f"run record ({RUN_FILE})") or {},
                                self.file(RUN_FILE))

    def change_record(self, change: Callable[[dict], dict]) -> dict:
        """The one writer of run.yaml: under the run dir's lock, read it, ``change`` it, write it atomically.

        The job writes its status while ``cancel`` on the login node writes ``cancelled``; without the lock
        one of the two updates would be lost."""
        self.path.mkdir(parents=True, exist_ok=True)
        with exclusive(self.path / RECORD_LOCK, what=f"the run {self.path}"):
            rec = change(self.record())
            self.write_yaml(RUN_FILE, rec)
        return rec

    def update_record(self, **fields: Any) -> dict:
        """Merge ``fields`` into run.yaml (locked, atomic) and return the new record."""
        return self.change_record(lambda rec: {**rec, **fields})

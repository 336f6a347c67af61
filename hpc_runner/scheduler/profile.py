"""A cluster profile as a value: its name, the files it came from, its settings, and the keys every profile may hold.

The executors (scheduler/slurm/, local/, memory/) take a ``ClusterProfile``; finding, loading and checking the
YAML files is profiles.py's, which asks the executor registry (select.py) which keys each executor knows.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from hpc_runner.errors import ClusterError

KeySpec = tuple[tuple[type, ...], str]  # a profile key's accepted types, and what to say when its value is wrong
# the keys every profile may hold, whatever its executor; each executor class adds the keys it understands
# (``Executor.profile_keys``), and a profile may hold the keys of any executor listed in scheduler/select.py
COMMON_KEYS: dict[str, KeySpec] = {
    "description": ((str,), "a line of text"),
    "extends": ((str,), "the name of another profile"),
    "executor": ((str,), "the name of an executor"),
    "time": ((int, str), "minutes, or HH:MM:SS, or D-HH:MM:SS"),
    "cpus_per_task": ((int, type(None)), "a whole number of CPUs"),
    "point_minutes": ((int, float, type(None)), "how long one sweep point takes, in minutes (a packed task "
                      "starts no point it cannot finish before its time limit)"),
    "container": ((dict, type(None)), "a mapping: image, runtime, python, gpu, binds, options (docs/containers.md)"),
    "stage": ((dict, bool, type(None)), "a mapping: where (scratch, $TMPDIR/..., or an absolute path), max_gb, "
              "node_gb, clean (lru|never|end), read_slots (docs/data-on-the-cluster.md)"),
    "checked": ((dict, type(None)), "what `hpc-runner cluster check` found (written by it; docs/cluster-check.md)"),
}


def setting(types: tuple[type, ...], help_text: str, default: Any = None) -> Any:
    """A field of a backend's settings dataclass that is a profile key: its accepted types and its help text
    (``keys_of`` makes the backend's ``profile_keys`` of them, ``keys_help`` the help for --scheduler-option)."""
    return field(default=default, metadata={"types": types, "help": help_text})


def keys_of(settings_class: type) -> dict[str, KeySpec]:
    """The profile keys a backend's settings dataclass declares (its fields made with ``setting``), in order."""
    return {f.name: (f.metadata["types"], f.metadata["help"]) for f in fields(settings_class) if "types" in f.metadata}


def keys_help(settings_class: type) -> list[str]:
    """One line per profile key of a backend's settings dataclass: ``key: help``."""
    return [f"{key}: {text}" for key, (_, text) in keys_of(settings_class).items()]


@dataclass
class ClusterProfile:
    """A resolved cluster profile: its name, the files it came from and its settings."""

    name: str
    sources: list[Path]
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def executor(self) -> str:
        """Return the name of the profile's executor (a key of scheduler/select.py ``EXECUTORS``; default slurm)."""
        return str(self.settings.get("executor", "slurm"))

    def get(self, key: str, default: Any = None) -> Any:
        """Return one setting."""
        return self.settings.get(key, default)

    def time_minutes(self) -> int:
        """Return the time limit in whole minutes."""
        return parse_time_minutes(self.settings.get("time", 60), self.where)

    @property
    def where(self) -> str:
        """Return the file that defines the profile (for error messages)."""
        return str(self.sources[-1]) if self.sources else self.name

    def to_record(self) -> dict[str, Any]:
        """Return what run.yaml and sweep.yaml record about the profile."""
        return {"profile": self.name, "file": self.where, "settings": dict(self.settings)}

    @classmethod
    def from_record(cls, recorded: Mapping[str, Any] | None) -> ClusterProfile:
        """Return the profile ``to_record`` wrote (in run.yaml, sweep.yaml or pipeline.yaml), unchecked
        (profiles.checked_from_record checks a hand-edited record's settings as a profile file's are)."""
        recorded = recorded or {}
        name = str(recorded.get("profile") or "recorded")
        return cls(name, [Path(recorded.get("file") or name)], dict(recorded.get("settings") or {}))


def parse_time_minutes(value: Any, where: str = "time") -> int:
    """Return a SLURM time limit (MIN, MIN:SEC, H:M:S, D-H, D-H:M, D-H:M:S) as whole minutes, rounded up."""
    plain = isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool) and abs(value) < 1 << 40)
    text = str(value).strip() if plain else ""  # str() of a 5,000-digit int raises
    m = re.fullmatch(r"(?:([0-9]{1,9})-)?([0-9]{1,9}(?::[0-9]{1,9}){0,2})", text)
    if m is None:
        raise ClusterError(
            f"time {value!r} is not a time limit", where=where, expected="minutes, HH:MM:SS or D-HH:MM:SS"
        )
    days = int(m.group(1) or 0)
    parts = [int(x) for x in m.group(2).split(":")]
    if m.group(1) is not None:  # D-H, D-H:M, D-H:M:S
        parts += [0] * (3 - len(parts))
        seconds = parts[0] * 3600 + parts[1] * 60 + parts[2]
    elif len(parts) == 3:
        seconds = parts[0] * 3600 + parts[1] * 60 + parts[2]
    elif len(parts) == 2:  # MIN:SEC
        seconds = parts[0] * 60 + parts[1]
    else:
        seconds = parts[0] * 60
    seconds += days * 86400
    if seconds <= 0:
        raise ClusterError(f"time {value!r} is not positive", where=where, expected="a time limit above zero")
    return -(-seconds // 60)


def check_time_room(profile: ClusterProfile) -> None:
    """ClusterError when the profile's time limit is not longer than its stop-signal delay: the stop signal
    would come before the job could start anything, and a job that only checkpoints and requeues forever
    floods the scheduler."""
    limit_s = profile.time_minutes() * 60
    delay = int(profile.get("signal_delay_s") or 0)
    if limit_s <= delay:
        raise ClusterError(
            f"time limit {profile.time_minutes()} min leaves no room before the stop signal, which the scheduler "
            f"sends signal_delay_s={delay} s before the end",
            where=profile.where,
            expected=f"--scheduler-option time longer than {delay // 60 + 1} min, or a smaller signal_delay_s",
        )

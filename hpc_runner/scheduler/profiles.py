"""Cluster profiles: YAML files that say how jobs are requested (partition, GPUs, time, setup, export).

Search order for ``--cluster NAME`` (first match wins): each folder of ``$HPCR_CLUSTER_PATH``
(``:``-separated), then ``$XDG_CONFIG_HOME/hpc-runner/clusters`` (default ``~/.config/...``), then the
profiles shipped in ``hpc_runner/scheduler/profiles``. ``--cluster path/to/file.yaml`` names a file directly.
A profile may start from another with ``extends: NAME``.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from hpc_runner.errors import ClusterError

BUILTIN_DIR = Path(__file__).with_name("profiles")
EXECUTORS = ("slurm", "local", "memory")  # memory: the in-memory cluster (scheduler/memory_executor.py)
EXPORT_BASES = ("ALL", "NONE", "NIL")

# key -> (accepted types, what to say when the value is wrong)
_KEYS: dict[str, tuple[tuple[type, ...], str]] = {
    "description": ((str,), "a line of text"),
    "extends": ((str,), "the name of another profile"),
    "executor": ((str,), "slurm, local or memory"),
    "partition": ((str, type(None)), "a partition name (null: the cluster's default)"),
    "partitions": ((list,), "a list of the partition names this cluster has"),
    "nodes": ((int,), "a whole number of nodes"),
    "ntasks_per_node": ((int, type(None)), "a whole number of tasks per node"),
    "cpus_per_task": ((int, type(None)), "a whole number of CPUs"),
    "cpus_per_gpu": ((int, type(None)), "a whole number of CPUs"),
    "gpus_per_node": ((int, type(None)), "a whole number of GPUs"),
    "gpus_per_task": ((int, type(None)), "a whole number of GPUs"),
    "gres": ((str, type(None)), "a generic resource like gpu:1"),
    "mem_gb": ((int, float, type(None)), "memory per node in GB (a number)"),
    "mem": ((str, type(None)), "memory per node as SLURM writes it, e.g. 16G"),
    "mem_per_gpu": ((str, type(None)), "memory per GPU as SLURM writes it, e.g. 32G"),
    "time": ((int, str), "minutes, or HH:MM:SS, or D-HH:MM:SS"),
    "account": ((str, type(None)), "an account name"),
    "qos": ((str, type(None)), "a QOS name"),
    "constraint": ((str, type(None)), "a node feature expression"),
    "exclude": ((str, type(None)), "a node list"),
    "job_name": ((str, type(None)), "a job name"),
    "setup": ((list,), "a list of shell lines run before the job (module load ...)"),
    "export": ((str,), "ALL, NONE or NIL (the base of sbatch --export)"),
    "env": ((dict,), "a mapping NAME: value added to sbatch --export"),
    "signal_delay_s": ((int,), "seconds before the time limit at which USR2 is sent"),
    "array_parallelism": ((int, type(None)), "how many tasks of an array may run at once"),
    "max_array_size": ((int, type(None)), "MaxArraySize when scontrol cannot tell"),
    "max_submit_jobs": ((int, type(None)), "how many jobs (array tasks) this user may have queued at once"),
    "point_minutes": ((int, float, type(None)), "how long one sweep point takes, in minutes (a packed task "
                      "starts no point it cannot finish before its time limit)"),
    "python": ((str, type(None)), "the command that starts python in the job"),
    "srun_args": ((list,), "extra srun arguments"),
    "sbatch": ((dict,), "extra sbatch options, e.g. {reservation: r1, mail-type: END}"),
}
VALID_KEYS = tuple(_KEYS)


@dataclass
class ClusterProfile:
    """A resolved cluster profile: its name, the files it came from and its settings."""

    name: str
    sources: list[Path]
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def executor(self) -> str:
        """Return ``slurm``, ``local`` or ``memory``."""
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

    def export_option(self) -> str:
        """Return the value of ``sbatch --export`` (``ALL`` plus the profile's variables)."""
        base = str(self.settings.get("export", "ALL")).upper()
        env = self.settings.get("env") or {}
        return ",".join([base, *(f"{k}={v}" for k, v in env.items())])

    def to_record(self) -> dict[str, Any]:
        """Return what run.yaml and sweep.yaml record about the profile."""
        return {"profile": self.name, "file": self.where, "settings": dict(self.settings)}


def parse_time_minutes(value: Any, where: str = "time") -> int:
    """Return a SLURM time limit (MIN, MIN:SEC, H:M:S, D-H, D-H:M, D-H:M:S) as whole minutes, rounded up."""
    text = str(value).strip() if isinstance(value, int | str) and not isinstance(value, bool) else ""
    m = re.fullmatch(r"(?:(\d+)-)?(\d+(?::\d+){0,2})", text)
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


def search_path(environ: Mapping[str, str] | None = None) -> list[Path]:
    """Return the folders searched for profiles, first match wins."""
    environ = os.environ if environ is None else environ
    dirs = [Path(p).expanduser() for p in environ.get("HPCR_CLUSTER_PATH", "").split(os.pathsep) if p]
    config_home = Path(environ.get("XDG_CONFIG_HOME") or Path(environ.get("HOME", "~")) / ".config").expanduser()
    dirs.append(config_home / "hpc-runner" / "clusters")
    dirs.append(BUILTIN_DIR)
    return dirs


def available_profiles(environ: Mapping[str, str] | None = None) -> dict[str, Path]:
    """Return every profile name found on the search path and the file that defines it."""
    found: dict[str, Path] = {}
    for folder in search_path(environ):
        if folder.is_dir():
            for path in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
                found.setdefault(path.stem, path)
    return found


def _read_profile_file(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ClusterError(f"cannot read the cluster profile ({exc.strerror or exc})", where=str(path)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ClusterError(
            f"the cluster profile is not valid YAML ({getattr(exc, 'problem', exc)})", where=where
        ) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ClusterError("a cluster profile must be a mapping", where=str(path), expected="key: value lines")
    return data


def check_settings(settings: Mapping[str, Any], where: str) -> None:
    """Raise ClusterError for an unknown key or a value of the wrong type."""
    unknown = sorted(set(settings) - set(_KEYS))
    if unknown:
        import difflib

        close = [m for k in unknown for m in difflib.get_close_matches(k, VALID_KEYS, n=1)]
        raise ClusterError(
            f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} in the cluster profile",
            where=where,
            expected=f"keys among: {', '.join(VALID_KEYS)}",
            hint=f"Did you mean: {', '.join(close)}?" if close else None,
        )
    for key, value in settings.items():
        types, what = _KEYS[key]
        if isinstance(value, bool) or not isinstance(value, types):
            raise ClusterError(f"{key}: {value!r} is not valid", where=where, expected=what)
    if "executor" in settings and settings["executor"] not in EXECUTORS:
        raise ClusterError(
            f"executor: {settings['executor']!r} is not known", where=where, expected=" or ".join(EXECUTORS)
        )
    if "export" in settings and str(settings["export"]).upper() not in EXPORT_BASES:
        raise ClusterError(
            f"export: {settings['export']!r} is not an export base",
            where=where,
            expected=f"one of {', '.join(EXPORT_BASES)} (variables go under env:)",
        )
    for name, value in (settings.get("env") or {}).items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(name)) or "," in str(value):
            raise ClusterError(
                f"env: {name}={value!r} cannot be passed with sbatch --export",
                where=where,
                expected="NAME: value with a valid variable name and no comma in the value",
            )
    if "time" in settings:
        parse_time_minutes(settings["time"], where)
    _check_script_values(settings, where)
    for key in ("setup", "srun_args", "partitions"):
        if key in settings and not all(isinstance(x, str) for x in settings[key]):
            raise ClusterError(f"{key}: every item must be a string", where=where, expected=_KEYS[key][1])
    for key in ("nodes", "signal_delay_s", "array_parallelism", "max_array_size", "max_submit_jobs", "cpus_per_task",
                "gpus_per_node"):
        if isinstance(settings.get(key), int) and settings[key] < (0 if key == "gpus_per_node" else 1):
            raise ClusterError(f"{key}: {settings[key]} is too small", where=where, expected=_KEYS[key][1])
    for key in ("mem_gb", "point_minutes"):
        value = settings.get(key)
        if isinstance(value, float) and not math.isfinite(value):
            raise ClusterError(f"{key}: {value} is not a finite number", where=where, expected=_KEYS[key][1])
    if isinstance(settings.get("mem_gb"), int | float) and settings["mem_gb"] <= 0:
        raise ClusterError(f"mem_gb: {settings['mem_gb']} is not positive", where=where, expected=_KEYS["mem_gb"][1])
    minutes = settings.get("point_minutes")
    if minutes is not None and (isinstance(minutes, bool) or minutes <= 0):
        raise ClusterError(f"point_minutes: {minutes} is not a positive number", where=where,
                           expected=_KEYS["point_minutes"][1])


def _check_script_values(settings: Mapping[str, Any], where: str) -> None:
    """ClusterError for a value that must not reach a job script (slurm/job_script.py), named by its key."""
    from hpc_runner.scheduler.job_script import check_field, check_python_command, check_text

    for key, value in settings.items():
        if key == "python" and value is not None:
            check_python_command(value, where)
        elif key in ("setup", "srun_args", "partitions"):
            for item in value:
                check_text(item, f"{key} item", where)
        elif key in ("env", "sbatch"):
            for name, item in value.items():
                check_text(name, f"{key} name", where)
                check_text(item, f"{key}: {name}", where)
        elif key in ("description", "job_name", "extends"):
            check_text(value, key, where)
        elif isinstance(value, str):
            check_field(key, value, where)


def _unknown_profile(name: str, environ: Mapping[str, str] | None) -> ClusterError:
    names = sorted(available_profiles(environ))
    import difflib

    close = difflib.get_close_matches(name, names, n=2)
    return ClusterError(
        f"unknown cluster profile '{name}'",
        expected=f"one of: {', '.join(names) or '(none found)'}, or a path to a profile .yaml",
        hint=(f"Did you mean: {', '.join(close)}? " if close else "")
        + f"Profiles are searched in: {', '.join(str(p) for p in search_path(environ))}",
    )


def load_profile(
    name: str,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> ClusterProfile:
    """Return the profile ``name`` (or the file it names), with ``extends`` followed and ``overrides`` applied."""
    chain: list[tuple[str, Path, dict]] = []
    current: str | None = name
    seen: set[str] = set()
    while current is not None:
        path = Path(current).expanduser()
        if current.endswith((".yaml", ".yml")) or os.sep in current:
            if not path.is_file():
                raise ClusterError("the cluster profile file does not exist", where=str(path))
        else:
            found = available_profiles(environ).get(current)
            if found is None:
                raise _unknown_profile(current, environ)
            path = found
        key = str(path.resolve())
        if key in seen:
            raise ClusterError(
                "profiles extend each other in a circle", where=str(path), expected="a chain of extends: that ends"
            )
        seen.add(key)
        data = _read_profile_file(path)
        check_settings(data, str(path))
        chain.append((path.stem, path, data))
        current = data.get("extends")
    settings: dict[str, Any] = {}
    for _, _, data in reversed(chain):
        settings.update({k: v for k, v in data.items() if k != "extends"})
    profile = ClusterProfile(chain[0][0], [p for _, p, _ in reversed(chain)], settings)
    if overrides:
        check_settings(overrides, "--slurm")
        profile.settings.update(overrides)
    known = profile.settings.get("partitions")
    partition = profile.settings.get("partition")
    if known and partition is not None and partition not in known:
        raise ClusterError(
            f"partition '{partition}' is not one of this cluster's partitions",
            where=profile.where,
            expected=f"one of: {', '.join(known)}",
        )
    return profile


def parse_setting_overrides(items: list[str] | None) -> dict[str, Any]:
    """Parse ``--slurm KEY=VALUE`` options into profile settings (values typed like YAML 1.2)."""
    from hpc_runner.config.values import parse_value

    result: dict[str, Any] = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ClusterError(
                f"--slurm {item!r} is not KEY=VALUE", expected="e.g. --slurm partition=gpu --slurm time=30"
            )
        key = key.strip().replace("-", "_")
        value = parse_value(raw, what=f"value of --slurm {key}")
        if key == "partition" and value is not None:
            value = str(value)
        result[key] = value
    return result

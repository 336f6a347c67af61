"""Cluster profiles: YAML files that say how jobs are requested (partition, GPUs, time, setup, export).

Search order for ``--cluster NAME`` (first match wins): each folder of ``$HPCR_CLUSTER_PATH``
(``:``-separated), then ``$XDG_CONFIG_HOME/hpc-runner/clusters`` (default ``~/.config/...``), then the
profiles shipped in ``hpc_runner/scheduler/profiles``. ``--cluster path/to/file.yaml`` names a file directly.
A profile may start from another with ``extends: NAME``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hpc_runner.config.values import parse_value
from hpc_runner.errors import ClusterError
from hpc_runner.records.read import RecordError, parse_yaml_record, read_record_text
from hpc_runner.scheduler.profile import ClusterProfile, parse_time_minutes
from hpc_runner.scheduler.select import EXECUTORS, profile_keys
from hpc_runner.scheduler.site_findings import parse_checked

BUILTIN_DIR = Path(__file__).with_name("profiles")


def checked_from_record(recorded: Mapping[str, Any] | None, where: str) -> ClusterProfile:
    """Return the profile a record holds (``ClusterProfile.from_record``), its settings checked as a profile
    file's are (a hand-edited record is bad input naming ``where``)."""
    profile = ClusterProfile.from_record(recorded)
    check_settings(profile.settings, where)
    return profile


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


MAX_PROFILE_BYTES = 1 << 20  # a profile is a few dozen lines; setup: blocks of a few hundred at most
MAX_EXTENDS = 32  # files in one extends: chain (real ones: two or three)


def parse_profile_text(text: str, path: Path) -> dict[str, Any]:
    """Parse a profile's YAML through the records' one parser (safe loader, depth and alias bounds); ClusterError
    naming the file when it is not YAML or not a mapping."""
    try:
        data = parse_yaml_record(text, path, "cluster profile")
    except RecordError as err:
        raise ClusterError(err.message, where=err.where, expected=err.expected) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ClusterError("a cluster profile must be a mapping", where=str(path), expected="key: value lines")
    return data


def _read_profile_file(path: Path) -> dict[str, Any]:
    """Read a profile through the bounded reader (a regular file, at most MAX_PROFILE_BYTES, UTF-8): a FIFO, a
    device or a link to one is refused before it is opened, as a file that vanished is."""
    text = read_record_text(path, "cluster profile", MAX_PROFILE_BYTES, error=ClusterError)
    if text is None:
        raise ClusterError("the cluster profile file does not exist", where=str(path))
    return parse_profile_text(text, path)


# keys users reach for that have another name here (sbatch's own words, other tools')
SYNONYMS = {"gpus": "gpus_per_node", "gpu": "gpus_per_node", "gpus_per_job": "gpus_per_node",
            "cpus": "cpus_per_task", "cpus_per_job": "cpus_per_task", "memory": "mem_gb", "mem_per_node": "mem",
            "walltime": "time", "time_limit": "time", "ntasks": "ntasks_per_node", "queue": "partition"}


def check_settings(settings: Mapping[str, Any], where: str) -> None:
    """Raise ClusterError for an unknown key or a value of the wrong type (a key is known when it is common or
    some executor understands it; each executor checks the values of its own keys, ``Executor.check_profile``)."""
    keys = profile_keys()
    unknown = sorted(set(settings) - set(keys))
    if unknown:
        import difflib

        close = [SYNONYMS.get(k) or next(iter(difflib.get_close_matches(k, list(keys), n=1)), "") for k in unknown]
        close = [c for c in close if c in keys]
        raise ClusterError(
            f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} in the cluster profile",
            where=where,
            expected=f"keys among: {', '.join(keys)}",
            hint=f"Did you mean: {', '.join(close)}?" if close else None,
        )
    for key, value in settings.items():
        types, what = keys[key]
        if isinstance(value, bool) or not isinstance(value, types):
            raise ClusterError(f"{key}: {value!r} is not valid", where=where,
                               expected=" or ".join(EXECUTORS) if key == "executor" else what)
    if "executor" in settings and settings["executor"] not in EXECUTORS:
        raise ClusterError(
            f"executor: {settings['executor']!r} is not known", where=where, expected=" or ".join(EXECUTORS)
        )
    if "time" in settings:
        parse_time_minutes(settings["time"], where)
    if settings.get("checked") is not None:
        parse_checked(settings["checked"], where)
    for executor in EXECUTORS.values():
        executor.check_profile(settings, where)
    if isinstance(settings.get("cpus_per_task"), int) and settings["cpus_per_task"] < 1:
        raise ClusterError(f"cpus_per_task: {settings['cpus_per_task']} is too small", where=where,
                           expected=keys["cpus_per_task"][1])
    minutes = settings.get("point_minutes")
    if isinstance(minutes, float) and not math.isfinite(minutes):
        raise ClusterError(f"point_minutes: {minutes} is not a finite number", where=where,
                           expected=keys["point_minutes"][1])
    if minutes is not None and (isinstance(minutes, bool) or minutes <= 0):
        raise ClusterError(f"point_minutes: {minutes} is not a positive number", where=where,
                           expected=keys["point_minutes"][1])


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
    return resolve_profile(name, None, overrides, environ)


def check_new_profile(name: str, text: str, path: Path, environ: Mapping[str, str] | None = None) -> ClusterProfile:
    """Return the profile ``text`` would be once written to ``path`` as ``name`` (its extends: followed), every
    check of ``load_profile`` passed; nothing is written (``cluster init`` writes only what passes)."""
    return resolve_profile(name, (path, parse_profile_text(text, path)), None, environ)


def resolve_profile(name: str, first: tuple[Path, dict[str, Any]] | None, overrides: Mapping[str, Any] | None,
                    environ: Mapping[str, str] | None) -> ClusterProfile:
    """``load_profile``'s work; ``first``: the first file's path and settings, already read (not from disk)."""
    chain: list[tuple[str, Path, dict]] = []
    current: str | None = name
    seen: set[str] = set()
    while current is not None:
        if len(chain) >= MAX_EXTENDS:
            raise ClusterError(f"the chain of extends: is longer than {MAX_EXTENDS} profiles", where=str(chain[-1][1]),
                               expected="a short chain of extends: that ends")
        path = Path(current).expanduser()
        if first is not None and not chain:
            path = first[0]
        elif current.endswith((".yaml", ".yml")) or os.sep in current:
            if not os.path.lexists(path):
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
        data = first[1] if first is not None and not chain else _read_profile_file(path)
        check_settings(data, str(path))
        chain.append((path.stem if first is None or chain else name, path, data))
        current = data.get("extends")
    settings: dict[str, Any] = {}
    for _, _, data in reversed(chain):
        settings.update({k: v for k, v in data.items() if k != "extends"})
    profile = ClusterProfile(chain[0][0], [p for _, p, _ in reversed(chain)], settings)
    if overrides:
        check_settings(overrides, "--scheduler-option")
        profile.settings.update(overrides)
    for executor in EXECUTORS.values():  # what each file allowed may contradict itself once merged (gres + gpus)
        executor.check_profile(profile.settings, f"{profile.where}{' with --scheduler-option' if overrides else ''}")
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
    """Parse ``--scheduler-option KEY=VALUE`` options (alias ``--slurm``) into profile settings (values typed like
    YAML 1.2)."""
    result: dict[str, Any] = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ClusterError(
                f"--scheduler-option {item!r} is not KEY=VALUE",
                expected="e.g. --scheduler-option partition=gpu --scheduler-option time=30"
            )
        key = key.strip().replace("-", "_")
        value = parse_value(raw, what=f"value of --scheduler-option {key}")
        if key == "partition" and value is not None:
            value = str(value)
        result[key] = value
    return result

"""What a Grid Engine profile asks for, in Grid Engine's own words: one dataclass, ``GridEngineSettings``.

Its fields are the profile keys of the Grid Engine executor (``PROFILE_KEYS`` is made of them, with their types
and help: scheduler/profile.py ``setting``), written at the top of a profile as any other key, so that
``--scheduler-option h_vmem=2G`` changes one of them::

    executor: gridengine
    queue: all.q          # -q
    pe: smp               # -pe smp SLOTS, for a job of more than one slot (the profile's cpus_per_task)
    slots: 4              # defaults to cpus_per_task, else 1
    h_rt: "02:00:00"      # -l h_rt (default: the profile's time)
    h_vmem: 8G            # -l h_vmem, per slot as Grid Engine counts it
    project: rad-ai       # -P
    qsub_options: ["-l", "gpu=1"]   # more qsub words, each checked

The same keys may also be grouped under ``gridengine:`` (``options`` for ``qsub_options``); a key at the top wins.
``mem_gb`` (memory per job in GB, what a sweep's ``--retry OUT_OF_MEMORY:mem*2`` writes) becomes ``h_vmem`` =
``mem_gb`` / slots when set. A misspelled key is refused with the list of valid ones. Every value must be made of
the characters Grid Engine accepts for its field (letters, digits and ``_ . - + = : , / @``): qsub reads each
``#$`` line as option words, so a space, a quote or a ``$`` in a value would change the options; such a value is
refused before any script is written (job_script.py then writes each word through ``shlex.quote``, which leaves
such words as they are).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from hpc_runner.errors import ClusterError
from hpc_runner.scheduler.gridengine.answers import ge_memory_bytes, ge_time_s
from hpc_runner.scheduler.profile import KeySpec, keys_of, setting
from hpc_runner.scheduler.setting_values import refuse_unknown, true_or_false, whole_number

KEYS = ("queue", "pe", "slots", "h_rt", "h_vmem", "project", "options", "notify", "rerunnable")  # in gridengine:
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}")  # a queue, a PE, a project (sge_types(1) "name")
_QUEUE = re.compile(r"[A-Za-z0-9_*][A-Za-z0-9_.+*@-]{0,254}")  # all.q, all.q@host, *@host
_WORD = re.compile(r"[A-Za-z0-9_.+=:,/@%-]{1,512}")  # any other qsub word the profile adds
_TIME = re.compile(r"[0-9]{1,9}(:[0-9]{1,2}){0,2}")
_MEMORY = re.compile(r"[0-9]{1,15}(\.[0-9]{1,6})?[KMGTkmgt]?")
# qsub options a profile's ``options`` must not hold: hpc-runner writes them itself, from checked values
RESERVED = frozenset({"-t", "-tc", "-hold_jid", "-N", "-o", "-e", "-j", "-S", "-cwd", "-wd", "-terse", "-sync",
                      "-b", "-C", "-@", "-i", "-shell", "-clear"})
MAX_SLOTS = 1 << 16


_N = type(None)


@dataclass(frozen=True)
class GridEngineSettings:
    """A Grid Engine profile's requests, checked (``from_mapping``) and ready for the job script; each field a
    profile key (its types and help)."""

    queue: str | None = setting((str, _N), "the queue (qsub -q), e.g. all.q or all.q@host")
    pe: str = setting((str,), "the parallel environment of a job of more than one slot (-pe PE SLOTS)", "smp")
    slots: int = setting((int, _N), "slots per job (default: cpus_per_task, else 1)", 1)
    h_rt: str | None = setting((str, int, _N), "the run-time limit (-l h_rt), seconds or H:M:S (default: time)")
    h_vmem: str | None = setting((str, _N), "memory per slot (-l h_vmem) as Grid Engine writes it, e.g. 4G")
    project: str | None = setting((str, _N), "the project (qsub -P)")
    options: tuple[str, ...] = setting((list,), "more qsub words, e.g. [-l, gpu=1] (profile key qsub_options)", ())
    notify: bool = setting((bool,), "-notify: SIGUSR2 the queue's notify seconds before a kill (default true)",
                           True)
    rerunnable: bool = setting((bool,), "-r y: exit 99 (a stop signal's requeue) runs the job again (default "
                               "true)", True)

    @property
    def h_rt_s(self) -> float | None:
        return None if self.h_rt is None else ge_time_s(self.h_rt)

    @property
    def h_vmem_bytes(self) -> int | None:
        return None if self.h_vmem is None else ge_memory_bytes(self.h_vmem)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], where: str | None = None, *, time_minutes: int | None = None,
                     cpus: int | None = None) -> GridEngineSettings:
        """Return the settings of a profile's ``gridengine:`` mapping; ``time_minutes`` (the profile's ``time``)
        is the ``h_rt`` when it names none, ``cpus`` (``cpus_per_task``) the slots. ClusterError naming the key
        for an unknown key or a value Grid Engine would not take."""
        if not isinstance(values, Mapping):
            raise ClusterError("gridengine: must be a mapping", where=where, expected=f"keys among {', '.join(KEYS)}")
        refuse_unknown(values, KEYS, "Grid Engine", where)
        out: dict[str, Any] = {}
        if values.get("queue") is not None:
            out["queue"] = _checked(values["queue"], "queue", _QUEUE, where, "a queue name such as all.q")
        for key in ("pe", "project"):
            if values.get(key) is not None:
                out[key] = _checked(values[key], key, _NAME, where, "a name of letters, digits, _ . + -")
        slots = values.get("slots", cpus)
        if slots is not None:
            out["slots"] = whole_number(slots, "gridengine: slots", 1, MAX_SLOTS, where)
        h_rt = values.get("h_rt")
        if h_rt is None and time_minutes is not None:
            h_rt = str(int(time_minutes) * 60)
        if h_rt is not None:
            text = _checked(str(h_rt) if isinstance(h_rt, int) and not isinstance(h_rt, bool) else h_rt, "h_rt",
                            _TIME, where, "seconds or H:M:S, e.g. 7200 or 2:00:00")
            if not ge_time_s(text):
                raise ClusterError(f"gridengine: h_rt {text!r} is no time at all", where=where,
                                   expected="a time limit above 0")
            out["h_rt"] = text
        if values.get("h_vmem") is not None:
            text = _checked(values["h_vmem"], "h_vmem", _MEMORY, where, "a size such as 300M or 8G (per slot)")
            if not ge_memory_bytes(text):
                raise ClusterError(f"gridengine: h_vmem {text!r} is no memory at all", where=where,
                                   expected="a size above 0, e.g. 8G")
            out["h_vmem"] = text
        options = values.get("options") or []
        if not isinstance(options, list | tuple):
            raise ClusterError("gridengine: options must be a list of qsub words", where=where,
                               expected='e.g. ["-l", "gpu=1"]')
        words = tuple(_checked(w, "options item", _WORD, where, "letters, digits and _ . + = : , / @ % -")
                      for w in options)
        taken = sorted(RESERVED.intersection(words))
        if taken:
            raise ClusterError(f"gridengine: options holds {', '.join(taken)}, which hpc-runner writes itself",
                               where=where, expected="other qsub options (-l, -q, -P, -A, -m, ...)")
        out["options"] = words
        for key in ("notify", "rerunnable"):
            if key in values:
                out[key] = true_or_false(values[key], f"gridengine: {key}", where)
        return cls(**out)

    @classmethod
    def from_profile(cls, settings: Mapping[str, Any], where: str | None = None, *,
                     time_minutes: int | None = None) -> GridEngineSettings:
        """Return the settings of a whole profile: its ``gridengine:`` mapping, then its top-level keys (which
        win), then ``mem_gb`` as ``h_vmem`` per slot (see the module's text)."""
        grouped = settings.get("gridengine") or {}
        if not isinstance(grouped, Mapping):
            raise ClusterError("gridengine: must be a mapping", where=where, expected=f"keys among {', '.join(KEYS)}")
        values = dict(grouped)
        for key in TOP_KEYS:
            if settings.get(key) is not None:
                values[TOP_KEYS[key]] = settings[key]
        out = cls.from_mapping(values, where, time_minutes=time_minutes, cpus=settings.get("cpus_per_task"))
        mem_gb = settings.get("mem_gb")
        if isinstance(mem_gb, int | float) and not isinstance(mem_gb, bool) and mem_gb > 0:
            per_slot_mb = max(1, math.ceil(mem_gb * 1024 / out.slots))
            out = replace(out, h_vmem=f"{per_slot_mb}M")
        return out


# the profile's top-level keys: the fields, ``options`` named ``qsub_options`` (a bare ``options`` says too little)
TOP_KEYS = {("qsub_options" if f.name == "options" else f.name): f.name for f in fields(GridEngineSettings)}
PROFILE_KEYS: dict[str, KeySpec] = {
    **{top: keys_of(GridEngineSettings)[name] for top, name in TOP_KEYS.items()},
    "gridengine": ((dict,), "the same keys grouped in one mapping (options for qsub_options; a key at the top "
                   "wins)"),
}


def _checked(value: Any, key: str, pattern: re.Pattern[str], where: str | None, expected: str) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise ClusterError(f"gridengine: {key} {str(value)[:60]!r} is not one Grid Engine takes", where=where,
                           expected=expected)
    return value

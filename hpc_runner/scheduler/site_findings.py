"""What ``hpc-runner cluster check`` found, as a profile keeps it (``checked:``), and what follows from it.

The check's findings are written into the profile (scheduler/cluster_check.py) as one ``checked:`` mapping::

    checked:
      date: '2025-06-01T10:00:00'
      by: hpc-runner cluster check jade
      partitions:
        small:
          node: vm1
          job_id: '123'
          findings:
            accounting: {ok: false, detail: ..., workaround: states from the queue and the jobs' exit files}
            requeue: {ok: true, detail: ...}

This module owns that shape: ``CHECKS`` names every check and the workaround used where it failed, ``parse_checked``
reads a (possibly hand-edited) section into typed ``Finding``s, ``checked_lines`` is what ``cluster show`` prints,
and ``submission_notes`` is what a submission says before it queues (a fatal one: it cannot work there).
``uses_workaround`` is how the code that acts on a workaround asks (the SLURM executor: no sacct, no requeue).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hpc_runner.errors import ClusterError

CHECKED_KEY = "checked"


@dataclass(frozen=True)
class Check:
    """One thing the check proves: its title for people, and the workaround used where it fails (None: none)."""

    name: str
    title: str
    workaround: str | None = None
    fatal: str | None = None  # what a submission needs of it to work at all (None: it only degrades)


CHECKS: dict[str, Check] = {c.name: c for c in (
    Check("job", "the check job ran its probes"),
    Check("accounting", "accounting answers for the job (state, elapsed, peak memory, CPUs)",
          "states from the queue and the jobs' exit files"),
    Check("stop_signal", "the stop signal reaches the python process before the time limit",
          "none: a run is not warned before its limit; keep checkpoints frequent"),
    Check("requeue", "the job may requeue itself", "resubmit instead of requeue"),
    Check("requeue_flag", "the scheduler's record lets the job be requeued", "resubmit instead of requeue"),
    Check("gpus", "the GPUs visible match the request"),
    Check("cpu_binding", "the CPUs the job is bound to match the CPUs per task"),
    Check("scratch", "node-local scratch exists and takes writes", "staging off"),
    Check("shm", "/dev/shm is there and large enough for data-loader workers"),
    Check("setup", "the profile's setup lines run"),
    Check("imports", "torch and MONAI import in the job's environment", fatal="the job's python imports them"),
    Check("container", "the container runtime exists on the node", fatal="the profile's container"),
    Check("queue_wait", "how long the check job waited in the queue"),
)}
# the workarounds other code acts on, by what it asks (``uses_workaround``)
NO_ACCOUNTING, RESUBMIT, NO_STAGING = "accounting", "requeue", "scratch"
_ACTS_ON = {NO_ACCOUNTING: ("accounting",), RESUBMIT: ("requeue", "requeue_flag"), NO_STAGING: ("scratch",)}


@dataclass(frozen=True)
class Finding:
    """One check's answer on one partition: ``ok`` (None: nothing to check), its line, the workaround chosen."""

    name: str
    ok: bool | None
    detail: str
    workaround: str | None = None
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def title(self) -> str:
        """What the check proves, for people."""
        check = CHECKS.get(self.name)
        return check.title if check else self.name

    def line(self) -> str:
        """One line: ``FAILED requeue: the scheduler refused ... -> resubmit instead of requeue``."""
        word = {True: "ok", False: "FAILED", None: "--"}[self.ok]
        return f"{word} {self.name}: {self.detail}" + (f" -> {self.workaround}" if self.workaround else "")

    def to_record(self) -> dict[str, Any]:
        """The mapping the profile keeps (plain YAML scalars)."""
        out: dict[str, Any] = {"ok": self.ok, "detail": self.detail}
        if self.workaround:
            out["workaround"] = self.workaround
        out.update({k: v for k, v in self.figures.items() if k not in out})
        return out


def make_finding(name: str, answer: Mapping[str, Any]) -> Finding:
    """Return a probe's answer (``{"ok", "detail", ...figures}``) as a Finding, the workaround chosen when failed."""
    ok = answer.get("ok")
    ok = ok if isinstance(ok, bool) else None
    check = CHECKS.get(name)
    workaround = check.workaround if ok is False and check is not None else None
    figures = {str(k): v for k, v in answer.items() if k not in ("ok", "detail", "workaround")
               and isinstance(v, str | int | float | bool | type(None))}
    return Finding(name, ok, _one_line(answer.get("detail")), workaround, figures)


def _one_line(text: Any, limit: int = 300) -> str:
    """``text`` as one printable line (what a probe said may hold a command's output)."""
    return "".join(c if c.isprintable() else " " for c in str(text if text is not None else ""))[:limit]


@dataclass
class PartitionFindings:
    """Every finding of one partition's check job."""

    partition: str  # the partition's name, ``default`` for the cluster's own
    findings: dict[str, Finding] = field(default_factory=dict)
    node: str | None = None
    job_id: str | None = None

    def failed(self) -> list[Finding]:
        """The findings that failed, in CHECKS order."""
        return [f for f in self.findings.values() if f.ok is False]

    def to_record(self) -> dict[str, Any]:
        """The mapping the profile keeps for this partition."""
        return {"node": self.node, "job_id": self.job_id,
                "findings": {name: f.to_record() for name, f in self.findings.items()}}


@dataclass
class CheckedSite:
    """A profile's ``checked:`` section: when and how it was checked, and each partition's findings."""

    date: str
    by: str
    partitions: dict[str, PartitionFindings] = field(default_factory=dict)

    def to_record(self) -> dict[str, Any]:
        """The ``checked:`` mapping written into the profile."""
        return {"date": self.date, "by": self.by,
                "partitions": {name: p.to_record() for name, p in self.partitions.items()}}

    def for_partition(self, partition: str | None) -> list[PartitionFindings]:
        """The findings that apply to a job on ``partition`` (every partition checked when it names none or one
        not checked: the job may land on any)."""
        if partition and partition in self.partitions:
            return [self.partitions[partition]]
        return list(self.partitions.values())


def parse_checked(value: Any, where: str) -> CheckedSite | None:
    """Return a profile's ``checked:`` value as a CheckedSite (None when absent); ClusterError naming the key for a
    shape ``cluster check`` does not write (a hand edit)."""
    if value is None:
        return None

    def bad(what: str) -> ClusterError:
        return ClusterError(f"checked: {what}", where=where,
                            expected="the section `hpc-runner cluster check` writes (run it again to rewrite it)")

    if not isinstance(value, Mapping):
        raise bad("is not a mapping")
    partitions = value.get("partitions") or {}
    if not isinstance(partitions, Mapping):
        raise bad("partitions is not a mapping")
    site = CheckedSite(str(value.get("date") or "?"), str(value.get("by") or "?"))
    for name, part in partitions.items():
        if not isinstance(part, Mapping) or not isinstance(part.get("findings") or {}, Mapping):
            raise bad(f"partition {str(name)[:40]!r} is not a mapping with findings")
        found = PartitionFindings(str(name), node=_opt(part.get("node")), job_id=_opt(part.get("job_id")))
        for check, answer in (part.get("findings") or {}).items():
            if not isinstance(answer, Mapping):
                raise bad(f"finding {str(check)[:40]!r} of partition {str(name)[:40]!r} is not a mapping")
            finding = make_finding(str(check), answer)
            if isinstance(answer.get("workaround"), str):  # the workaround written then, even if CHECKS changed
                finding = Finding(finding.name, finding.ok, finding.detail, _one_line(answer["workaround"]),
                                  finding.figures)
            found.findings[str(check)] = finding
        site.partitions[str(name)] = found
    return site


def _opt(value: Any) -> str | None:
    return None if value is None else _one_line(value, 100)


def checked_of(settings: Mapping[str, Any], where: str = "the cluster profile") -> CheckedSite | None:
    """Return the ``checked:`` section of a profile's settings, None when it was never checked."""
    return parse_checked(settings.get(CHECKED_KEY), where)


def checked_lines(site: CheckedSite | None) -> list[str]:
    """What ``cluster show`` prints of the findings: the date, then one line per finding, per partition."""
    if site is None:
        return ["# checked: never (hpc-runner cluster check NAME runs one short job per partition and writes "
                "what it finds here)"]
    out = [f"# checked {site.date} by `{site.by}`:"]
    for part in site.partitions.values():
        out.append(f"#   partition {part.partition}" + (f" (node {part.node}, job {part.job_id})" if part.node else ""))
        out += [f"#     {f.line()}" for f in part.findings.values()]
    return out


def uses_workaround(settings: Mapping[str, Any], what: str, partition: str | None = None) -> bool:
    """True when a check on the partition a job uses (any, when not named) failed so that ``what`` is worked
    around: ``NO_ACCOUNTING`` (states from the queue), ``RESUBMIT`` (no requeue), ``NO_STAGING`` (no scratch)."""
    try:
        site = checked_of(settings)
    except ClusterError:
        return False
    if site is None:
        return False
    names = _ACTS_ON[what]
    return any(f.ok is False for part in site.for_partition(partition) for n in names
               if (f := part.findings.get(n)) is not None)


@dataclass(frozen=True)
class SubmissionNote:
    """A line a submission says before queueing because a check it depends on failed; ``fatal``: it cannot work."""

    text: str
    fatal: bool = False


def submission_notes(settings: Mapping[str, Any], *, gpus: int = 0, container: bool = False,
                     partition: str | None = None) -> list[SubmissionNote]:
    """The lines a submission on this profile says before it queues: one per failed check it depends on (the
    workaround it uses), fatal where the job cannot work (its python cannot import torch or MONAI there, or
    the container runtime it needs is missing on the nodes)."""
    site = checked_of(settings)
    if site is None:
        return []
    notes: list[SubmissionNote] = []
    seen: set[str] = set()
    for part in site.for_partition(partition):
        for f in part.failed():
            if f.name in seen or (f.name == "gpus" and not gpus) or (f.name == "container" and not container):
                continue
            seen.add(f.name)
            check = CHECKS.get(f.name)
            fatal = bool(check and check.fatal) and (f.name != "container" or container)
            head = f"cluster check ({site.date}, partition {part.partition}): {f.name} failed: {f.detail}"
            tail = (f"; {check.fatal} on the nodes, or this job cannot work (fix it, then `{site.by}` again)"
                    if fatal and check else f"; using: {f.workaround}" if f.workaround else "")
            notes.append(SubmissionNote(head + tail, fatal))
    return notes


def say_before_queueing(settings: Mapping[str, Any], say: Callable[[str], None], *, gpus: int = 0,
                        container: bool = False, partition: str | None = None) -> list[SubmissionNote]:
    """Say each note of ``submission_notes`` (one line each); ClusterError for the first fatal one (nothing is
    queued: the job could not work there). Return the notes said."""
    notes = submission_notes(settings, gpus=gpus, container=container, partition=partition)
    for note in notes:
        if note.fatal:
            raise ClusterError(note.text, expected="a cluster where the check passed, or the fix it names",
                               hint="`hpc-runner cluster show NAME` prints every finding")
        say(f"hpc-runner: {note.text}")
    return notes

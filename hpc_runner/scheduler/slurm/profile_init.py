"""`hpc-runner cluster init`: a profile written from what this SLURM cluster says about itself and about you.

``sinfo`` gives the partitions (the default one marked ``*``), their nodes' CPUs, memory, GPUs (GRES) and time
limits; ``sacctmgr`` your associations (accounts, QOS, the default QOS) and each QOS's submit limit; ``scontrol
show config`` MaxArraySize. :func:`profile_lines` turns them into (key, value, where it came from): a plain
function of the commands' text, tested on golden outputs of the local SLURM.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hpc_runner.errors import ClusterError
from hpc_runner.records.command_output import run_command
from hpc_runner.records.numbers import leading_int
from hpc_runner.scheduler.profile import parse_time_minutes
from hpc_runner.scheduler.slurm.accounts import accounts_of, init_note
from hpc_runner.scheduler.slurm.cluster_info import max_array_size, scheduler_config
from hpc_runner.scheduler.slurm.limits import current_user, parse_associations, parse_qos
from hpc_runner.scheduler.units import slurm_time

SINFO_COMMAND = ["sinfo", "-h", "-o", "%P|%a|%l|%D|%c|%m|%G"]
ASSOC_FORMAT = "format=User,DefaultAccount,Account,Partition,QOS,DefaultQOS,MaxSubmit,MaxJobs"
QOS_COMMAND = ["sacctmgr", "-nP", "show", "qos", "format=Name,MaxSubmitPU,MaxJobsPU"]
DEFAULT_HOURS = 4  # a first profile asks for 4 hours (or the partition's limit, if shorter)


@dataclass(frozen=True)
class Partition:
    """One partition as sinfo prints it."""

    name: str
    default: bool
    up: bool
    time_limit: str  # SLURM's form (``1-00:00:00``, ``infinite``)
    nodes: int
    cpus: int  # per node
    mem_mb: int  # per node
    gres: str

    @property
    def gpus(self) -> int:
        """GPUs per node from the GRES (``gpu:2``, ``gpu:a100:4(S:0-1)``; 0 without)."""
        total = 0
        for item in self.gres.split(","):
            m = re.match(r"gpu(?::[A-Za-z0-9_.-]+)?:([0-9]+)", item.strip())
            if m:
                total += int(m.group(1))
        return total


def _number(text: str) -> int:
    return leading_int(text)


def parse_sinfo(text: str) -> list[Partition]:
    """Parse ``sinfo -h -o '%P|%a|%l|%D|%c|%m|%G'`` (one line per partition and node kind)."""
    found: dict[str, Partition] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 7 or not parts[0]:
            continue
        name = parts[0].rstrip("*")
        part = Partition(name=name, default=parts[0].endswith("*"), up=parts[1].strip() == "up",
                         time_limit=parts[2].strip(), nodes=_number(parts[3]), cpus=_number(parts[4]),
                         mem_mb=_number(parts[5]), gres="" if parts[6].strip() in ("(null)", "") else parts[6].strip())
        if name not in found:  # several node kinds: the first line speaks for the partition
            found[name] = part
    return list(found.values())


def limit_minutes(limit: str) -> int | None:
    """A partition's time limit in minutes (None for ``infinite`` or what cannot be read)."""
    try:
        return parse_time_minutes(limit)
    except ClusterError:
        return None


def profile_lines(partitions: Sequence[Partition], associations: Sequence[dict[str, Any]],
                  qos: dict[str, dict[str, int | None]], array_size: tuple[int, str],
                  partition: str | None = None, cluster_name: str | None = None,
                  enforce: str = "") -> list[tuple[str, Any, str]]:
    """Return the profile's (key, value, where it came from) lines for ``partition`` (default: the cluster's);
    a line whose key is ``#`` is a comment (``enforce``: AccountingStorageEnforce, for the account's)."""
    if not partitions:
        raise ClusterError("sinfo lists no partition this user can see", expected="a SLURM account on this cluster")
    names = [p.name for p in partitions]
    if partition is not None and partition not in names:
        raise ClusterError(f"partition {partition!r} is not one sinfo lists", expected=f"one of {', '.join(names)}")
    chosen = next((p for p in partitions if p.name == partition), None) or next(
        (p for p in partitions if p.default), partitions[0])
    why = "named with --partition" if partition else ("the default partition (*)" if chosen.default else "the first")
    lines: list[tuple[str, Any, str]] = [
        ("extends", "slurm", "the built-in SLURM profile: hpc-runner's defaults for everything not here"),
        ("description", f"{cluster_name or 'this cluster'}, partition {chosen.name}" +
         (", one GPU a job" if chosen.gpus else ""), "scontrol show config: ClusterName" if cluster_name else
         "written by hpc-runner cluster init"),
        ("partition", chosen.name, f"sinfo: {why}; {chosen.nodes} node(s) of {chosen.cpus} CPUs, "
         f"{chosen.mem_mb} MB{f', {chosen.gres}' if chosen.gres else ''}; {'up' if chosen.up else 'NOT UP'}"),
        ("partitions", names, "sinfo: the partitions you can see (--slurm partition=NAME picks another)"),
    ]
    gpus = chosen.gpus
    share = max(gpus, 1)
    lines.append(("cpus_per_task", max(1, chosen.cpus // share),
                  f"sinfo: {chosen.cpus} CPUs a node" + (f", shared by its {gpus} GPUs" if gpus else "")))
    if gpus:
        lines.append(("gpus_per_node", 1, f"sinfo GRES: {chosen.gres} a node; one GPU a job"))
    if chosen.mem_mb:
        lines.append(("mem_gb", max(1, chosen.mem_mb // 1024 // share),
                      f"sinfo: {chosen.mem_mb} MB a node" + (f", shared by its {gpus} GPUs" if gpus else "")))
    limit = limit_minutes(chosen.time_limit)
    minutes = min(limit, DEFAULT_HOURS * 60) if limit else DEFAULT_HOURS * 60
    lines.append(("time", slurm_time(minutes), f"sinfo: the partition allows {chosen.time_limit}; a first profile asks "
                  f"for {DEFAULT_HOURS} hours at most"))
    mine = [a for a in associations if a.get("partition") in (None, chosen.name)] or list(associations)
    if mine:
        account = mine[0].get("default_account") or mine[0].get("account")
        accounts = sorted({a["account"] for a in mine if a.get("account")})
        lines.append(("account", account, ("sacctmgr: your default account" if mine[0].get("default_account") else
                                           "sacctmgr: the first account it lists (you have no default account)") +
                      (f" (also: {', '.join(a for a in accounts if a != account)})" if len(accounts) > 1 else "")))
        note = init_note(accounts_of(mine), enforce, account)
        if note:
            lines.append(("#", None, note))
        default_qos = mine[0].get("default_qos")
        allowed = sorted({q for a in mine for q in a.get("qos", [])})
        if default_qos:
            lines.append(("qos", default_qos, f"sacctmgr: your default QOS (allowed: {', '.join(allowed)})"))
            limit_pu = (qos.get(default_qos) or {}).get("max_submit_pu")
            if limit_pu:
                lines.append(("max_submit_jobs", limit_pu, f"sacctmgr: QOS {default_qos} MaxSubmitPU"))
    lines.append(("max_array_size", array_size[0], array_size[1]))
    return lines


def _run(cmd: Sequence[str]) -> str:
    try:
        res = run_command(list(cmd), timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ClusterError(f"`{' '.join(cmd[:3])}` could not run ({exc})",
                           expected="a machine with the SLURM client commands (a login node)") from None
    if res.returncode != 0:
        raise ClusterError(f"`{' '.join(cmd[:3])}` failed: {(res.stderr or res.stdout).strip()[:300]}",
                           expected="a SLURM controller that answers from here")
    return res.stdout


def read_cluster(partition: str | None = None) -> list[tuple[str, Any, str]]:
    """Ask this cluster (sinfo, sacctmgr, scontrol) and return the profile lines for ``partition``."""
    partitions = parse_sinfo(_run(SINFO_COMMAND))
    try:
        associations = parse_associations(_run(["sacctmgr", "-nP", "show", "user", current_user(), "withassoc",
                                                ASSOC_FORMAT]))
        qos = parse_qos(_run(QOS_COMMAND))
    except ClusterError:  # no accounting database: partitions only
        associations, qos = [], {}
    config = scheduler_config()
    return profile_lines(partitions, associations, qos, max_array_size(), partition,
                         config.get("ClusterName") or None, config.get("AccountingStorageEnforce", ""))

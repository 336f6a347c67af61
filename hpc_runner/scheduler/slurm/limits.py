"""The submit limits that apply to this user, and how many of their jobs already count against each.

SLURM refuses an sbatch that would take the user past a submit limit (the whole array is refused,
and each array task counts as one job, pending or running alike). The limits read here:

- ``MaxArraySize`` and ``MaxJobCount`` from ``scontrol show config`` (MaxJobCount is cluster-wide:
  other users' jobs count too, and only ours are counted here, so a full cluster is found out by
  sbatch's refusal and the governor's back-off, not by this count);
- the association's ``MaxSubmitJobs``/``MaxJobs`` and the QOS's ``MaxSubmitJobsPerUser``/
  ``MaxJobsPerUser``, from ``sacctmgr``, only when ``AccountingStorageEnforce`` includes ``limits``
  (otherwise SLURM does not enforce them). The association is the user's in the profile's
  ``account`` (else their default account); the QOS is the profile's ``qos`` (else the
  association's default QOS). sacctmgr's answers are kept a few minutes between commands
  (limits_cache.py: it asks slurmdbd, ~0.2-0.3 s a call); the queue below is always asked.
- the profile's ``max_submit_jobs`` (all of the user's jobs count), where accounting cannot be read
  or the user wants to leave room for others.

MaxJobs limits only how many run at once (the others wait with reason ``QOSMaxJobsPerUserLimit``), so
it is reported but does not reduce the free submit slots. The queued jobs are counted with one
``squeue -h -r -u USER -o %i|%a|%q`` call.
"""

from __future__ import annotations

import os
import pwd
import subprocess
from collections.abc import Callable, Sequence
from typing import Any

from hpc_runner.errors import ClusterError
from hpc_runner.records.command_output import CommandOutput, run_command
from hpc_runner.records.numbers import outside_int
from hpc_runner.scheduler.executor import Limit, SubmitLimits
from hpc_runner.scheduler.slurm import limits_cache
from hpc_runner.scheduler.slurm.cluster_info import NO_CONTROLLER, max_array_size, scheduler_config
from hpc_runner.scheduler.slurm.command_job import UNREADABLE

# words in an sbatch refusal that mean "try again when a slot is free", not "this job is wrong"
LIMIT_MESSAGES = (
    "QOSMaxSubmitJobPerUserLimit",
    "QOSMaxSubmitJobPerAccountLimit",
    "QOSGrpSubmitJobsLimit",
    "AssocMaxSubmitJobLimit",
    "AssocGrpSubmitJobsLimit",
    "MaxJobCount",
    "Socket timed out",
    "Resource temporarily unavailable",
    "job submit limit",
)

Runner = Callable[[Sequence[str]], CommandOutput]


def is_limit_refusal(message: str) -> bool:
    """True when sbatch's message says a submit limit (or a busy controller) refused the job. Never for our own
    verdicts that quote what a command printed: no controller answers at all (resource_check.unanswered; a later try
    finds none either, and an answer of ``scontrol ping`` that printed ``MaxJobCount`` was retried for 15 s), or
    sbatch exited 0 with an answer that could not be read (command_job; a job may be queued: no second try)."""
    if message.lstrip().startswith((NO_CONTROLLER, UNREADABLE)):
        return False
    low = message.lower()
    return any(m.lower() in low for m in LIMIT_MESSAGES)


def current_user() -> str:
    """Return the name of the user running this process (the one SLURM counts jobs for)."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return os.environ.get("USER") or str(os.getuid())


def _run(cmd: Sequence[str], timeout: float = 30) -> CommandOutput:
    return run_command(list(cmd), timeout=timeout)


def _int(value: str) -> int | None:
    return outside_int(value)


def parse_associations(text: str) -> list[dict[str, Any]]:
    """Parse ``sacctmgr -nP show user U withassoc format=User,DefaultAccount,Account,Partition,QOS,DefaultQOS,
    MaxSubmit,MaxJobs``."""
    rows = []
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 8 or not parts[0]:
            continue
        user, default_account, account, partition, qos, default_qos, max_submit, max_jobs = parts[:8]
        rows.append({
            "user": user, "default_account": default_account or None, "account": account or None,
            "partition": partition or None, "qos": [q for q in qos.split(",") if q],
            "default_qos": default_qos or None, "max_submit": _int(max_submit), "max_jobs": _int(max_jobs),
        })
    return rows


def parse_qos(text: str) -> dict[str, dict[str, int | None]]:
    """Parse ``sacctmgr -nP show qos format=Name,MaxSubmitPU,MaxJobsPU`` into {name: limits}."""
    out: dict[str, dict[str, int | None]] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 3 and parts[0]:
            out[parts[0]] = {"max_submit_pu": _int(parts[1]), "max_jobs_pu": _int(parts[2])}
    return out


def parse_queue(text: str) -> list[tuple[str, str, str]]:
    """Parse ``squeue -h -r -o %i|%a|%q`` into (job id, account, qos), one per job or array task."""
    jobs = []
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 3 and parts[0]:
            jobs.append((parts[0], parts[1], parts[2]))
    return jobs


def _choose_association(rows: list[dict[str, Any]], account: str | None, partition: str | None) -> dict | None:
    if not rows:
        return None
    account = account or rows[0]["default_account"]
    mine = [r for r in rows if r["account"] == account]
    # a partition-specific association wins over the account-wide one for jobs in that partition
    return next((r for r in mine if partition and r["partition"] == partition), None) or next(
        (r for r in mine if not r["partition"]), None) or (mine[0] if mine else None)


def _qos_of(assoc: dict[str, Any] | None, wanted: str | None) -> str | None:
    if wanted:
        return wanted
    if assoc is None:
        return None
    if assoc["default_qos"]:
        return assoc["default_qos"]
    return "normal" if not assoc["qos"] or "normal" in assoc["qos"] else assoc["qos"][0]


def read_limits(
    settings: dict[str, Any], user: str | None = None, run: Runner | None = None, *, fresh: bool = False
) -> SubmitLimits:
    """Return the limits for a job submitted with the profile ``settings``, with the user's queued jobs counted
    (the association and QOS limits as sacctmgr gave them within ``HPCR_LIMITS_CACHE_S``, unless ``fresh``
    or ``run`` is given: limits_cache.py)."""
    may_keep = run is None and not fresh
    run = run or _run
    user = user or current_user()
    out = SubmitLimits(user=user)
    out.max_array_size, out.max_array_source = max_array_size(settings.get("max_array_size"))
    config = scheduler_config()
    max_job_count = _int(config.get("MaxJobCount", ""))
    enforce = config.get("AccountingStorageEnforce", "").lower()
    assoc = None
    if "limits" in enforce or "qos" in enforce or "safe" in enforce:
        policy = [_assoc_command(user), QOS_COMMAND]
        cluster = config.get("ClusterName", "")
        remembered = limits_cache.kept(cluster, user, policy) if may_keep else None
        if remembered is not None:
            run = _answered(run, policy, remembered[0])
            out.notes.append(f"association and QOS limits as sacctmgr gave them {remembered[1]:.0f} s ago "
                             f"(kept {limits_cache.keep_seconds():g} s: {limits_cache.KEEP_ENV})")
        run = _asked_at_once(run, [*(policy if remembered is None else []), _queue_command(user)])
        assoc, qos_rows, answers = _read_accounting(user, settings, out, run)
        if remembered is None and may_keep and answers is not None:
            limits_cache.keep(cluster, user, policy, answers)
        out.qos = _qos_of(assoc, settings.get("qos"))
        out.account = (assoc or {}).get("account") or settings.get("account")
        if assoc and assoc["max_submit"] is not None:
            out.limits.append(Limit("MaxSubmitJobs", f"association {user}@{out.account} (sacctmgr)",
                                    assoc["max_submit"]))
        if assoc and assoc["max_jobs"] is not None:
            out.limits.append(Limit("MaxJobs", f"association {user}@{out.account} (sacctmgr)", assoc["max_jobs"],
                                    limits_submission=False))
        q = qos_rows.get(out.qos or "", {})
        if q.get("max_submit_pu") is not None:
            out.limits.append(Limit("MaxSubmitJobsPerUser", f"QOS {out.qos} (sacctmgr)", int(q["max_submit_pu"])))
        if q.get("max_jobs_pu") is not None:
            out.limits.append(Limit("MaxJobsPerUser", f"QOS {out.qos} (sacctmgr)", int(q["max_jobs_pu"]),
                                    limits_submission=False))
    elif config:
        out.notes.append("AccountingStorageEnforce has no `limits`: SLURM enforces no association/QOS limit")
    else:
        out.notes.append("scontrol show config did not answer")
    if settings.get("max_submit_jobs") is not None:
        out.limits.append(Limit("max_submit_jobs", "the cluster profile", int(settings["max_submit_jobs"])))
    if max_job_count:
        out.limits.append(Limit("MaxJobCount", "scontrol show config (cluster-wide; only this user's jobs counted)",
                                max_job_count))
    if out.limits:
        _count_queued(out, run)
    return out


QOS_COMMAND = ["sacctmgr", "-nP", "show", "qos", "format=Name,MaxSubmitPU,MaxJobsPU"]


def assoc_command(user: str) -> list[str]:
    """sacctmgr's command for ``user``'s associations (accounts, default account, QOS, limits), one row each."""
    return ["sacctmgr", "-nP", "show", "user", user, "withassoc",
            "format=User,DefaultAccount,Account,Partition,QOS,DefaultQOS,MaxSubmit,MaxJobs"]


_assoc_command = assoc_command


def _queue_command(user: str) -> list[str]:
    return ["squeue", "-h", "-r", "-u", user, "-o", "%i|%a|%q"]


def _asked_at_once(run: Runner, commands: list[list[str]]) -> Runner:
    """Start ``commands`` together and return a runner that answers them from those calls (others as usual).

    Each sacctmgr/squeue call waits ~0.15 s on slurmdbd or slurmctld; asked one after another they were
    most of the time `sweep` spends before its first sbatch at 10,000 points.
    """
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(commands)) as pool:
        futures = {tuple(c): pool.submit(run, c) for c in commands}

    def answer(cmd: Sequence[str], *args: Any, **kwargs: Any) -> CommandOutput:
        future = futures.pop(tuple(cmd), None)
        return future.result() if future is not None else run(cmd, *args, **kwargs)

    return answer


def _read_accounting(
    user: str, settings: dict[str, Any], out: SubmitLimits, run: Runner
) -> tuple[dict[str, Any] | None, dict[str, dict[str, int | None]], list[str] | None]:
    """The association and QOS rows that apply, and sacctmgr's two answers when it gave them."""
    try:
        res = run(_assoc_command(user))
        qres = run(QOS_COMMAND)
    except (OSError, subprocess.SubprocessError) as exc:
        out.notes.append(f"sacctmgr did not answer ({exc})")
        return None, {}, None
    if res.returncode != 0 or qres.returncode != 0:
        out.notes.append(f"sacctmgr failed: {(res.stderr or qres.stderr).strip()[:200]}")
        return None, {}, None
    assoc = _choose_association(parse_associations(res.stdout), settings.get("account"), settings.get("partition"))
    if assoc is None:
        out.notes.append(f"sacctmgr lists no association for {user}")
    return assoc, parse_qos(qres.stdout), [res.stdout, qres.stdout]


def _answered(run: Runner, commands: list[list[str]], answers: list[str]) -> Runner:
    """A runner that answers ``commands`` with the kept ``answers`` (others as ``run`` does)."""
    kept = {tuple(c): a for c, a in zip(commands, answers, strict=True)}

    def answer(cmd: Sequence[str], *args: Any, **kwargs: Any) -> CommandOutput:
        text = kept.get(tuple(cmd))
        return CommandOutput(tuple(cmd), 0, text, "") if text is not None else run(cmd, *args, **kwargs)

    return answer


def forget_kept_limits() -> None:
    """Drop this user's kept association and QOS limits (sbatch refused a job for one: they changed)."""
    limits_cache.forget(scheduler_config().get("ClusterName", ""), current_user())


def queued_jobs(user: str, run: Runner | None = None) -> list[tuple[str, str, str]]:
    """Return the user's jobs in the queue, one per array task: (job id, account, qos); one squeue call."""
    try:
        res = (run or _run)(_queue_command(user))
    except (OSError, subprocess.SubprocessError) as exc:
        raise ClusterError(f"cannot count the jobs already queued (squeue: {exc})") from None
    if res.returncode != 0:
        raise ClusterError(f"cannot count the jobs already queued: squeue says {res.stderr.strip()[:300]}")
    return parse_queue(res.stdout)


def _count_queued(out: SubmitLimits, run: Runner) -> None:
    out.jobs = queued_jobs(out.user, run)
    out.recount()

"""Whether this SLURM needs each job to name an account, and which accounts the user has.

SLURM refuses a job with no valid association when ``AccountingStorageEnforce`` includes ``associations``
(``limits``, ``qos`` and ``safe`` imply it). A job without ``--account`` gets the user's default account; a user
with no default account has every such job refused ("Invalid account or account/partition combination"), and a
user with several accounts has it charged to the default, which may not be the project meant. The accounts come
from the same sacctmgr command limits.py asks (and limits_cache.py keeps a few minutes).

:func:`account_note` is the dry run's line (a profile and ``--scheduler-option`` that name no account);
:func:`init_note` is ``cluster init``'s (the profile it writes names the default account, or the first).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hpc_runner.records.command_output import CommandOutput, run_command
from hpc_runner.scheduler.slurm import limits_cache
from hpc_runner.scheduler.slurm.cluster_info import scheduler_config
from hpc_runner.scheduler.slurm.limits import assoc_command, current_user, parse_associations

ENFORCING = ("associations", "limits", "qos", "safe")  # each means: a job needs a valid association
Runner = Callable[[Sequence[str]], CommandOutput]


@dataclass(frozen=True)
class Accounts:
    """The user's accounts as sacctmgr lists them, and their default one (None: none is set)."""

    names: tuple[str, ...]
    default: str | None

    @property
    def ambiguous(self) -> bool:
        """True when a job that names no account may be refused or charged to a project not meant."""
        return len(self.names) > 1 or not self.default

    def listed(self) -> str:
        """``a, b (default a)``, ``a (no default account)``, or ``none``."""
        if not self.names:
            return "none"
        return ", ".join(self.names) + (f" (default {self.default})" if self.default else " (no default account)")


def requires_association(enforce: str | None = None) -> bool:
    """True when ``AccountingStorageEnforce`` (``scontrol show config``'s, when None) makes SLURM refuse a job
    without a valid association."""
    if enforce is None:
        enforce = scheduler_config().get("AccountingStorageEnforce", "")
    words = {w.strip() for w in enforce.lower().split(",")}
    return any(w in words for w in ENFORCING)


def accounts_of(rows: Sequence[Mapping[str, Any]]) -> Accounts:
    """The accounts and the default account in parsed association rows (limits.parse_associations)."""
    names = tuple(sorted({str(r["account"]) for r in rows if r.get("account")}))
    default = next((str(r["default_account"]) for r in rows if r.get("default_account")), None)
    return Accounts(names, default)


def user_accounts(user: str | None = None, run: Runner | None = None) -> Accounts | None:
    """The user's accounts, from sacctmgr's answer kept by limits_cache.py when young enough, else asked now
    (and kept); None when sacctmgr does not answer."""
    user = user or current_user()
    command = assoc_command(user)
    cluster = scheduler_config().get("ClusterName", "")
    remembered = limits_cache.kept(cluster, user, [command]) if run is None else None
    if remembered is not None:
        return accounts_of(parse_associations(remembered[0][0]))
    try:
        res = (run or (lambda cmd: run_command(list(cmd), timeout=30)))(command)
    except (OSError, subprocess.SubprocessError):
        return None
    if res.returncode != 0:
        return None
    if run is None:
        limits_cache.keep(cluster, user, [command], [res.stdout])
    return accounts_of(parse_associations(res.stdout))


def account_note(settings: Mapping[str, Any], run: Runner | None = None) -> str | None:
    """The dry run's one line when the jobs name no account (profile, ``--scheduler-option``, SBATCH_ACCOUNT)
    and SLURM needs an association here, and the user's accounts leave it open: several, or no default."""
    extra = settings.get("sbatch")
    named = isinstance(extra, Mapping) and any(str(k) in ("account", "A") for k in extra)  # sbatch: {account: x}
    if settings.get("account") or named or os.environ.get("SBATCH_ACCOUNT") or not requires_association():
        return None
    accounts = user_accounts(run=run)
    if accounts is None or not accounts.ambiguous:
        return None
    example = accounts.names[0] if accounts.names else "NAME"
    if accounts.default:
        what = f"the jobs are charged to your default account {accounts.default} (your accounts: {accounts.listed()})"
    else:
        what = (f"you have no default account, so sbatch refuses a job that names none (your accounts: "
                f"{accounts.listed()})")
    return (f"# note: no account named, and this SLURM requires an association for each job "
            f"(AccountingStorageEnforce): {what}; name one with `account: {example}` in the profile or "
            f"--scheduler-option account={example}")


def init_note(accounts: Accounts, enforce: str, written: str | None) -> str | None:
    """``cluster init``'s one line (and profile comment) when SLURM needs an association and the user's accounts
    leave the choice open; ``written``: the account the profile names."""
    if not accounts.ambiguous or not requires_association(enforce):
        return None
    if written:
        chosen = (f"the profile's `account:` is {written}, your default" if written == accounts.default else
                  f"the profile's `account:` is {written}, the first sacctmgr lists (no default account is set)")
    else:
        chosen = "the profile names no `account:`, and sbatch refuses a job without one"
    return (f"this SLURM requires an association for each job (AccountingStorageEnforce={enforce}) and your "
            f"accounts are {accounts.listed()}: {chosen}; edit `account:` to charge another")

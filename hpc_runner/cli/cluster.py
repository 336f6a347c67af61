"""`hpc-runner cluster init NAME`: write a profile from what the cluster says; `cluster show NAME`: read one back."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from hpc_runner.errors import ClusterError, UserError
from hpc_runner.records.atomic import write_text_atomic
from hpc_runner.records.json_out import dumps_json
from hpc_runner.records.read import read_record_text
from hpc_runner.records.user_cache import user_cache_dir
from hpc_runner.scheduler import cluster_check as cc
from hpc_runner.scheduler.profiles import (
    BUILTIN_DIR,
    MAX_PROFILE_BYTES,
    available_profiles,
    check_new_profile,
    load_profile,
    search_path,
)
from hpc_runner.scheduler.select import executor_for
from hpc_runner.scheduler.site_findings import checked_lines, checked_of

HELP = "write a cluster profile from what the scheduler says (init), or show a profile and your limits now (show)"
DESCRIPTION = """\
cluster init NAME   asks the scheduler (sinfo, sacctmgr, scontrol) for the partitions you can see, their nodes'
                    CPUs, memory, GPUs and time limits, your accounts and QOS and their submit limits, and writes
                    ~/.config/hpc-runner/clusters/NAME.yaml (or the first folder of $HPCR_CLUSTER_PATH), each value
                    commented with where it came from; then `--cluster NAME` uses it.
cluster show NAME   prints the profile as it resolves (after extends:), the files it came from, the submit
                    limits that apply to you now, and what `cluster check` found.
cluster check NAME  queues one short job per partition of the profile (or each --partition P) that checks, on a
                    compute node, what hpc-runner relies on (accounting, the stop signal, requeue, GPUs, CPU
                    binding, scratch, /dev/shm, the setup lines, torch and MONAI, the container runtime, the queue
                    wait); waits at most --timeout seconds (cancels its jobs then, or on Ctrl-C) and writes the
                    findings, dated, into the profile's checked: section, with the workaround used where a check
                    failed (docs/cluster-check.md)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the subcommand and its options."""
    parser.add_argument("action", choices=("init", "show", "check"),
                        help="init: write a profile; show: print one; check: prove it on the compute nodes")
    parser.add_argument("name", metavar="NAME", help="the profile's name (init: the file NAME.yaml)")
    parser.add_argument("--partition", metavar="P", action="append",
                        help="init: the partition to use (default: the cluster's); check: a partition to check "
                        "(repeat it; default: the profile's partitions)")
    parser.add_argument("--timeout", metavar="S", type=float, default=900.0,
                        help="check: the most seconds to wait for the check jobs (default 900), then cancelled")
    parser.add_argument("--force", action="store_true", help="init: replace an existing NAME.yaml")
    parser.add_argument("--from", dest="source", metavar="PROFILE",
                        help="init: copy the shipped profile PROFILE (jade, slurm, local) to NAME.yaml to edit, "
                        "without asking a scheduler (where none answers from here)")
    parser.add_argument("--json", action="store_true", help="show, check: print JSON")


def main(args: argparse.Namespace) -> int:
    """Run the command."""
    if args.action == "check":
        return _check(args)
    return _init(args) if args.action == "init" else _show(args)


def profile_text(name: str, lines: list[tuple[str, Any, str]], command: str) -> str:
    """Return the YAML of a profile, one key a line, each with where its value came from (a line whose key is
    ``#``: a comment)."""
    out = [f"# {name}: written by `{command}` from what this cluster says; edit freely",
           "# (hpc-runner cluster show " + name + " prints it as it resolves, with your limits now)"]
    for key, value, where in lines:
        if key == "#":  # a comment line of its own: something to decide before the first submission
            out.append(f"# {_comment(where)}")
            continue
        text = json.dumps(value, allow_nan=False)  # YAML 1.2 reads JSON scalars and lists as they are (ASCII)
        out.append(f"{key}: {text}".ljust(40) + f"  # {_comment(where)}")
    return "\n".join(out) + "\n"


def _comment(text: str) -> str:
    """``text`` as one line of a YAML comment: the scheduler's words, their line breaks and control characters
    (a newline would start a key of its own) shown as spaces."""
    return "".join(c if c.isprintable() else " " for c in str(text))


_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,99}")


def _target(name: str) -> Path:
    if not _NAME.fullmatch(name):  # ASCII only, and no trailing newline (`$` would let one through)
        raise UserError(f"profile name {name!r} cannot be a file name", expected="letters, digits, - and _")
    return search_path(os.environ)[0] / f"{name}.yaml"


def _init(args: argparse.Namespace) -> int:
    target = _target(args.name)
    if target.exists() and not args.force:
        raise UserError(f"{target} exists; nothing was written", where=str(target),
                        expected="another NAME, or --force to replace it")
    if args.source:
        return _init_from_shipped(args.name, args.source, target)
    partition = _one_partition(args)
    executor = executor_for(load_profile("slurm"))
    problem = executor.unreachable(timeout=5.0)
    if problem:
        shipped = ", ".join(sorted(p.stem for p in BUILTIN_DIR.glob("*.yaml")))
        raise UserError(
            f"cluster init reads the partitions, accounts and limits from the scheduler, and none answers here "
            f"({problem}); nothing was written",
            expected=f"to run it on a login node of the cluster; or, instead, copy a shipped profile and edit it: "
            f"`hpc-runner cluster init {args.name} --from jade` (shipped: {shipped}) writes {target}")
    lines = executor.describe_cluster(partition)
    text = profile_text(args.name, lines, f"hpc-runner cluster init {args.name}"
                        + (f" --partition {partition}" if partition else ""))
    # what would be written is read back and checked as a profile first: a scheduler answer the checks refuse
    # leaves nothing behind (no file, no folder), and the file appears whole or not at all
    check_new_profile(args.name, text, target, os.environ)

    write_text_atomic(target, text)
    sys.stdout.write(text)
    for key, _, where in lines:
        if key == "#":
            print(f"hpc-runner: {_comment(where)}", file=sys.stderr)
    print(f"hpc-runner: wrote {target}; use it with --cluster {args.name}", file=sys.stderr)
    return 0


def _init_from_shipped(name: str, source: str, target: Path) -> int:
    """``cluster init NAME --from jade``: the shipped profile, copied whole to edit (no scheduler is asked)."""
    shipped = {p.stem: p for p in BUILTIN_DIR.glob("*.yaml")}
    if source not in shipped:
        raise UserError(f"--from {source}: no shipped profile of that name; nothing was written",
                        expected=f"one of {', '.join(sorted(shipped))}")
    body = read_record_text(shipped[source], "shipped profile") or ""
    text = (f"# {name}: a copy of hpc-runner's shipped profile {source} (`hpc-runner cluster init {name} --from "
            f"{source}`);" + chr(10) + f"# edit partition, account, time and setup for your cluster, then "
            f"`hpc-runner cluster check {name}`" + chr(10) + body)
    check_new_profile(name, text, target, os.environ)
    write_text_atomic(target, text)
    print(f"hpc-runner: wrote {target} (from the shipped profile {source}); edit it, then use --cluster {name}",
          file=sys.stderr)
    return 0


def _show(args: argparse.Namespace) -> int:
    profile = load_profile(args.name)
    executor = executor_for(profile)
    limits = None
    if executor.unreachable(timeout=2.0) is None:
        try:
            limits = executor.limits(fresh=True)  # what the cluster allows now, not a kept answer
        except UserError:
            limits = None
    if args.json:
        found = {"name": profile.name, "files": [str(s) for s in profile.sources], "settings": profile.settings,
                 "limits": None if limits is None else [
                     {"name": lim.name, "source": lim.source, "value": lim.value, "queued": lim.queued}
                     for lim in limits.limits]}
        found["checked"] = profile.settings.get("checked")
        print(dumps_json(found, indent=1, default=str))
        return 0
    print(f"# profile {profile.name} (executor {profile.executor}), from: "
          f"{', '.join(str(s) for s in profile.sources) or 'built in'}")
    for key, value in sorted(profile.settings.items()):
        if key != "checked":  # printed below, one finding a line
            print(f"{key}: {dumps_json(value, default=str)}")

    for line in checked_lines(checked_of(profile.settings, profile.where)):
        print(line)
    if limits is None:
        print("# limits now: none (no scheduler: the jobs run here)" if executor.runs_here else
              "# limits now: the scheduler did not answer from here")
    else:
        print(f"# limits now: {limits.describe()}")
        for lim in limits.limits:
            print(f"#   {lim.name} {lim.value} ({lim.source}), {lim.queued} of your jobs queued against it")
    return 0


def _one_partition(args: argparse.Namespace) -> str | None:
    """init's one ``--partition`` (UserError when several are given)."""
    named = args.partition or []
    if len(named) > 1:
        raise UserError("cluster init takes one --partition", expected="--partition P once (check takes several)")
    return named[0] if named else None


def _profile_file(name: str) -> tuple[Path, str, str]:
    """The file ``cluster check NAME`` writes its findings into, its text now, and the profile's name: the
    profile's own file; for a profile shipped with hpc-runner, a new file of the user's that extends it."""
    if name.endswith((".yaml", ".yml")) or os.sep in name:
        path = Path(name).expanduser()
    else:
        path = available_profiles(os.environ).get(name) or _target(name)
    stem = path.stem
    if path.resolve().parent == BUILTIN_DIR.resolve():
        target = _target(stem)
        return target, f"# {stem}: the profile shipped with hpc-runner, and what `cluster check` found\n" \
            f"extends: {json.dumps(str(path))}\n", stem
    text = read_record_text(path, "cluster profile", MAX_PROFILE_BYTES)
    if text is None:
        raise UserError("the cluster profile file does not exist", where=str(path))
    return path, text, stem


def _check(args: argparse.Namespace) -> int:
    """Queue the check jobs, wait for them (bounded), write their findings into the profile."""
    import math
    import time

    if not (math.isfinite(args.timeout) and args.timeout > 0):
        raise UserError(f"--timeout {args.timeout} is not a positive number of seconds", expected="e.g. --timeout 900")
    profile = load_profile(args.name)
    executor = executor_for(profile)
    problem = executor.unreachable(timeout=5.0)
    if problem:
        raise ClusterError(f"no scheduler answers for profile {profile.name}: {problem}",
                           expected="hpc-runner cluster check on a machine that can submit jobs (a login node)")
    target, text, stem = _profile_file(args.name)
    partitions = cc.partitions_to_check(profile, args.partition)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    folder = user_cache_dir(os.environ) / "cluster-check" / stem / stamp
    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    jobs: list[cc.CheckJob] = []
    try:
        jobs = cc.submit_checks(profile, partitions, folder, executor_for, wait_for_signal=not executor.runs_here)
        say(f"hpc-runner: cluster check {profile.name}: {len(jobs)} job(s) queued ("
            + ", ".join(f"{j.job_id} on {j.partition}" for j in jobs) + f"); waiting at most {round(args.timeout)} s")
        for job in jobs:
            if job.executor.runs_here:
                job.executor.run_pending(say)
        late = cc.wait_for_checks(jobs, args.timeout, log=say)
    except KeyboardInterrupt:
        cc.cancel_checks(jobs)
        say(f"hpc-runner: cluster check interrupted; {len(jobs)} job(s) cancelled; nothing written to {target}")
        return 130
    except BaseException as exc:
        cc.cancel_checks(jobs or getattr(exc, "jobs", []))
        raise
    found = [cc.collect_findings(job, timed_out=job in late) for job in jobs]
    site = cc.checked_site(profile, found, f"hpc-runner cluster check {args.name}")
    new_text = cc.profile_with_checked(text, site)
    check_new_profile(stem, new_text, target, os.environ)  # the file appears whole, and only as a valid profile
    write_text_atomic(target, new_text)
    failed = [f for part in found for f in part.failed()]
    if args.json:
        print(dumps_json({"profile": str(target), "checked": site.to_record()}, indent=1))
    else:
        for line in checked_lines(site):
            print(line.removeprefix("# "))
    say(f"hpc-runner: wrote the findings into {target} ({len(failed)} check(s) failed"
        + (": " + ", ".join(sorted({f.name for f in failed})) if failed else "") + ")")
    return 1 if failed else 0

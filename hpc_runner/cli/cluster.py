"""`hpc-runner cluster init NAME`: write a profile from what the cluster says; `cluster show NAME`: read one back."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from hpc_runner.errors import UserError
from hpc_runner.records.json_out import dumps_json

HELP = "write a cluster profile from what the scheduler says (init), or show a profile and your limits now (show)"
DESCRIPTION = """\
cluster init NAME   asks the scheduler (sinfo, sacctmgr, scontrol) for the partitions you can see, their nodes'
                    CPUs, memory, GPUs and time limits, your accounts and QOS and their submit limits, and writes
                    ~/.config/hpc-runner/clusters/NAME.yaml (or the first folder of $HPCR_CLUSTER_PATH), each value
                    commented with where it came from; then `--cluster NAME` uses it.
cluster show NAME   prints the profile as it resolves (after extends:), the files it came from, and the submit
                    limits that apply to you now."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the subcommand and its options."""
    parser.add_argument("action", choices=("init", "show"), help="init: write a profile; show: print one")
    parser.add_argument("name", metavar="NAME", help="the profile's name (init: the file NAME.yaml)")
    parser.add_argument("--partition", metavar="P", help="init: the partition to use (default: the cluster's)")
    parser.add_argument("--force", action="store_true", help="init: replace an existing NAME.yaml")
    parser.add_argument("--json", action="store_true", help="show: print JSON")


def main(args: argparse.Namespace) -> int:
    """Run the command."""
    return _init(args) if args.action == "init" else _show(args)


def profile_text(name: str, lines: list[tuple[str, Any, str]], command: str) -> str:
    """Return the YAML of a profile, one key a line, each with where its value came from."""
    out = [f"# {name}: written by `{command}` from what this cluster says; edit freely",
           "# (hpc-runner cluster show " + name + " prints it as it resolves, with your limits now)"]
    for key, value, where in lines:
        text = json.dumps(value, allow_nan=False)  # YAML 1.2 reads JSON scalars and lists as they are (ASCII)
        out.append(f"{key}: {text}".ljust(40) + f"  # {_comment(where)}")
    return "\n".join(out) + "\n"


def _comment(text: str) -> str:
    """``text`` as one line of a YAML comment: the scheduler's words, their line breaks and control characters
    (a newline would start a key of its own) shown as spaces."""
    return "".join(c if c.isprintable() else " " for c in str(text))


_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,99}")


def _target(name: str) -> Path:
    from hpc_runner.scheduler.profiles import search_path

    if not _NAME.fullmatch(name):  # ASCII only, and no trailing newline (`$` would let one through)
        raise UserError(f"profile name {name!r} cannot be a file name", expected="letters, digits, - and _")
    return search_path(os.environ)[0] / f"{name}.yaml"


def _init(args: argparse.Namespace) -> int:
    from hpc_runner.scheduler.profiles import check_new_profile, load_profile
    from hpc_runner.scheduler.select import executor_for

    target = _target(args.name)
    if target.exists() and not args.force:
        raise UserError(f"{target} exists; nothing was written", where=str(target),
                        expected="another NAME, or --force to replace it")
    lines = executor_for(load_profile("slurm")).describe_cluster(args.partition)
    text = profile_text(args.name, lines, f"hpc-runner cluster init {args.name}"
                        + (f" --partition {args.partition}" if args.partition else ""))
    # what would be written is read back and checked as a profile first: a scheduler answer the checks refuse
    # leaves nothing behind (no file, no folder), and the file appears whole or not at all
    check_new_profile(args.name, text, target, os.environ)
    from hpc_runner.records.atomic import write_text_atomic

    write_text_atomic(target, text)
    sys.stdout.write(text)
    print(f"hpc-runner: wrote {target}; use it with --cluster {args.name}", file=sys.stderr)
    return 0


def _show(args: argparse.Namespace) -> int:
    from hpc_runner.scheduler.profiles import load_profile
    from hpc_runner.scheduler.select import executor_for

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
        print(dumps_json(found, indent=1, default=str))
        return 0
    print(f"# profile {profile.name} (executor {profile.executor}), from: "
          f"{', '.join(str(s) for s in profile.sources) or 'built in'}")
    for key, value in sorted(profile.settings.items()):
        print(f"{key}: {dumps_json(value, default=str)}")
    if limits is None:
        print("# limits now: none (no scheduler: the jobs run here)" if executor.runs_here else
              "# limits now: the scheduler did not answer from here")
    else:
        print(f"# limits now: {limits.describe()}")
        for lim in limits.limits:
            print(f"#   {lim.name} {lim.value} ({lim.source}), {lim.queued} of your jobs queued against it")
    return 0

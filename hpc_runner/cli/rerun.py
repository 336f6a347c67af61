"""``hpc-runner rerun``: run a recorded run again, exactly, from its run dir, into a new run dir."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from hpc_runner.cli.common import add_writable_argument, named_readable_grants, named_writable
from hpc_runner.cli.container_run import checked_record, container_for
from hpc_runner.cli.run import EXIT_FAILED, EXIT_PREEMPTED, execute_and_report
from hpc_runner.config.sandbox_marks import inside_container, inside_sandbox
from hpc_runner.engine.container import check_unchanged
from hpc_runner.engine.sandbox import Grants
from hpc_runner.engine.sandbox_job import run_recorded_in_container, run_recorded_in_sandbox
from hpc_runner.engine.stop import install_stop_handlers
from hpc_runner.report.rerun import plan_rerun, start_rerun

HELP = "run a recorded run again exactly (its config.yaml and entry) in a new run dir"
DESCRIPTION = """Run the run recorded in RUN_DIR again, from its config.yaml: the config that ran, with
its overrides and ${env:} values already applied and macros expanded, so neither today's
environment nor today's bundle files change it. The entry comes from its run.yaml.

The new run starts fresh (it never resumes from RUN_DIR's checkpoints) in --output_dir, by default
a new folder beside RUN_DIR (RUN_DIR-rerun-<time>); RUN_DIR itself is never written. Its run.yaml
records `rerun_of: RUN_DIR`. A warning lists every package version (torch, monai, numpy, python...)
and git state of the bundle (commit, uncommitted changes) that differs from RUN_DIR's run.yaml.
Overrides given here (--ID VALUE) are applied on top and recorded: the re-run is then no longer exact."""
EPILOG = """examples:
  hpc-runner rerun runs/synthetic_seg/2026-11-21_10-00-00
  hpc-runner rerun runs/synthetic_seg/sweep-2026-11-21_10-00-00/points/0003 --output_dir runs/p3-again
  hpc-runner rerun runs/synthetic_seg/2026-11-21_10-00-00 --dry-run
exit codes: 0 done, 1 the run failed (see error.txt), 2 bad input, 3 stopped by a signal (checkpointed)"""
ACCEPTS_OVERRIDES = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the rerun options."""
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run dir written by hpc-runner run/submit/sweep")
    parser.add_argument(
        "--output_dir", "--output-dir", metavar="DIR", help="the new run dir (default: RUN_DIR-rerun-<time>)"
    )
    parser.add_argument("--entry", metavar="ID", help="id to run instead of the recorded entry")
    parser.add_argument(
        "--trust", action="store_true",
        help="use the bundle even if its files no longer match its MANIFEST (see 'hpc-runner verify')",
    )
    parser.add_argument(
        "--dry-run", "--dry_run", dest="dry_run", action="store_true",
        help="show what differs from the record and where it would run; run nothing",
    )
    parser.add_argument("--container", metavar="IMAGE",
                        help="a run made in a container image: re-run it in IMAGE (default: the recorded image, "
                        "refused if it changed since)")

    add_writable_argument(parser)  # a --safe run's re-run may write and read only what this command line names


def main(args: argparse.Namespace) -> int:
    """Run the command."""
    plan = plan_rerun(args.run_dir, args.output_dir, args.override_tokens, args.entry, args.trust)
    if plan.cfg.container or args.container:  # before the new run dir is made: a refused image leaves nothing
        _choose_image(plan, args.container)
    if args.dry_run:
        text = plan.warning()
        if text:
            print(f"hpc-runner rerun: warning: {text}", file=sys.stderr)
        print(f"hpc-runner: would re-run entry '{plan.entry or 'run'}' of {plan.source} in {plan.output_dir}")
        print("hpc-runner: the environment matches the record" if not text else
              f"hpc-runner: {len(plan.differences)} difference(s) from the record")
        return 0

    run_dir, expanded = start_rerun(plan, sys.argv)
    print(f"hpc-runner: re-running {plan.source} in {run_dir.path}", flush=True)

    if plan.cfg.safe and not inside_sandbox():  # a run made with --safe is re-run in its sandbox, as its jobs are

        # grants from this command line only: the received run dir's mark and record grant nothing
        return _rerun_inside(run_dir.path, plan.entry, None,
                             Grants(tuple(named_writable(args)), tuple(named_readable_grants(args))))
    if plan.cfg.container and not inside_container():  # and a run made in an image, in that image
        return _rerun_inside(run_dir.path, plan.entry, run_dir.record())
    return execute_and_report(plan.cfg, run_dir, expanded, plan.entry, "rerun", requeue=True, debug=args.debug)


def _rerun_inside(run_dir: Path, entry: str | None, container_record: dict | None, grants: Any = None) -> int:
    """Run the prepared re-run inside the --safe sandbox (or its container image, given its record); print how
    it ended; return the exit code."""
    restore = install_stop_handlers()
    try:
        outcome = (run_recorded_in_container(run_dir, entry, container_record) if container_record else
                   run_recorded_in_sandbox(run_dir, entry, grants))
    finally:
        restore()
    if outcome.status == "completed":
        print(f"hpc-runner: done; results in {run_dir}", flush=True)
        return 0
    print(f"hpc-runner rerun: error: {outcome.error.described}", file=sys.stderr, flush=True)
    return EXIT_PREEMPTED if outcome.status == "preempted" else EXIT_FAILED


def _choose_image(plan: Any, image: str | None) -> None:
    """The image the re-run goes in: ``image`` (checked as --container is), else the recorded one, unchanged."""
    if image is None:
        check_unchanged(plan.cfg.container, str(Path(plan.source) / "run.yaml"))
        return

    spec = container_for(argparse.Namespace(container=image, container_runtime=None, safe=False))
    plan.cfg.container = checked_record(spec, plan.cfg, [os.getcwd(), str(plan.cfg.bundle_dir or "")])

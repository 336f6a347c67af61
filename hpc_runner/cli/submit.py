"""``hpc-runner submit``: submit one run of a bundle to SLURM (through submitit) and return at once."""

from __future__ import annotations

import argparse
import os
import shlex
import sys

from hpc_runner.cli.common import (
    load_config_from_args,
    profile_request,
    stage_request,
)
from hpc_runner.cli.container_run import checked_record, container_for, refuse_container, runtime_line
from hpc_runner.cli.cpus_option import apply_local_profile_cpus, cpus_into_profile_settings
from hpc_runner.cli.slurm_options import load_profile_from_args, positive_int
from hpc_runner.cli.submission_options import add_submission_arguments
from hpc_runner.cli.sweep import report_submitted
from hpc_runner.errors import UserError
from hpc_runner.jobs.submit_run import submit_run
from hpc_runner.monai_cli.commands import command_parser
from hpc_runner.monai_cli.spec import SPECS
from hpc_runner.monai_cli.submit import command_argv, submit_command
from hpc_runner.records.json_out import dumps_json
from hpc_runner.records.rundir import RunDir
from hpc_runner.scheduler.select import executor_for
from hpc_runner.sweep.shards import check_shardable, shard_overrides
from hpc_runner.sweep.spec import build_spec
from hpc_runner.sweep.submission import default_sweep_dir, submit_sweep

HELP = "submit one run to SLURM (or run it here with --cluster local) and return"
DESCRIPTION = """Check the config (same loader as `run`), prepare the run dir (config.yaml, run.yaml), submit
one job that runs it, print the job id and return. The job runs `run_recorded` on the run dir, so
the config that runs is exactly the one recorded now. run.yaml records the job id and profile.

  --shards N   split the inputs into N shards, one array task each (the config's ids shard_index and
               num_shards; every shard writes into DIR/predictions). DIR is then a sweep dir:
               `status`, `resume` (a killed shard skips the outputs already complete), `cancel`, and
               `collect`, which also merges the shards' per-case metrics into DIR/cases.csv."""
EPILOG = """examples:
  hpc-runner submit training --bundle bundles/synthetic_seg --cluster jade --trainer::max_epochs 20
  hpc-runner submit inference --bundle bundles/synthetic_seg --shards 8 --cluster jade --ckpt runs/synthetic_seg/RUN
  hpc-runner submit --bundle bundles/synthetic_seg --cluster slurm --slurm partition=gpu --wait
  hpc-runner submit --bundle bundles/synthetic_seg --cluster jade --dry-run
  hpc-runner submit ckpt_export network_def --config_file configs/inference.json --ckpt_file RUN_DIR --cluster slurm
  (MONAI's bundle commands run_workflow, ckpt_export, onnx_export, verify_metadata, verify_net_in_out and
  init_bundle are submitted as one job each, after a pre-flight: docs/monai-commands.md)
exit codes: 0 submitted (with --wait: the run completed), 1 the run failed (--wait), 2 bad input or sbatch refused"""
ACCEPTS_OVERRIDES = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the submit options."""
    parser.add_argument("entry", nargs="?", metavar="ENTRY",
                        help="id to run instead of `run` (e.g. training), or a MONAI bundle command (ckpt_export, "
                        "onnx_export, run_workflow, verify_metadata, verify_net_in_out, init_bundle) and its "
                        "arguments")
    # a MONAI command's positionals and one-letter options (hpc_runner/monai_cli/submit.py)
    parser.add_argument("command_args", nargs="*", help=argparse.SUPPRESS)
    parser.add_argument("-n", dest="monai_short_n", help=argparse.SUPPRESS)
    parser.add_argument("-p", dest="monai_short_p", help=argparse.SUPPRESS)
    add_submission_arguments(parser, own=_add_run)


def _add_run(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("the run")
    g.add_argument("--output_dir", "--output-dir", metavar="DIR", help="run dir (default runs/<bundle>/<time>)")
    g.add_argument("--wait", action="store_true", help="follow the job's log until it ends")
    g.add_argument("--shards", type=positive_int, metavar="N",
                   help="split the inputs into N shards run as one job array (inference, evaluation)")
    g.add_argument("--job-dir", "--job_dir", dest="job_dir", metavar="DIR",
                   help="with a MONAI bundle command: the folder for command.yaml and the job's logs "
                   "(default runs/COMMAND/TIME)")


def main(args: argparse.Namespace) -> int:
    """Run the command (with --profile, the jobs inherit HPCR_PROFILE through sbatch --export)."""
    with profile_request(args), stage_request(args):
        return _main(args)


def _main(args: argparse.Namespace) -> int:
    if args.json and args.wait:  # before anything is loaded or queued

        raise UserError("--json prints what was submitted at once; --wait follows the job's log",
                        expected="one of them")
    cpus_into_profile_settings(args)
    profile = load_profile_from_args(args)
    apply_local_profile_cpus(profile, args)
    if args.entry in SPECS:
        if getattr(args, "container", None):
            raise UserError(f"submit {args.entry} does not run in a container yet; nothing was queued",
                            expected=f"submit {args.entry} without --container")
        refuse_container(profile, f"submit {args.entry}")
        return _submit_monai_command(args, profile)
    extra = [*(args.command_args or []), *(f"-{k[-1]}" for k in ("monai_short_n", "monai_short_p") if getattr(args, k))]
    if extra or args.job_dir:
        raise UserError(f"submit {args.entry or ''}: unexpected {' '.join(extra) or '--job-dir'}",
                        expected="ENTRY (an id of the config) and options; positional arguments and --job-dir only "
                        "follow a MONAI bundle command such as ckpt_export")
    image = container_for(args, profile)
    cfg = load_config_from_args(args)
    if image is not None and args.shards:
        raise UserError("submit --shards in a container is not supported yet; nothing was queued",
                        expected="submit --shards without --container (and no container: block in the profile)")
    if image is not None:  # the image starts and imports, every path of the config is under a bind: else exit 2
        cfg.container = checked_record(image, cfg, [os.getcwd(), str(cfg.bundle_dir or "")])
    if args.shards:
        return _submit_shards(args, cfg, profile)
    res = submit_run(cfg, args.entry, profile, args.output_dir, argv=sys.argv, hold=args.hold, dry_run=args.dry_run,
                     preflight=not args.no_preflight)
    if args.json:  # one JSON object on stdout, for scripts: no prose
        print(dumps_json(res.to_json(profile.name)))
        return 1 if res.local_failures else 0
    if res.dry_run:
        for script in res.scripts:
            print(f"# job script (profile {profile.name}; nothing submitted)\n{script}")
        for note in res.notes:
            print(note)
        line = runtime_line(cfg.container)
        if line:
            print(line)
        return 0
    run_dir = shlex.quote(str(res.directory))
    job_id = res.job_ids[0]
    if res.ran_here:
        print(f"hpc-runner: {'failed' if res.local_failures else 'done'}; run dir {res.directory}")
        return 1 if res.local_failures else 0

    job = res.logs[0]
    print(f"hpc-runner: submitted job {job_id} (profile {profile.name}{', held' if args.hold else ''})")
    print(f"  run dir: {res.directory}")
    print(f"  status:  hpc-runner status {run_dir}")
    print(f"  log:     tail -f {shlex.quote(job.get('stdout', ''))}")
    print(f"  cancel:  hpc-runner cancel {run_dir}")
    sys.stdout.flush()
    if not args.wait:
        return 0
    from pathlib import Path

    state = executor_for(profile).follow(job_id, Path(job["stdout"]), Path(job["stderr"]), since=None)
    status = RunDir(res.directory).record().get("status")
    print(f"hpc-runner: job {job_id} ended: {state}; run status {status}; run dir {res.directory}")
    return 0 if status == "completed" else 1


def _submit_shards(args: argparse.Namespace, cfg, profile) -> int:
    """Submit the run as ``--shards N`` array tasks (a sweep over shard_index); print what to do next."""
    from pathlib import Path

    if args.wait:
        print("hpc-runner: --wait follows one job; with --shards use `hpc-runner status DIR --watch`", file=sys.stderr)
        return 2
    check_shardable(cfg, args.shards)
    directory = Path(args.output_dir) if args.output_dir else default_sweep_dir(cfg.name, prefix=args.entry or "run")
    values = shard_overrides(cfg, args.shards, directory)
    res = submit_sweep(
        cfg, args.entry, build_spec([f"shard_index=range(0,{args.shards})"]), profile, directory,
        argv=sys.argv, hold=args.hold, dry_run=args.dry_run, log=lambda m: print(m, flush=True),
        preflight=not args.no_preflight, record_extra={"shards": values},
    )
    code = report_submitted(res, profile, hold=args.hold, what="shards")
    if not res.dry_run and "predictions_dir" in values:
        print(f"  outputs:   {values['predictions_dir']}")
    return code


# submit's own options; every other parsed option belongs to the MONAI command (e.g. --config_file, --output_dir)
SUBMIT_ONLY = {"cluster", "slurm", "hold", "dry_run", "no_preflight", "cpus", "profile", "profile_steps", "wait",
               "shards", "debug", "job_dir"}


def _submit_monai_command(args: argparse.Namespace, profile) -> int:
    """``submit NAME ARGS...`` for MONAI's bundle commands: pre-flight, one job, print where it is."""
    from pathlib import Path

    name = args.entry
    if args.shards:
        raise UserError(f"submit {name} runs one job; --shards splits the inputs of a bundle run")
    known = command_parser(name)._option_string_actions
    flags = [f"--{d}" for d, v in vars(args).items() if v is True and d not in SUBMIT_ONLY]
    unknown = [f for f in flags if f not in known]
    if unknown:
        raise UserError(f"{name} takes no {' '.join(unknown)}", hint=f"See hpc-runner {name} --help")
    argv = command_argv(args, SUBMIT_ONLY)
    res = submit_command(name, argv, profile, Path(args.job_dir) if args.job_dir else None, hold=args.hold,
                         dry_run=args.dry_run, run_preflight=not args.no_preflight)
    if isinstance(res, str):
        print(res)
        return 0
    if res.ran_here:
        print(f"hpc-runner: {name} {'failed' if res.failed else 'done'}; job folder {res.folder}")
        return 1 if res.failed else 0
    print(f"hpc-runner: submitted job {res.job_id} ({name}; profile {profile.name}{', held' if args.hold else ''})")
    print(f"  job folder: {res.folder}")
    print(f"  log:        tail -f {shlex.quote(res.stdout)}")
    print(f"  cancel:     scancel {res.job_id}")
    sys.stdout.flush()
    if not args.wait:
        return 0

    state = executor_for(profile).follow(res.job_id, Path(res.stdout), Path(res.stderr), since=None)
    print(f"hpc-runner: job {res.job_id} ended: {state}; job folder {res.folder}")
    return 0 if state == "COMPLETED" else 1

"""``hpc-runner sweep``: check every point of a parameter sweep, then submit it as SLURM job arrays."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import Any

from hpc_runner.cli.common import (
    load_config_from_args,
    profile_request,
    stage_request,
)
from hpc_runner.cli.container_run import checked_record, container_for, runtime_line
from hpc_runner.cli.cpus_option import apply_local_profile_cpus, cpus_into_profile_settings
from hpc_runner.cli.slurm_options import (
    load_profile_from_args,
    nonnegative_int,
    positive_int,
)
from hpc_runner.cli.submission_options import add_submission_arguments
from hpc_runner.config.ids import has_id
from hpc_runner.errors import UserError
from hpc_runner.jobs.retry import parse_rules
from hpc_runner.records.json_out import print_json, prose_to_stderr
from hpc_runner.scheduler.profiles import parse_setting_overrides
from hpc_runner.sweep.right_size import apply_to_profile
from hpc_runner.sweep.spec import build_spec
from hpc_runner.sweep.submission import submit_sweep

HELP = "submit a parameter sweep (grid, --zip, range(), --sweep-file) as job arrays"
DESCRIPTION = """Check every point against the config (ids exist, values type, references resolve), then write
the sweep dir (sweep.yaml, base/, points/NNNN/: each point's run dir) and submit job arrays of at most
MaxArraySize tasks, never more than the user's submit limits leave free: the other points wait and are
submitted as tasks end (and by `status`/`resume`). One bad point: nothing is submitted."""
EPILOG = """examples:
  hpc-runner sweep training --bundle bundles/synthetic_seg --cluster jade \\
      --sweep 'optimizer::lr=1e-3,1e-4' --sweep 'network_def::channels=[8,16,32],[16,32,64]'
  hpc-runner sweep --bundle bundles/synthetic_seg --zip --sweep 'batch_size=2,4' --sweep 'learning_rate=1e-3,2e-3'
  hpc-runner sweep --bundle bundles/synthetic_seg --sweep-file jobs/sweeps/lr_channels.yaml --dry-run
then: hpc-runner status DIR | hpc-runner collect DIR | hpc-runner resume DIR | hpc-runner cancel DIR"""
ACCEPTS_OVERRIDES = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the sweep options: its own groups, around the groups submit and tune share (cli/submission_options.py)."""
    parser.add_argument("entry", nargs="?", metavar="ENTRY", help="id to run instead of `run` (e.g. training)")
    add_submission_arguments(parser, own=_add_points, after_cluster=_add_tasks, usage=USAGE)


USAGE = ("%(prog)s [ENTRY] --bundle DIR (--sweep ID=V1,V2 ... | --sweep-file FILE) [--cluster PROFILE] "
         "[--dry-run] [OPTIONS] [--ID VALUE ...]")


def _add_points(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("the points")
    g.add_argument(
        "--sweep", action="append", default=[], metavar="ID=V1,V2",
        help="one axis (repeatable), values typed as overrides, split at top-level commas ([8,16],[16,32]: two "
        "lists); or range(a,b[,step]), linspace(a,b,n), logspace(a,b,n)",
    )
    g.add_argument("--zip", action="store_true", help="pair the --sweep values by position, not the grid")
    g.add_argument(
        "--sweep-file", "--sweep_file", dest="sweep_file", metavar="FILE",
        help="YAML: grid: {ID: [..]}, zip: {ID: [..]} or points: [{ID: V}, ...]",
    )
    g.add_argument("--output_dir", "--output-dir", metavar="DIR", help="sweep dir (default runs/<bundle>/sweep-<time>)")


def _add_tasks(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("array tasks")
    g.add_argument(
        "--array-parallelism",
        "--array_parallelism",
        dest="array_parallelism",
        type=positive_int,
        metavar="K",
        help="run at most K tasks of each array at once (sbatch --array=...%%K)",
    )
    g.add_argument("--pack", type=positive_int, default=1, metavar="K",
                   help="run K points in each array task, in index order, one after another (default 1)")
    g.add_argument("--pack-parallel", "--pack_parallel", dest="pack_parallel", type=positive_int, default=1,
                   metavar="P", help="run P of a task's K points at once (1 <= P <= K), each on its share of the "
                   "job's GPUs/CPUs")
    r = parser.add_argument_group("failures, retries and right-sizing")
    r.add_argument("--max-returns", "--max_returns", dest="max_returns", type=nonnegative_int, default=None,
                   metavar="N", help="a point its tasks return unrun more than N times fails with cause RETURNED "
                   "(default 3)")
    r.add_argument("--max-retries", "--max_retries", dest="max_retries", type=nonnegative_int, default=None,
                   metavar="N", help="a failed point is resubmitted (by resume or a --retry rule) at most N times "
                   "(default 3)")
    r.add_argument("--max-submit-calls", "--max_submit_calls", dest="max_submit_calls", type=positive_int,
                   default=None, metavar="N", help="the sweep makes at most N submit calls in all, refused and failed "
                   "ones included (default: points x (1 + max-returns + max-retries)); then it submits nothing more")
    add_right_size_arguments(r)


def add_right_size_arguments(g: Any) -> None:
    """Add --retry CAUSE:CHANGE and --right-size DIR (sweep and resume)."""
    g.add_argument("--retry", action="append", default=[], metavar="CAUSE:CHANGE",
                   help="retry a point that fails with CAUSE, changing its request (repeatable): "
                   "OUT_OF_MEMORY:mem*2, TIMEOUT:time*2 (continues from its checkpoint), NODE_FAIL:exclude, "
                   "CAUSE:cpus*F, CAUSE:same; applied by the sweep's tasks as they end and by status/resume")
    g.add_argument("--right-size", "--right_size", dest="right_size", metavar="DIR",
                   help="ask for what a finished sweep (or run) DIR used, with headroom: its suggestion's CPUs, "
                   "memory and time (explicit --slurm/--cpus win)")


def apply_right_size(profile: Any, args: argparse.Namespace) -> None:
    """``--right-size DIR``: DIR's suggestion on the profile, under the explicit --slurm/--cpus settings."""
    if getattr(args, "right_size", None):
        apply_to_profile(profile, args.right_size, parse_setting_overrides(args.slurm))


def main(args: argparse.Namespace) -> int:
    """Run the command (with --profile, the jobs inherit HPCR_PROFILE through sbatch --export).

    With --json, stdout holds exactly one JSON document: everything else the sweep prints while it checks and
    submits (progress, the lines of points run here) goes to stderr."""
    with profile_request(args), stage_request(args):
        with prose_to_stderr(args.json):
            res, profile = _main(args)
        if args.json:  # one JSON object on stdout, for scripts
            print_json(res.to_json(profile.name))
            return 1 if res.local_failures else 0
        return report_submitted(res, profile, args.pack, args.hold)


def _main(args: argparse.Namespace) -> tuple[Any, Any]:
    """Check the sweep and submit it; return what the submission did and the profile."""
    spec = build_spec(args.sweep, args.zip, args.sweep_file)
    rules = parse_rules(args.retry)
    cpus_into_profile_settings(args)
    profile = load_profile_from_args(args)
    apply_right_size(profile, args)
    apply_local_profile_cpus(profile, args)
    image = container_for(args, profile)
    cfg = load_config_from_args(args)
    _check_space_separated(args, cfg)
    if image is not None:  # the image starts and imports, every path of the config is under a bind: else exit 2
        cfg.container = checked_record(image, cfg, [os.getcwd(), str(cfg.bundle_dir or "")])
    res = _submit(args, cfg, spec, profile, rules)
    res.container = cfg.container  # the dry run shows the runtime line each job starts
    return res, profile


def _submit(args: argparse.Namespace, cfg: Any, spec: Any, profile: Any, rules: Any) -> Any:
    return submit_sweep(
        cfg,
        args.entry,
        spec,
        profile,
        args.output_dir,
        argv=sys.argv,
        hold=args.hold,
        array_parallelism=args.array_parallelism,
        dry_run=args.dry_run,
        log=lambda m: print(m, flush=True),
        preflight=not args.no_preflight,
        pack=args.pack,
        pack_parallel=args.pack_parallel,
        bounds={k: v for k, v in (("max_returns", args.max_returns), ("max_retries", args.max_retries),
                                  ("max_submit_calls", args.max_submit_calls)) if v is not None},
        record_extra={"retry": rules} if rules else None,
    )


def report_submitted(res: Any, profile: Any, pack: int = 1, hold: bool = False, what: str = "points") -> int:
    """Print what a sweep submission did (or would do, dry run) and the commands that follow it; return 0/1."""
    if res.dry_run:
        print(f"# dry run: profile {profile.name}; nothing submitted, nothing written")
        for note in res.notes[:2]:
            print(f"# {note}")
        for script in res.scripts:
            print(script)
        for note in res.notes[2:]:
            print(note)
        line = runtime_line(getattr(res, "container", None))
        if line:
            print(line)
        return 0
    d = shlex.quote(str(res.directory))
    if res.ran_here:
        done = len(res.job_ids) - res.local_failures
        print(f"hpc-runner: {done} of {len(res.job_ids)} {what} completed here; sweep dir {res.directory}")
        print(f"  results: hpc-runner collect {d}")
        return 1 if res.local_failures else 0
    arrays = ", ".join(a["job_id"] for a in res.arrays) or "none"
    packed = f" in tasks of {pack} point(s)" if pack > 1 else ""
    print(
        f"hpc-runner: {len(res.job_ids) + len(res.waiting)} {what} checked ({res.notes[-1]}); "
        f"{len(res.job_ids)} submitted now{packed} as {len(res.arrays)} array(s): {arrays} "
        f"({len(res.arrays)} submit call(s), profile {profile.name}{', held' if hold else ''})"
    )
    if res.waiting:
        print(
            f"  waiting:   {len(res.waiting)} point(s) wait in the sweep dir for a free submit slot "
            f"({res.limits.describe() if res.limits else 'no slot free'}); each task that ends submits "
            f"more, and `hpc-runner status`/`resume` top up"
        )
    print(f"  sweep dir: {res.directory}")
    print(f"  status:    hpc-runner status {d}")
    print(f"  results:   hpc-runner collect {d}")
    print(f"  failed:    hpc-runner resume {d}")
    print(f"  cancel:    hpc-runner cancel {d}")
    return 0


def _check_space_separated(args: argparse.Namespace, cfg: Any) -> None:
    """`--sweep lr=1e-3 2e-3` makes 2e-3 the ENTRY: say that a sweep's values are separated by commas."""
    if args.entry and args.sweep and not has_id(cfg.config, args.entry) and "=" in args.sweep[-1]:
        last = args.sweep[-1]
        raise UserError(f"{args.entry!r} follows --sweep {last!r} but is not an id of the config (nor an entry): "
                        "the values of one id are separated by commas, not spaces; nothing was submitted",
                        expected=f"--sweep '{last},{args.entry}'")

"""``hpc-runner resume``: resubmit only the failed and missing points of a sweep (or a failed run)."""

from __future__ import annotations

import argparse
import shlex

from hpc_runner.cli.common import add_preflight_argument
from hpc_runner.cli.slurm_options import add_cluster_arguments, nonnegative_int, positive_int
from hpc_runner.cli.sweep import add_right_size_arguments, apply_right_size

HELP = "resubmit the failed or missing points of a sweep as a new array (never a completed one)"
DESCRIPTION = """Ask the scheduler once where every point stands, then resubmit the points that failed,
timed out, were cancelled or never got submitted, as new job arrays. Completed points and points
still queued or running are never submitted again. A point resubmitted unchanged continues in its
run dir (from its newest checkpoint). Overrides given here (e.g. --batch_size 1) fix the
resubmitted points: they are checked first, recorded in sweep.yaml as the point's `extra`, and the
old run dir of each such point is moved to attempts/ so the new config starts clean.
The cluster profile recorded at submission is used unless --cluster is given; --slurm changes it.
--cause TIMEOUT (repeatable) resubmits only the failed points with that cause (`hpc-runner status`
shows each point's cause), e.g. with a longer time limit: --cause TIMEOUT --slurm time=04:00:00.
--retry CAUSE:CHANGE records a rule for the sweep's later failures (see `hpc-runner sweep --help`);
--right-size DIR asks for what the finished sweep DIR used. What --slurm, --cluster or --right-size set
here replaces the points' own requests (from earlier --retry changes)."""
EPILOG = """examples:
  hpc-runner resume runs/synthetic_seg/sweep-2026-11-21_10-00-00
  hpc-runner resume runs/synthetic_seg/sweep-2026-11-21_10-00-00 --slurm time=04:00:00
  hpc-runner resume runs/synthetic_seg/sweep-2026-11-21_10-00-00 --cause TIMEOUT --slurm time=04:00:00
  hpc-runner resume runs/synthetic_seg/sweep-2026-11-21_10-00-00 --points 3,7 --batch_size 1"""
ACCEPTS_OVERRIDES = True
# hpc_runner.sweep.causes.CAUSES, spelled out: a command module imports only the standard library
CAUSES = ("OUT_OF_MEMORY", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "CANCELLED", "ERROR", "BAD_INPUT", "RETURNED")


MAX_LISTED = 1_000_000  # point numbers one --points may name (a sweep has at most this many)


def _indices(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        a, _, b = part.strip().partition("-")
        try:
            first, last = int(a), int(b) if b else int(a)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a list of point numbers like 3,7,10-12") from None
        if last - first + 1 + len(out) > MAX_LISTED:  # counted before the list is made
            raise argparse.ArgumentTypeError(f"{part.strip()!r} names more than {MAX_LISTED:,} points")
        out += range(first, last + 1)
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the resume options."""
    parser.add_argument("dir", metavar="DIR", help="a sweep dir (or a run dir submitted with hpc-runner submit)")
    parser.add_argument("--points", type=_indices, metavar="LIST", help="only these failed points, e.g. 3,7,10-12")
    parser.add_argument(
        "--cause",
        action="append",
        choices=CAUSES,
        metavar="CAUSE",
        help=f"only the failed points with this cause (repeatable): {', '.join(CAUSES)}",
    )
    parser.add_argument(
        "--array-parallelism",
        "--array_parallelism",
        dest="array_parallelism",
        type=positive_int,
        metavar="K",
        help="run at most K tasks of each array at once",
    )
    parser.add_argument("--max-retries", "--max_retries", dest="max_retries", type=nonnegative_int, metavar="N",
                        help="raise (or lower) the sweep's bound on resubmissions of one failed point (default 3)")
    add_right_size_arguments(parser)
    add_cluster_arguments(parser, default_from_env=False)
    add_preflight_argument(parser)


def _profile(args: argparse.Namespace, recorded: dict):
    from hpc_runner.scheduler.profiles import ClusterProfile, check_settings, load_profile, parse_setting_overrides

    changes = parse_setting_overrides(args.slurm)
    if args.cluster:
        return load_profile(args.cluster, changes)
    from pathlib import Path

    settings = dict(recorded.get("settings") or {})
    name = recorded.get("profile") or "recorded"
    check_settings(settings, f"the profile recorded for this sweep ({name})")
    if changes:
        check_settings(changes, "--slurm")
        settings.update(changes)
    return ClusterProfile(name, [Path(recorded.get("file") or name)], settings)


def main(args: argparse.Namespace) -> int:
    """Run the command."""
    from hpc_runner.cli.pipeline import is_pipeline, resume_main

    if is_pipeline(args.dir):  # a pipeline dir: its stages that failed or never ran (cli/pipeline.py)
        return resume_main(args)
    from hpc_runner.sweep.targets import load_target

    target = load_target(args.dir)
    d = shlex.quote(str(target.path))
    if target.kind == "run":
        return _resume_run(args, target)
    from hpc_runner.config.overrides import parse_cli_overrides
    from hpc_runner.config.recorded import load_recorded_config
    from hpc_runner.scheduler.profiles import parse_setting_overrides
    from hpc_runner.sweep.check import check_extra_overrides
    from hpc_runner.sweep.resume import plan_resume, resume_sweep
    from hpc_runner.sweep.retry import parse_rules

    record = target.record
    rules = parse_rules(args.retry)
    profile = _profile(args, record.data.get("cluster") or {})
    apply_right_size(profile, args)
    if record.data.get("tune"):
        return _resume_tune(args, target, profile)
    # what this resume sets explicitly replaces the points' own requests (earlier --retry changes)
    chosen = set(parse_setting_overrides(args.slurm)) | (set(profile.settings) if args.cluster else set())
    if args.right_size:
        chosen |= {"cpus_per_task", "mem_gb", "mem", "time"}
    extra = parse_cli_overrides(args.override_tokens)
    plan = plan_resume(target, args.points)
    if args.cause:
        skipped = [s for s in plan.resubmit if s.cause_kind not in args.cause]
        plan.resubmit = [s for s in plan.resubmit if s.cause_kind in args.cause]
        print(f"hpc-runner: --cause {' '.join(args.cause)}: {len(skipped)} failed or missing point(s) left as they are")
    print(
        f"hpc-runner: {len(plan.completed)} completed (kept), {len(plan.active)} queued or running (kept), "
        f"{len(plan.resubmit)} to resubmit"
    )
    if not plan.resubmit:
        from hpc_runner.sweep.resume import top_up_waiting

        if rules:
            from hpc_runner.sweep.resume import record_retry_rules

            record_retry_rules(target.path, rules)
        sent = top_up_waiting(target, print)  # points waiting for a submit slot go now if slots are free
        print("hpc-runner: nothing to resubmit" + (f"; {sent} waiting point(s) submitted" if sent else ""))
        return 0
    if extra:
        base, _ = load_recorded_config(record.base_dir)
        check_extra_overrides(base, [record.effective_overrides(record.points[s.index]) for s in plan.resubmit], extra)
    if args.dry_run:
        for s in plan.resubmit:
            print(f"  would resubmit point {s.index} ({s.state}, cause {s.cause_kind or '-'}, job {s.job_id or '-'})")
        return 0
    res = resume_sweep(
        target,
        plan,
        profile,
        extra,
        hold=args.hold,
        array_parallelism=args.array_parallelism,
        log=lambda m: print(m, flush=True),
        preflight=not args.no_preflight,
        max_retries=args.max_retries,
        retry_rules=rules,
        chosen=chosen,
    )
    if res.ran_here:
        print(f"hpc-runner: ran {len(res.job_ids)} point(s) here, {res.local_failures} failed")
        return 1 if res.local_failures else 0
    arrays = ", ".join(a["job_id"] for a in res.arrays)
    print(f"hpc-runner: resubmitted {len(res.job_ids)} point(s) as {len(res.arrays)} array(s): {arrays}")
    print(f"  status: hpc-runner status {d}")
    return 0


def _resume_tune(args: argparse.Namespace, target, profile) -> int:
    """Restart the tune's workers: those whose trial was left running, then some for the unspent budget."""
    from hpc_runner.errors import UserError
    from hpc_runner.tune.resume import resume_tune

    if args.points or args.cause or args.override_tokens:
        raise UserError(f"{target.path} is a tune dir: resume restarts its workers; --points, --cause and "
                        "overrides are for sweep dirs", expected="hpc-runner resume DIR [--cluster P] [--slurm K=V]")
    plan, res = resume_tune(target.path, target.record, profile, hold=args.hold, preflight=not args.no_preflight,
                            dry_run=args.dry_run, log=lambda m: print(m, flush=True))
    print(f"hpc-runner: tune workers {plan.alive or 'none'} still queued or running (kept); "
          f"restart {plan.restart or 'none'} (trial left running); {plan.unspent} trial(s) not started: "
          f"new worker(s) {plan.new or 'none'}")
    if res is None:
        done = "dry run: nothing submitted" if args.dry_run and plan.workers else "nothing to restart"
        print(f"hpc-runner: {done}")
        return 0
    if res.ran_here:
        print(f"hpc-runner: ran {len(plan.workers)} worker(s) here; {res.local_failures} trial(s) failed")
        return 1 if res.local_failures else 0
    print(f"hpc-runner: started worker(s) {plan.workers} as array {', '.join(a['job_id'] for a in res.arrays)}")
    print(f"  status: hpc-runner status {shlex.quote(str(target.path))}")
    return 0


def _resume_run(args: argparse.Namespace, target) -> int:
    from hpc_runner.errors import ClusterError
    from hpc_runner.sweep.resume import resume_run
    from hpc_runner.sweep.states import DONE

    if args.retry:
        raise ClusterError("--retry rules are for sweep dirs", where=str(target.path),
                           expected="hpc-runner resume RUN_DIR [--slurm KEY=VALUE] [--right-size DIR]")
    if args.override_tokens:
        raise ClusterError(
            "a single run dir resumes with its recorded config",
            expected="no overrides (submit a new run with `hpc-runner submit` to change the config)",
        )
    states, _ = target.states()
    state = states[0]
    if state.state == DONE or state.active:
        print(f"hpc-runner: the run is {state.state}; nothing to resubmit")
        return 0
    if args.cause and state.cause_kind not in args.cause:
        print(f"hpc-runner: the run failed with cause {state.cause_kind or state.state}, not "
              f"{' or '.join(args.cause)}; nothing to resubmit")
        return 0
    profile = _profile(args, ((target.run_record or {}).get("job") or {}).get("cluster") or {})
    apply_right_size(profile, args)
    if args.dry_run:
        print(f"  would resubmit the run ({state.state}, job {state.job_id or '-'})")
        return 0
    res = resume_run(target, profile, hold=args.hold, preflight=not args.no_preflight)
    if res.ran_here:
        return 1 if res.local_failures else 0
    print(f"hpc-runner: resubmitted the run as job {res.job_ids[0]}; it continues from its newest checkpoint")
    return 0

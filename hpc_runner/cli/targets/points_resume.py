"""``resume DIR`` of a run, sweep or tune dir: resubmit what failed or never ran, with the recorded profile."""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from hpc_runner.cli.sweep import apply_right_size
from hpc_runner.config.overrides import parse_cli_overrides
from hpc_runner.config.recorded import load_recorded_config
from hpc_runner.engine.sandbox import recorded_grants
from hpc_runner.errors import ClusterError, UserError
from hpc_runner.jobs.retry import parse_rules
from hpc_runner.jobs.states import DONE
from hpc_runner.scheduler.profiles import check_settings, checked_from_record, load_profile, parse_setting_overrides
from hpc_runner.sweep.check import check_extra_overrides
from hpc_runner.sweep.resume import (
    plan_resume,
    record_retry_rules,
    resume_run,
    resume_sweep,
    set_submit_budget,
    top_up_waiting,
)
from hpc_runner.tune.resume import resume_tune


def _profile(args: argparse.Namespace, recorded: dict):
    changes = parse_setting_overrides(args.slurm)
    if args.cluster:
        return load_profile(args.cluster, changes)
    profile = checked_from_record(
        recorded, f"the profile recorded for this sweep ({recorded.get('profile') or 'recorded'})")
    if changes:
        check_settings(changes, "--scheduler-option")
        profile.settings.update(changes)
    return profile


def _recorded_profile(args: argparse.Namespace, target: Any) -> Any:
    """Return the profile a sweep's (or tune's) jobs go again with: the recorded one, changed by the options."""
    profile = _profile(args, target.record.data.get("cluster") or {})
    apply_right_size(profile, args)
    return profile


def resume_tune_dir(args: argparse.Namespace, target: Any) -> int:
    """``resume DIR`` of a tune dir: restart its workers."""
    parse_rules(args.retry)  # a bad --retry rule is refused first, as for a sweep dir
    profile = _recorded_profile(args, target)
    _set_submit_budget(args, target)
    return _resume_tune(args, target, profile)


def _set_submit_budget(args: argparse.Namespace, target: Any) -> None:
    """``--max-submit-calls N``: record the sweep's (or tune's) new budget of sbatch calls before anything goes."""
    if getattr(args, "max_submit_calls", None) is None or args.dry_run:
        return

    target.record = set_submit_budget(target.path, args.max_submit_calls)
    target.points = target.record.points


def resume_sweep_dir(args: argparse.Namespace, target: Any) -> int:
    """``resume DIR`` of a sweep dir: resubmit its failed and missing points."""
    d = shlex.quote(str(target.path))

    rules = parse_rules(args.retry)
    profile = _recorded_profile(args, target)
    if target.record.data.get("sandbox") is not None:  # a received sweep.yaml's grants: refused before anything is
        # written, unless --writable/--readable say them again
        recorded_grants(target.record.data["sandbox"], str(target.record.file))
    _set_submit_budget(args, target)
    record = target.record
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
        if rules:
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
    if args.points or args.cause or args.override_tokens:
        raise UserError(f"{target.path} is a tune dir: resume restarts its workers; --points, --cause and "
                        "overrides are for sweep dirs",
                        expected="hpc-runner resume DIR [--cluster P] [--scheduler-option K=V]")
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


def resume_run_dir(args: argparse.Namespace, target: Any) -> int:
    """``resume DIR`` of a run dir: resubmit the run when it failed (it continues from its newest checkpoint)."""
    if args.retry:
        raise ClusterError("--retry rules are for sweep dirs", where=str(target.path),
                           expected="hpc-runner resume RUN_DIR [--scheduler-option KEY=VALUE] [--right-size DIR]")
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

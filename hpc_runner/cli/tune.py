"""``hpc-runner tune``: a model-based search (Optuna) with early stopping, run by K SLURM workers."""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

from hpc_runner.cli.common import (
    load_config_from_args,
    profile_request,
    stage_request,
)
from hpc_runner.cli.container_run import refuse_container
from hpc_runner.cli.cpus_option import apply_local_profile_cpus, cpus_into_profile_settings
from hpc_runner.cli.slurm_options import load_profile_from_args, positive_int
from hpc_runner.cli.submission_options import add_submission_arguments
from hpc_runner.config.values import parse_value
from hpc_runner.errors import UserError
from hpc_runner.records.json_out import print_json, prose_to_stderr
from hpc_runner.tune.settings import TuneSettings
from hpc_runner.tune.submit import submit_tune

HELP = "search hyper-parameters with Optuna (TPE + ASHA pruning) in K worker array tasks"
DESCRIPTION = """Check the space (each bound and choice against the config's ids and types, and the
pre-flight), write the tune dir, then submit one job array of K workers. Each worker loops: ask
Optuna for a trial, run it in its own point dir (exact resume), report --metric at each validation,
stop the trial when the pruner says so, tell the result; until --trials have started. The study
lives in a journal file in the tune dir (no database, no server). A requeued worker continues its
trial from its checkpoint. Overrides (--ID VALUE, HPCR__ variables) apply to every trial.

  --space 'ID=loguniform(a,b)' | uniform(a,b) | int(a,b) | choice(V1,V2,...)   (repeatable)

The tune dir (--output_dir, default runs/<bundle>/tune-<time>) holds sweep.yaml (with a `tune`
section), optuna.journal, base/ and points/NNNN/ (one per trial)."""
EPILOG = """examples:
  hpc-runner tune --bundle bundles/synthetic_seg --cluster jade --trials 64 --parallel 8 \\
      --space 'learning_rate=loguniform(1e-4,1e-1)' \\
      --space 'network_def::channels=choice([8,16,32,64],[16,32,64,128])' --metric val_dice
then: hpc-runner status DIR | hpc-runner collect DIR | hpc-runner resume DIR | hpc-runner cancel DIR"""
ACCEPTS_OVERRIDES = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the tune options."""
    parser.add_argument("entry", nargs="?", metavar="ENTRY", help="id to run instead of `run` (e.g. training)")
    add_submission_arguments(parser, own=_add_search, container=False)


def _add_search(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("the search")
    g.add_argument("--space", action="append", default=[], metavar="ID=DIST(..)",
                   help="one parameter of the search (repeatable)")
    g.add_argument("--trials", type=positive_int, required=True, metavar="N", help="trials to run in all")
    g.add_argument("--parallel", type=positive_int, default=1, metavar="K",
                   help="worker array tasks, each running one trial at a time (default 1)")
    g.add_argument("--metric", required=True, metavar="NAME", help="the validation metric (the trainer's metric_name)")
    g.add_argument("--direction", choices=["maximize", "minimize"], default=None,
                   help="which way the metric is better (default: the trainer's metric_mode, else maximize)")
    g.add_argument("--pruner", choices=["asha", "hyperband", "median", "none"], default="asha")
    g.add_argument("--pruner-option", "--pruner_option", dest="pruner_option", action="append", default=[],
                   metavar="KEY=VALUE", help="an option of the Optuna pruner class, e.g. min_resource=1 "
                   "reduction_factor=3 (asha), n_startup_trials=4 (median); repeatable")
    g.add_argument("--sampler", choices=["tpe", "random", "qmc"], default="tpe")
    g.add_argument("--sampler-option", "--sampler_option", dest="sampler_option", action="append", default=[],
                   metavar="KEY=VALUE", help="an option of the Optuna sampler class, e.g. n_startup_trials=4 "
                   "(tpe; default 10); repeatable")
    # not --seed: that is the bundle's id everywhere else (`run --seed 1`), so tune passes it on as an override
    g.add_argument("--sampler-seed", "--sampler_seed", dest="sampler_seed", type=int, metavar="S",
                   help="the Optuna sampler's seed (the same trials in the same order)")
    g.add_argument("--output_dir", "--output-dir", metavar="DIR", help="tune dir (default runs/<bundle>/tune-<time>)")


def main(args: argparse.Namespace) -> int:
    """Run the command (with --profile, the workers inherit HPCR_PROFILE through sbatch --export)."""
    with profile_request(args), stage_request(args):
        return _main(args)


def _main(args: argparse.Namespace) -> int:
    import importlib.util

    if importlib.util.find_spec("optuna") is None:
        raise UserError("hpc-runner tune needs Optuna, which is not installed in this environment",
                        expected="pip install 'hpc-bundle-runner[tune]' (Optuna >= 4)")
    if args.safe:  # the pruner listens to the trial in its own process: not through a sandbox yet

        raise UserError("tune --safe is refused: --safe runs a bundle's code only inside a sandbox, and a tune's "
                        "trials report each validation to the pruner in the worker's own process, which the "
                        "sandbox would cut off; nothing was submitted",
                        expected="sweep --safe over the same values (each point runs in the sandbox), or tune "
                        "without --safe on a bundle you trust")

    settings = TuneSettings(space=list(args.space), trials=args.trials, metric=args.metric,
                            direction=args.direction, pruner=args.pruner, sampler=args.sampler, seed=args.sampler_seed,
                            pruner_options=key_values(args.pruner_option, "--pruner-option", "min_resource=1"),
                            sampler_options=key_values(args.sampler_option, "--sampler-option", "n_startup_trials=4"))
    cpus_into_profile_settings(args)
    profile = load_profile_from_args(args)

    refuse_container(profile, "tune")  # its pruner listens inside each trial's process
    apply_local_profile_cpus(profile, args)
    cfg = load_config_from_args(args)

    with prose_to_stderr(args.json):  # --json: stdout holds the one JSON document, the rest goes to stderr
        res = submit_tune(cfg, args.entry, settings, profile, args.output_dir, parallel=args.parallel, argv=sys.argv,
                          hold=args.hold, dry_run=args.dry_run, log=lambda m: print(m, flush=True),
                          preflight=not args.no_preflight)
    if args.json:  # one JSON object on stdout, for scripts
        print_json(res.to_json(profile.name))
        return 1 if res.local_failures else 0
    return report_started(res, profile, args.hold)


def key_values(pairs: list[str], flag: str, example: str) -> dict[str, Any]:
    """Return ``KEY=VALUE`` pairs as keyword arguments, each value typed like every other value a user types
    (YAML 1.2, config/values.py: ``1e3`` is a number, ``on`` stays text)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.isidentifier():
            raise UserError(f"{flag} {pair!r} is not KEY=VALUE", expected=f"e.g. {flag} {example}")
        out[key] = parse_value(value, what=f"value of {flag} {key}")
    return out


def report_started(res: Any, profile: Any, hold: bool = False) -> int:
    """Print what starting the tune did (or would do) and the commands that follow; return 0/1."""
    if res.dry_run:
        print(f"# dry run: profile {profile.name}; nothing submitted, nothing written")
        for text in [*res.notes[:2], *res.scripts, *res.notes[2:]]:
            print(text if text.startswith("#") else f"# {text}")
        return 0
    d = shlex.quote(str(res.directory))
    if res.ran_here:
        print(f"hpc-runner: tune ran here ({res.notes[-1]}); tune dir {res.directory}")
        print(f"  results: hpc-runner collect {d}")
        return 1 if res.local_failures else 0
    arrays = ", ".join(a["job_id"] for a in res.arrays)
    print(f"hpc-runner: {len(res.job_ids)} tune worker(s) submitted as array {arrays} ({res.notes[-1]}; "
          f"profile {profile.name}{', held' if hold else ''})")
    print(f"  tune dir:  {res.directory}")
    print(f"  status:    hpc-runner status {d}")
    print(f"  results:   hpc-runner collect {d}")
    print(f"  restart:   hpc-runner resume {d}")
    print(f"  cancel:    hpc-runner cancel {d}")
    return 0

"""``hpc-runner pipeline``: a study's stages (search, select the best, evaluate, export, sharded inference)
queued at once, each waiting on its inputs; and what ``status``/``collect``/``report``/``resume``/``cancel``
do with a pipeline dir."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from hpc_runner.cli.common import add_preflight_argument, add_stage_arguments, stage_request
from hpc_runner.cli.container_run import refuse_container
from hpc_runner.cli.slurm_options import add_cluster_arguments, add_json_argument, load_profile_from_args
from hpc_runner.errors import UserError
from hpc_runner.heap import settle_after_imports
from hpc_runner.jobs.targets import SweepTarget
from hpc_runner.pipeline.cancel import cancel_pipeline
from hpc_runner.pipeline.propagate import cancel_never_satisfied
from hpc_runner.pipeline.record import PipelineRecord
from hpc_runner.pipeline.resume import KEEP, recorded_profile, resume_pipeline
from hpc_runner.pipeline.spec import load_spec
from hpc_runner.pipeline.submit import start_pipeline
from hpc_runner.pipeline.summary import write_chain, write_report
from hpc_runner.pipeline.view import COMPLETED, render, view
from hpc_runner.records.json_out import dumps_json
from hpc_runner.report.status_table import render as render_points
from hpc_runner.scheduler.profiles import check_settings, load_profile, parse_setting_overrides
from hpc_runner.sweep.submission import default_sweep_dir
from hpc_runner.sweep.submission import top_up as top_up_sweep

HELP = "queue a study's stages at once: search, select the best point, evaluate, export, sharded inference"
DESCRIPTION = """Read PIPELINE.yaml (docs/pipelines.md), check every stage (names, kinds, `from`, no cycle; each
stage's config through the pre-flight; sbatch --test-only; enough free submit slots for one job of each
stage) and, only then, write DIR/pipeline.yaml and queue every stage: each waits on its inputs with SLURM
dependencies, so the chain runs with nobody at the terminal. A select stage runs as a small job (1 CPU,
no GPU) once the stage it chooses from has ended, records what it chose and why, and writes the chosen
point's weights and values into the configs of the stages that take `from` it before they start. When
it finds nothing to choose it cancels every stage that depends on it, naming the cause in `status`.

DIR holds one folder per stage (a sweep or tune dir, a run dir, a sharded stage's sweep dir with
predictions/, a select stage's choice.json, an export stage's file) and pipeline.yaml. Then:
  hpc-runner status DIR [--all]   every stage's state (--all: each search's points too)
  hpc-runner collect DIR          pipeline.md: the search table, the chosen point, test metrics, predictions
  hpc-runner report DIR           report.html, with each stage's own report linked
  hpc-runner resume DIR           queue again only what failed or never ran
  hpc-runner cancel DIR           cancel every stage still queued or running
With --cluster local the stages run here, one after another."""
EPILOG = """example PIPELINE.yaml:
  bundle: bundles/synthetic_seg
  stages:
    - {name: search, sweep: ["learning_rate=1e-3,4e-3"], overrides: {max_epochs: 2}}
    - {name: best, select: {from: search, metric: val_dice, mode: max}}
    - {name: test, entry: evaluate, from: best}
    - {name: predict, entry: inference, from: best, shards: 2}
examples:
  hpc-runner pipeline study.yaml --cluster jade --output_dir runs/study1
  hpc-runner pipeline study.yaml --cluster local --output_dir runs/study1
  hpc-runner pipeline study.yaml --cluster slurm --dry-run
exit codes: 0 queued (--cluster local: every stage completed), 1 a stage failed (local), 2 bad input: nothing
written, nothing queued"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the pipeline options."""
    parser.add_argument("file", metavar="PIPELINE.yaml", help="the pipeline file (docs/pipelines.md)")
    parser.add_argument("--output_dir", "--output-dir", metavar="DIR",
                        help="the pipeline dir (default runs/<bundle>/pipeline-<time>)")
    add_cluster_arguments(parser)
    add_stage_arguments(parser)
    add_json_argument(parser)
    add_preflight_argument(parser)


def main(args: argparse.Namespace) -> int:
    """Run the command (with --stage, or a profile's stage:, every stage's jobs stage their data on the node)."""
    with stage_request(args):
        return _main(args)


def _main(args: argparse.Namespace) -> int:
    if args.hold:
        raise UserError("pipeline --hold is not supported", expected="the stages queued at once (they wait on their "
                        "inputs); `hpc-runner cancel DIR` stops them")
    spec = load_spec(args.file)
    profile = load_profile_from_args(args)

    refuse_container(profile, "pipeline")
    directory = Path(args.output_dir) if args.output_dir else default_sweep_dir(Path(spec.bundle).name,
                                                                                prefix="pipeline")
    # with --json stdout holds the one JSON object; the progress lines go to stderr
    out = sys.stderr if args.json else sys.stdout
    res = start_pipeline(spec, profile, directory, argv=sys.argv, log=lambda m: print(m, file=out, flush=True),
                         dry_run=args.dry_run, preflight=not args.no_preflight)
    if args.json:
        print(dumps_json(res.to_json(profile.name)))
        return 1 if res.failed else 0
    if res.dry_run:
        print(f"# dry run: profile {profile.name}; nothing written, nothing queued")
        for note in res.notes:
            print(note)
        return 0
    d = shlex.quote(str(res.directory))
    if res.ran_here:
        record, views = view(res.directory)
        print(render(record, views))
        bad = [v.name for v in views if v.state != COMPLETED]
        print(f"hpc-runner: pipeline ran here; {len(views) - len(bad)} of {len(views)} stage(s) completed"
              + (f" ({', '.join(bad)} did not)" if bad else "") + f"; pipeline dir {res.directory}")
        print(f"  results: hpc-runner collect {d}")
        return 1 if bad else 0
    print(f"hpc-runner: pipeline of {len(res.jobs)} stage(s) queued (profile {profile.name}):")
    for name, jobs in res.jobs.items():
        dep = res.dependencies.get(name)
        print(f"  {name:<12} job(s) {', '.join(jobs) or '-'}" + (f" (waits: {dep})" if dep else ""))
    print(f"  pipeline dir: {res.directory}")
    print(f"  status:  hpc-runner status {d}")
    print(f"  results: hpc-runner collect {d}")
    print(f"  failed:  hpc-runner resume {d}")
    print(f"  cancel:  hpc-runner cancel {d}")
    return 0


def _top_up(views: Any, quiet: bool) -> int:
    """The governor's top-up step for each sweep stage that has points waiting (as `status` does for a sweep)."""
    sent = 0
    for v in views:
        if isinstance(v.target, SweepTarget):  # a run stage has no point waiting: it has no top-up
            try:
                sent += top_up_sweep(v.target.path, lambda m: print(m, file=sys.stderr if quiet else sys.stdout))
            except Exception as exc:  # status shows the states even when sbatch does not answer
                print(f"hpc-runner status: the waiting points of {v.name} were not submitted ({exc})",
                      file=sys.stderr)
    return sent


def status_main(args: argparse.Namespace) -> int:
    """``status DIR`` of a pipeline dir: every stage's state (``--all``: each search's points)."""
    started = time.monotonic()
    while True:
        if not args.no_submit:
            cancel_never_satisfied(Path(args.dir), lambda m: print(m, file=sys.stderr))
        record, views = view(args.dir)
        if not args.no_submit and _top_up(views, args.json):
            record, views = view(args.dir)
        active = [v for v in views if v.active]
        if not (args.wait or args.watch) or not active:
            break
        if args.timeout is not None and time.monotonic() - started > args.timeout:
            print(f"hpc-runner status: {len(active)} stage(s) still queued or running after {args.timeout:g} s")
            break
        if args.watch:
            print(render(record, views), flush=True)
        settle_after_imports()  # hpc_runner/heap.py: a long wait gets the collector back as CPython has it
        time.sleep(args.interval)
    if args.json:
        for v in views:
            print(dumps_json(v.to_json(), default=str))
    else:
        print(render(record, views))
        if args.all:
            for v in views:
                if v.target is not None and v.points and v.answer is not None:
                    print(f"\n# stage {v.name}")
                    print(render_points(v.target, v.points, v.answer, True))
    if args.wait or args.watch:
        return 0 if all(v.state == COMPLETED for v in views) else 1
    return 0


def collect_main(args: argparse.Namespace) -> int:
    """``collect DIR`` of a pipeline dir: pipeline.md and pipeline.json (the chain)."""
    text, md, js = write_chain(args.dir, args.out)
    if not args.quiet:
        print(text)
    print(f"hpc-runner: the pipeline's chain -> {md} and {js}")
    return 0


def report_main(args: argparse.Namespace) -> int:
    """``report DIR`` of a pipeline dir: report.html (the chain), each stage's own report linked."""
    page, linked = write_report(args.dir)
    print(f"hpc-runner: wrote the pipeline report {page} ({len(linked)} stage report(s) linked)")
    print(f"  open: file://{page.resolve()}")
    return 0


def resume_main(args: argparse.Namespace) -> int:
    """``resume DIR`` of a pipeline dir: queue again only what failed or never ran."""
    if args.points or args.cause or args.override_tokens:
        raise UserError(f"{args.dir} is a pipeline dir: resume queues again its stages that failed or never ran; "
                        "--points, --cause and overrides are for a sweep dir (one of its stages' folders)",
                        expected="hpc-runner resume DIR [--cluster P] [--scheduler-option K=V]")
    directory = Path(args.dir)
    changes = parse_setting_overrides(args.slurm)
    if args.cluster:
        profile = load_profile(args.cluster, changes)
    else:
        profile = recorded_profile(PipelineRecord.load(directory))
        if changes:
            check_settings(changes, "--scheduler-option")
            profile.settings.update(changes)
    plan, res = resume_pipeline(directory, profile, log=lambda m: print(m, flush=True), dry_run=args.dry_run,
                                preflight=not args.no_preflight)
    kept = [n for n, a in plan.actions.items() if a == KEEP]
    print(f"hpc-runner: {len(kept)} stage(s) kept ({', '.join(kept) or 'none'}); "
          f"{len(plan.todo())} to queue again ({', '.join(f'{n}: {plan.actions[n]}' for n in plan.todo()) or 'none'})")
    if args.dry_run or not plan.todo():
        return 0
    if res.ran_here:
        record, views = view(directory)
        print(render(record, views))
        return 0 if all(v.state == "COMPLETED" for v in views) else 1
    for name, jobs in res.jobs.items():
        print(f"  {name:<12} job(s) {', '.join(jobs) or '-'}")
    print(f"  status: hpc-runner status {shlex.quote(str(directory))}")
    return 0


def cancel_main(args: argparse.Namespace) -> int:
    """``cancel DIR`` of a pipeline dir."""
    stages, jobs = cancel_pipeline(Path(args.dir), log=lambda m: print(m, flush=True))
    if not stages:
        print("hpc-runner: nothing to cancel: no stage is queued or running")
    else:
        print(f"hpc-runner: cancelled stage(s) {', '.join(stages)}" + (f": scancel {' '.join(jobs)}" if jobs else ""))
    return 0

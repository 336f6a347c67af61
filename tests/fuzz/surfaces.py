"""Where a hostile value can enter hpc-runner: one line per surface.

A surface is a subcommand, the kind of hostile value it takes (``text``: into argv or the environment; ``file``: a
file it reads; ``answers``: what the fake scheduler prints) and ``build(case, value)``, which puts the value in the
case (files, profile, environment) and returns the argv of the call (or a callable for what is no subcommand). A new
surface is one more line in ``SURFACES``; a new subcommand without a line fails test_every_subcommand_has_a_surface.

Every call is kept cheap: the tiny example bundle (two 16^3 volumes, one epoch, well under a second here),
``--dry-run`` where the command has one, ``--cluster mem`` (the in-memory cluster: nothing runs) or the fake
scheduler (``fuzzslurm``: a SLURM profile whose sbatch, sacct... are the case's scripts; ``fuzzsge``: the shipped
``sge-local`` profile, whose qsub, qstat, qacct, qconf... are).
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.fuzz.harness import BUNDLE, Case
from tests.fuzz.strategies import ANSWER_CLASSES, FILE_CLASSES, TEXT_CLASSES, FileSpec

B = ["--bundle", str(BUNDLE)]
TINY_IDS = {"num_train": 2, "num_val": 1, "image_size": 16, "max_epochs": 1, "val_interval": 1, "batch_size": 1}
TINY = [tok for key, value in TINY_IDS.items() for tok in (f"--{key}", str(value))]
CLASSES = {"text": TEXT_CLASSES, "file": FILE_CLASSES, "answers": ANSWER_CLASSES}


@dataclass(frozen=True)
class Surface:
    """One way in: ``command`` (a subcommand of build_parser(), or a name in parentheses for what is none), what
    the hostile value is (``kind``), ``build(case, value) -> argv``, the argv lists run first with sane input
    (``setup``), and folders in HOME this command may write (``writable``)."""

    command: str
    what: str
    kind: str
    build: Callable[[Case, Any], list[str] | Callable[[], int]]
    setup: Callable[[Case], list[list[str]]] | None = None
    writable: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return f"{self.command}: {self.what}"


def tiny(case: Case) -> list[str]:
    """The example bundle, trained for a moment on the shared synthetic data."""
    return [*B, *TINY, "--dataset_dir", str(case.fixtures["data"])]


def mem(case: Case) -> list[str]:
    return [*tiny(case), "--cluster", "mem"]


def run_dir(case: Case, damage: str | None = None, spec: FileSpec | None = None) -> str:
    """A copy of the finished run, with ``damage`` (a file in it) replaced by ``spec``."""
    folder = case.copy("run", "run")
    if damage and spec is not None:
        case.damage(folder, damage, spec)
    return str(folder)


def sweep_dir(case: Case, damage: str | None = None, spec: FileSpec | None = None) -> str:
    """A copy of the finished two-point local sweep, with ``damage`` replaced by ``spec``."""
    folder = case.copy("sweep", "sweep")
    if damage and spec is not None:
        case.damage(folder, damage, spec)
    return str(folder)


def slurm_sweep(case: Case) -> list[list[str]]:
    """Set-up: a two-point sweep submitted to the fake scheduler (sane answers) into ``work/ssw``."""
    return [["sweep", *tiny(case), "--cluster", "fuzzslurm", "--sweep", "seed=1,2", "--no-preflight",
             "--output_dir", "ssw"]]


def sge_sweep(case: Case) -> list[list[str]]:
    """Set-up: a two-point sweep submitted to the fake Grid Engine (sane answers) into ``work/gsw``."""
    return [["sweep", *tiny(case), "--cluster", "fuzzsge", "--sweep", "seed=1,2", "--no-preflight",
             "--output_dir", "gsw"]]


# a Grid Engine profile in its own words (scheduler/gridengine/settings.py); a surface puts a hostile value in one key
SGE_PROFILE = {"executor": "gridengine", "queue": "all.q", "pe": "smp", "h_rt": "0:10:0", "h_vmem": "2G",
               "project": "p1", "slots": 1, "description": "fuzz"}


def sge_profile_value(case: Case, key: str, value: str) -> str:
    """A Grid Engine profile whose ``key`` is the hostile ``value``; returns its name."""
    return case.profile("hostile", FileSpec("mutate", index=list(SGE_PROFILE).index(key), value=value), SGE_PROFILE)


def with_answers(case: Case, answers: Any, argv: list[str]) -> list[str]:
    case.answers(answers)
    return argv


def with_env(case: Case, name: str, value: str, argv: list[str]) -> list[str]:
    """``value`` in the environment as a process would find it: its bytes (no NUL, which no environment holds),
    decoded as Python decodes the environment (a lone surrogate no decoding makes becomes its bytes' form)."""
    raw = value.replace("\x00", "").encode("utf-8", "surrogatepass")
    case.env[name] = raw.decode("utf-8", "surrogateescape")
    return argv


def limits_cache(case: Case, spec: FileSpec) -> None:
    """The kept sacctmgr answers of the fake cluster ``fuzz`` (scheduler/slurm/limits_cache.py) replaced by
    ``spec``."""
    from hpc_runner.scheduler.slurm import limits_cache as lc
    from hpc_runner.scheduler.slurm.limits import current_user

    path = lc._file("fuzz", current_user())
    rel = "~/" + str(path.relative_to(case.home)) if path.is_relative_to(case.home) else str(path)
    case.file(rel, spec, {"at": 1e18, "cluster": "fuzz", "user": current_user(),
                          "answers": {"sacctmgr x": "a|b", "sacctmgr y": "c|d"}})


def job_file(case: Case, spec: FileSpec) -> Callable[[], int]:
    """The job side: ``python -m hpc_runner.scheduler.slurm.job_call FILE.json`` on a hostile arguments file. Its
    documented failure is an exception (traceback and exit 1 in the job's log); here a clean refusal is a
    ValueError or UserError, anything else (RecursionError, MemoryError, UnicodeError...) or running a function
    is the finding."""
    path = case.file("jobs/job-1.json", spec, {"function": "hpc_runner.jobs.job:run_points",
                                               "tasks": [[str(case.work), [0]]]})
    case.env.update(SLURM_JOB_ID="1", SLURM_ARRAY_TASK_ID="0")

    def job_call() -> int:
        from hpc_runner.errors import UserError
        from hpc_runner.scheduler.slurm.job_call import task_call

        try:
            task_call(__import__("pathlib").Path(path), 0)
        except (ValueError, UserError) as exc:
            print(f"job_call: error: {exc}", file=__import__("sys").stderr)
            return 2
        return 0

    return job_call


def decathlon(case: Case, spec: FileSpec) -> list[str]:
    """``init --from decathlon DIR`` of a Decathlon folder whose dataset.json is ``spec``."""
    folder = case.copy("decathlon", "Task01_X")
    case.damage(folder, "dataset.json", spec)
    return ["init", "xbundle", "--from", "decathlon", str(folder), "--to", "xb"]


def bundle_copy(case: Case, damage: str, spec: FileSpec) -> str:
    """A copy of the example bundle with ``damage`` (a file in it) replaced by ``spec``."""
    folder = case.copy("bundle", "b")
    case.damage(folder, damage, spec)
    return str(folder)


PIPELINE = {"bundle": str(BUNDLE), "overrides": dict(TINY_IDS), "stages": [
    {"name": "search", "sweep": ["learning_rate=1e-3,4e-3"], "overrides": {"max_epochs": 1}},
    {"name": "best", "select": {"from": "search", "metric": "val_dice", "mode": "max"}},
    {"name": "test", "entry": "evaluate", "from": "best"},
    {"name": "predict", "entry": "inference", "from": "best", "shards": 2},
]}


def pipeline_file(case: Case, spec: FileSpec) -> list[str]:
    path = case.file("study.yaml", spec, PIPELINE)
    return ["pipeline", path, "--cluster", "mem", "--dry-run", "--no-preflight"]


def completion_profiles(case: Case, name: str) -> Callable[[], int]:
    """The bash completion's profile candidates (``_hpcr_profiles``) with a profile file of a hostile name: it
    lists names, runs nothing they hold."""
    safe = name.replace("/", "_").replace("\x00", "")[:200] or "_"
    with contextlib.suppress(OSError, UnicodeEncodeError):
        (case.home / ".config/hpc-runner/clusters" / f"{safe}.yaml").write_text("extends: local\n")
    case.made.append(f"~/.config/hpc-runner/clusters/{safe!r}.yaml")
    case.writable.append(".config/hpc-runner/clusters")  # the profile made above

    def listing() -> int:
        from hpc_runner.cli.completion import script

        path = case.root / "tmp" / "completion.bash"
        path.write_text(script("bash"))
        # the path and the prefix are bash's arguments, never spliced into its code
        proc = subprocess.run(["bash", "-c", 'source "$1"; _hpcr_profiles ""; _hpcr_profiles "$2"', "bash",
                               str(path), safe[:1]], capture_output=True, timeout=20, cwd=case.work)
        print(proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace"))
        return proc.returncode

    return listing


RUN_RECORDS = ("run.yaml", "summary.json", "metrics.jsonl")
SWEEP_RECORDS = ("sweep.yaml", "points/0001/run.yaml", "points/0000/summary.json")


def record_lines(command: str, extra: list[str] | None = None, run: tuple[str, ...] = RUN_RECORDS,
                 sweep: tuple[str, ...] = SWEEP_RECORDS) -> list[Surface]:
    """One line per damaged record of a finished run (``run``) and sweep (``sweep``) that ``command`` reads."""
    extra = extra or []
    lines = [Surface(command, f"run dir {record}", "file", lambda c, v, r=record: [command, run_dir(c, r, v), *extra])
             for record in run]
    lines += [Surface(command, f"sweep dir {record}", "file",
                      lambda c, v, r=record: [command, sweep_dir(c, r, v), *extra]) for record in sweep]
    return lines


SURFACES: list[Surface] = [
    # ---- run: paths, overrides, containers, --cpus
    Surface("run", "--output_dir", "text", lambda c, v: ["run", *tiny(c), "--output_dir", v]),
    Surface("run", "override --max_epochs", "text", lambda c, v: ["run", *tiny(c), "--max_epochs", v,
                                                                   "--output_dir", "r"]),
    Surface("run", "--cpus", "text", lambda c, v: ["run", *tiny(c), "--cpus", v, "--output_dir", "r"]),
    Surface("run", "--stage --stage-max-gb", "text",
            lambda c, v: ["run", *tiny(c), "--stage", "--stage-dir", str(c.work / "stage"), "--stage-max-gb", v,
                          "--output_dir", "r"]),
    Surface("run", "--stage --read-slots", "text",
            lambda c, v: ["run", *tiny(c), "--stage", "--stage-dir", str(c.work / "stage"), "--read-slots", v,
                          "--output_dir", "r"]),
    Surface("run", "--stage --stage-clean", "text",
            lambda c, v: ["run", *tiny(c), "--stage", "--stage-dir", str(c.work / "stage"), "--stage-clean", v,
                          "--output_dir", "r"]),
    Surface("run", "--container", "text", lambda c, v: ["run", *tiny(c), "--container", v, "--output_dir", "r"]),
    Surface("run", "--container FILE", "file", lambda c, v: ["run", *tiny(c), "--container", c.file("img.sif", v),
                                                              "--output_dir", "r"]),
    Surface("run", "--args_file", "file", lambda c, v: ["run", *tiny(c), "--args_file", c.file("args.json", v),
                                                         "--output_dir", "r"]),
    Surface("run", "--resume", "file", lambda c, v: ["run", *tiny(c), "--resume", run_dir(c, "run.yaml", v)]),
    Surface("run", "env HPCR__learning_rate", "text",
            lambda c, v: with_env(c, "HPCR__learning_rate", v, ["run", *tiny(c), "--output_dir", "r"])),
    # ---- config: the parsing of values without a run
    Surface("config", "override --learning_rate", "text", lambda c, v: ["config", *B, "--learning_rate", v]),
    Surface("config", "override --network_def::channels", "text",
            lambda c, v: ["config", *B, "--network_def::channels", v]),
    Surface("config", "a new id --+x", "text", lambda c, v: ["config", *B, "--+extra", v]),
    Surface("config", "env HPCR__max_epochs", "text",
            lambda c, v: with_env(c, "HPCR__max_epochs", v, ["config", *B, "--resolve", "--id", "max_epochs"])),
    Surface("config", "env HPCR_ setting", "text", lambda c, v: with_env(c, "HPCR_LOCK", v, ["config", *B])),
    Surface("config", "--id", "text", lambda c, v: ["config", *B, "--id", v]),
    Surface("config", "--ids --bundle (completion's id list)", "text", lambda c, v: ["config", "--ids", "--bundle", v]),
    Surface("config", "--config_file", "file", lambda c, v: ["config", "--config_file", c.file("train.yaml", v)]),
    Surface("config", "--meta_file", "file", lambda c, v: ["config", *B, "--meta_file", c.file("metadata.json", v)]),
    Surface("config", "--args_file", "file", lambda c, v: ["config", *B, "--args_file", c.file("args.yaml", v)]),
    Surface("config", "--safe --config_file", "file",
            lambda c, v: ["config", "--safe", "--config_file", c.file("t.json", v)]),
    # ---- cache, list, verify, init, pack, install
    Surface("cache", "--dataset --json", "text", lambda c, v: ["cache", *tiny(c), "--dataset", v, "--json"]),
    Surface("list", "NAME", "text", lambda c, v: ["list", v]),
    Surface("verify", "BUNDLE", "text", lambda c, v: ["verify", v]),
    Surface("verify", "metadata.json", "file",
            lambda c, v: ["verify", bundle_copy(c, "configs/metadata.json", v), "--no-imports"]),
    Surface("verify", "train.yaml", "file", lambda c, v: ["verify", bundle_copy(c, "configs/train.yaml", v)]),
    Surface("init", "NAME", "text", lambda c, v: ["init", v]),
    Surface("init", "--to", "text", lambda c, v: ["init", "xbundle", "--to", v]),
    Surface("init", "--from decathlon DIR (path)", "text", lambda c, v: ["init", "xbundle", "--from", "decathlon", v]),
    Surface("init", "--from decathlon dataset.json", "file", decathlon),
    Surface("init", "--from decathlon --roi-size", "text",
            lambda c, v: ["init", "xbundle", "--from", "decathlon", str(c.copy("decathlon", "Task01_X")),
                          "--roi-size", v]),
    Surface("init", "--from decathlon DIR NAME (name last)", "text", lambda c, v: ["init", "--from", "decathlon", v,
                                                                                  "xbundle"]),
    Surface("pack", "BUNDLE", "text", lambda c, v: ["pack", v]),
    Surface("pack", "--out", "text", lambda c, v: ["pack", str(BUNDLE), "--out", v]),
    Surface("install", "ARCHIVE (path)", "text", lambda c, v: ["install", v, "--to", "inst"]),
    Surface("install", "ARCHIVE", "file", lambda c, v: ["install", c.file("b.tar.gz", v), "--to", "inst"]),
    # ---- submit (in-memory cluster, --dry-run) and its profiles
    Surface("submit", "--output_dir --json", "text",
            lambda c, v: ["submit", *mem(c), "--dry-run", "--json", "--no-preflight", "--output_dir", v]),
    Surface("submit", "--slurm KEY=VALUE", "text",
            lambda c, v: ["submit", *mem(c), "--dry-run", "--no-preflight", "--slurm", f"time={v}"]),
    Surface("submit", "--slurm VALUE", "text", lambda c, v: ["submit", *mem(c), "--dry-run", "--slurm", v]),
    Surface("submit", "--safe --writable", "text",
            lambda c, v: ["submit", *mem(c), "--dry-run", "--no-preflight", "--safe", "--writable", v]),
    Surface("submit", "--container", "text",
            lambda c, v: ["submit", *mem(c), "--dry-run", "--no-preflight", "--container", v]),
    Surface("submit", "--cpus", "text", lambda c, v: ["submit", *mem(c), "--dry-run", "--cpus", v]),
    Surface("submit", "--stage --stage-dir", "text",
            lambda c, v: ["submit", *mem(c), "--dry-run", "--stage", "--stage-dir", v]),
    Surface("submit", "--stage-clean without --stage", "text",
            lambda c, v: ["submit", *mem(c), "--dry-run", "--stage-clean", v]),
    Surface("submit", "--cluster NAME", "text", lambda c, v: ["submit", *tiny(c), "--dry-run", "--cluster", v]),
    Surface("submit", "--cluster profile file", "file",
            lambda c, v: ["submit", *tiny(c), "--dry-run", "--json", "--cluster", c.profile("hostile", v)]),
    Surface("submit", "--cluster profile extends: a hostile parent", "file",
            lambda c, v: ["submit", *tiny(c), "--dry-run", "--cluster", c.profile("child", FileSpec(
                "bytes", f"extends: {c.profile('parent', v)}\ntime: 5\n".encode()))]),
    Surface("submit", "--cluster profile value (text)", "text",
            lambda c, v: ["submit", *tiny(c), "--dry-run", "--cluster", c.profile("hostile", FileSpec(
                "mutate", index=1, value=v))]),
    Surface("submit", "scheduler answers", "answers",
            lambda c, v: with_answers(c, v, ["submit", *tiny(c), "--cluster", "fuzzslurm", "--no-preflight",
                                             "--output_dir", "sub"])),
    Surface("submit", "scheduler answers --json", "answers",
            lambda c, v: with_answers(c, v, ["submit", *tiny(c), "--cluster", "fuzzslurm", "--no-preflight",
                                             "--json", "--output_dir", "sub"])),
    # ---- submit to Grid Engine (its own profile keys, its answers)
    *(Surface("submit", f"--cluster Grid Engine profile {key} (text)", "text",
              lambda c, v, key=key: ["submit", *tiny(c), "--dry-run", "--no-preflight", "--cluster",
                                     sge_profile_value(c, key, v)]) for key in ("queue", "pe", "h_rt", "h_vmem")),
    Surface("submit", "--scheduler-option VALUE on Grid Engine", "text",
            lambda c, v: ["submit", *tiny(c), "--cluster", "fuzzsge", "--dry-run", "--no-preflight",
                          "--scheduler-option", v]),
    Surface("submit", "Grid Engine answers", "answers",
            lambda c, v: with_answers(c, v, ["submit", *tiny(c), "--cluster", "fuzzsge", "--no-preflight",
                                             "--output_dir", "sub"])),
    # ---- sweep
    Surface("sweep", "--sweep seed=VALUE", "text",
            lambda c, v: ["sweep", *mem(c), "--dry-run", "--sweep", f"seed={v}"]),
    Surface("sweep", "--sweep learning_rate=1e-3,VALUE --json", "text",
            lambda c, v: ["sweep", *mem(c), "--dry-run", "--json", "--sweep", f"learning_rate=1e-3,{v}"]),
    Surface("sweep", "--sweep VALUE", "text", lambda c, v: ["sweep", *mem(c), "--dry-run", "--sweep", v]),
    Surface("sweep", "--stage --stage-max-gb", "text",
            lambda c, v: ["sweep", *mem(c), "--dry-run", "--sweep", "seed=1,2", "--stage", "--stage-max-gb", v]),
    Surface("sweep", "--array-parallelism", "text",
            lambda c, v: ["sweep", *mem(c), "--dry-run", "--sweep", "seed=1,2", "--array-parallelism", v]),
    Surface("sweep", "--pack", "text",
            lambda c, v: ["sweep", *mem(c), "--dry-run", "--sweep", "seed=1,2", "--pack", v]),
    Surface("sweep", "--retry", "text",
            lambda c, v: ["sweep", *mem(c), "--dry-run", "--sweep", "seed=1,2", "--retry", v]),
    Surface("sweep", "--right-size", "text",
            lambda c, v: ["sweep", *mem(c), "--dry-run", "--sweep", "seed=1,2", "--right-size", v]),
    Surface("sweep", "--max-retries", "text",
            lambda c, v: ["sweep", *mem(c), "--dry-run", "--sweep", "seed=1,2", "--max-retries", v]),
    Surface("sweep", "--sweep-file", "file",
            lambda c, v: ["sweep", *mem(c), "--dry-run", "--sweep-file", c.file("points.yaml", v)]),
    Surface("sweep", "queued in memory, --output_dir", "text",
            lambda c, v: ["sweep", *mem(c), "--no-preflight", "--sweep", "seed=1,2", "--output_dir", v]),
    Surface("sweep", "scheduler answers", "answers",
            lambda c, v: with_answers(c, v, ["sweep", *tiny(c), "--cluster", "fuzzslurm", "--sweep", "seed=1,2",
                                             "--no-preflight", "--output_dir", "ssw"])),
    Surface("sweep", "scheduler answers --dry-run --json", "answers",
            lambda c, v: with_answers(c, v, ["sweep", *tiny(c), "--cluster", "fuzzslurm", "--sweep", "seed=1,2",
                                             "--no-preflight", "--dry-run", "--json"])),
    Surface("sweep", "Grid Engine answers --json", "answers",
            lambda c, v: with_answers(c, v, ["sweep", *tiny(c), "--cluster", "fuzzsge", "--sweep", "seed=1,2",
                                             "--no-preflight", "--json", "--output_dir", "gsw"])),
    Surface("sweep", "kept limits cache", "file",
            lambda c, v: limits_cache(c, v) or ["sweep", *tiny(c), "--cluster", "fuzzslurm", "--sweep", "seed=1,2",
                                                "--no-preflight", "--dry-run"]),
    # ---- the run records: status, collect, report, rerun, resume, cancel, tracking
    Surface("status", "DIR", "text", lambda c, v: ["status", v]),
    Surface("status", "--json of a sweep, --interval", "text",
            lambda c, v: ["status", sweep_dir(c), "--json", "--interval", v]),
    *record_lines("status", ["--json"]),
    Surface("status", "scheduler answers", "answers", lambda c, v: with_answers(c, v, ["status", "ssw", "--json"]),
            setup=slurm_sweep),
    Surface("status", "Grid Engine answers", "answers",
            lambda c, v: with_answers(c, v, ["status", "gsw", "--json"]), setup=sge_sweep),
    Surface("collect", "--out", "text", lambda c, v: ["collect", sweep_dir(c), "--out", v]),
    *record_lines("collect", run=("summary.json",), sweep=("sweep.yaml", "points/0000/summary.json", "results.jsonl")),
    Surface("report", "DIR", "text", lambda c, v: ["report", v]),
    *record_lines("report", run=("run.yaml", "metrics.jsonl"), sweep=("sweep.yaml",)),  # plots: ~0.5 s a call
    Surface("rerun", "--entry", "text", lambda c, v: ["rerun", run_dir(c), "--dry-run", "--entry", v]),
    Surface("rerun", "--output_dir", "text", lambda c, v: ["rerun", run_dir(c), "--dry-run", "--output_dir", v]),
    Surface("rerun", "run dir run.yaml", "file", lambda c, v: ["rerun", run_dir(c, "run.yaml", v), "--dry-run"]),
    Surface("rerun", "run dir config.yaml", "file", lambda c, v: ["rerun", run_dir(c, "config.yaml", v), "--dry-run"]),
    Surface("resume", "--points", "text", lambda c, v: ["resume", sweep_dir(c), "--dry-run", "--points", v]),
    Surface("resume", "--cause", "text", lambda c, v: ["resume", sweep_dir(c), "--dry-run", "--cause", v]),
    Surface("resume", "sweep dir sweep.yaml", "file",
            lambda c, v: ["resume", sweep_dir(c, "sweep.yaml", v), "--dry-run"]),
    Surface("resume", "run dir run.yaml", "file", lambda c, v: ["resume", run_dir(c, "run.yaml", v), "--dry-run"]),
    Surface("resume", "scheduler answers", "answers",
            lambda c, v: with_answers(c, v, ["resume", "ssw", "--dry-run"]), setup=slurm_sweep),
    Surface("cancel", "DIR", "text", lambda c, v: ["cancel", v]),
    Surface("cancel", "sweep dir sweep.yaml", "file", lambda c, v: ["cancel", sweep_dir(c, "sweep.yaml", v)]),
    Surface("cancel", "scheduler answers", "answers", lambda c, v: with_answers(c, v, ["cancel", "ssw"]),
            setup=slurm_sweep),
    Surface("cancel", "Grid Engine answers", "answers", lambda c, v: with_answers(c, v, ["cancel", "gsw"]),
            setup=sge_sweep),
    Surface("tracking", "send RUN_DIR run.yaml", "file",
            lambda c, v: ["tracking", "send", run_dir(c, "run.yaml", v)]),
    Surface("tracking", "send RUN_DIR", "text", lambda c, v: ["tracking", "send", v]),
    # ---- tune, pipeline
    Surface("tune", "--space", "text", lambda c, v: ["tune", *mem(c), "--dry-run", "--json", "--space", v]),
    Surface("tune", "--space loguniform(VALUE)", "text",
            lambda c, v: ["tune", *mem(c), "--dry-run", "--space", f"learning_rate=loguniform(1e-4,{v})"]),
    Surface("tune", "--trials", "text", lambda c, v: ["tune", *mem(c), "--dry-run", "--trials", v, "--space",
                                                       "learning_rate=loguniform(1e-4,1e-1)"]),
    Surface("tune", "--metric", "text", lambda c, v: ["tune", *mem(c), "--dry-run", "--metric", v, "--space",
                                                       "learning_rate=loguniform(1e-4,1e-1)"]),
    Surface("pipeline", "FILE", "file", pipeline_file),
    Surface("pipeline", "FILE (path)", "text", lambda c, v: ["pipeline", v, "--cluster", "mem", "--dry-run"]),
    # ---- cluster profiles
    Surface("cluster", "show NAME", "text", lambda c, v: ["cluster", "show", v, "--json"]),
    Surface("cluster", "show a hostile profile", "file",
            lambda c, v: ["cluster", "show", c.profile("hostile", v), "--json"]),
    Surface("cluster", "show: scheduler answers", "answers",
            lambda c, v: with_answers(c, v, ["cluster", "show", "fuzzslurm", "--json"])),
    Surface("cluster", "show: Grid Engine answers", "answers",
            lambda c, v: with_answers(c, v, ["cluster", "show", "fuzzsge", "--json"])),
    Surface("cluster", "init NAME", "text", lambda c, v: ["cluster", "init", v],
            writable=(".config/hpc-runner/clusters",)),
    Surface("cluster", "init: scheduler answers", "answers",
            lambda c, v: with_answers(c, v, ["cluster", "init", "newcluster", "--json"]),
            writable=(".config/hpc-runner/clusters",)),
    Surface("cluster", "init --partition", "text", lambda c, v: ["cluster", "init", "newcluster", "--partition", v],
            writable=(".config/hpc-runner/clusters",)),
    Surface("cluster", "init --from PROFILE", "text", lambda c, v: ["cluster", "init", "newcluster", "--from", v],
            writable=(".config/hpc-runner/clusters",)),
    Surface("cluster", "check NAME", "text", lambda c, v: ["cluster", "check", v, "--timeout", "1"],
            writable=(".config/hpc-runner/clusters", ".cache/hpc-runner")),
    # ---- completion
    Surface("completion", "SHELL", "text", lambda c, v: ["completion", v]),
    Surface("completion", "bash profile candidates", "text", completion_profiles),
    # ---- MONAI's bundle commands
    Surface("run_workflow", "--config_file", "file",
            lambda c, v: ["run_workflow", "--config_file", c.file("wf.json", v), "--workflow_name", "training"]),
    Surface("ckpt_export", "--ckpt_file", "file",
            lambda c, v: ["ckpt_export", "--net_id", "network_def", "--filepath", "m.ts", "--ckpt_file",
                          c.file("model.pt", v), "--config_file", str(BUNDLE / "configs/train.yaml")]),
    Surface("onnx_export", "--ckpt_file", "file",
            lambda c, v: ["onnx_export", "--net_id", "network_def", "--filepath", "m.onnx", "--ckpt_file",
                          c.file("model.pt", v), "--config_file", str(BUNDLE / "configs/train.yaml")]),
    Surface("verify_metadata", "--meta_file", "file",
            lambda c, v: ["verify_metadata", "--meta_file", c.file("metadata.json", v), "--filepath", "s.json"]),
    Surface("verify_net_in_out", "--config_file", "file",  # the bundle's own network: a 64^3 forward pass, ~3 s
            lambda c, v: ["verify_net_in_out", "--net_id", "network_def", "--meta_file",
                          str(BUNDLE / "configs/metadata.json"), "--config_file", c.file("net.yaml", v)]),
    Surface("init_bundle", "BUNDLE_DIR", "text", lambda c, v: ["init_bundle", v]),
    Surface("init_bundle", "--metadata_str", "text", lambda c, v: ["init_bundle", "nb", "--metadata_str", v]),
    # ---- the job side: the arguments file a command job reads (hpc-runner job FILE, as a job script runs it)
    Surface("job", "ARGS_FILE", "file", lambda c, v: ["job", c.file("jobs/job-1.json", v, {
        "function": "hpc_runner.jobs.job:run_points", "tasks": []}), "--task", "0"]),
    Surface("(job file)", "job_call's arguments FILE.json", "file", job_file),
]

"""The Optuna study of a tune: a journal file in the sweep dir, and the samplers and pruners by name.

The journal backend appends one JSON line per operation under a file lock (a symlink or an
``O_CREAT|O_EXCL`` lock file), which works on NFS/Lustre where SQLite locks or corrupts; there is no
server. Samplers and pruners are not stored in the journal: every worker builds its own from the
names recorded in sweep.yaml. Pruners see one step per validation: the number of epochs trained.
"""

from __future__ import annotations

import hashlib
import warnings
from pathlib import Path
from typing import Any

from hpc_runner.errors import UserError

JOURNAL_FILE = "optuna.journal"
STUDY_NAME = "tune"
SAMPLERS = ("tpe", "random", "qmc")
PRUNERS = ("asha", "hyperband", "median", "none")
DIRECTIONS = ("maximize", "minimize")


def _check(kind: str, name: str, known: tuple[str, ...]) -> None:
    if name not in known:
        import difflib

        close = difflib.get_close_matches(name, known, n=1)
        raise UserError(f"unknown {kind} '{name}'", expected=f"--{kind} {'|'.join(known)}",
                        hint=f"Did you mean '{close[0]}'?" if close else None)


def stream_seed(seed: int | None, *parts: Any) -> int | None:
    """Return a seed for one worker attempt: workers (and a requeued worker) must not replay one random stream."""
    if seed is None:
        return None
    digest = hashlib.sha256(repr((seed, *parts)).encode()).digest()
    return int.from_bytes(digest[:4], "little")


def make_sampler(name: str, seed: int | None = None, stream: tuple[Any, ...] = (), **options: Any) -> Any:
    """Return the Optuna sampler called ``name`` (tpe, random, qmc), with its options."""
    import optuna

    _check("sampler", name, SAMPLERS)
    own = stream_seed(seed, *stream) if stream else seed
    if name == "qmc":
        # every worker must draw from the same sequence: QMCSampler keeps its position in the study
        cls, kwargs = optuna.samplers.QMCSampler, {"seed": seed, "scramble": seed is not None,
                                                   "warn_independent_sampling": False,
                                                   "warn_asynchronous_seeding": False}
    elif name == "random":
        cls, kwargs = optuna.samplers.RandomSampler, {"seed": own}
    else:  # constant_liar: trials running in other workers count as bad guesses, so parallel workers spread out
        cls, kwargs = optuna.samplers.TPESampler, {"seed": own, "constant_liar": True}
    try:
        with warnings.catch_warnings():  # "experimental" (QMC, some TPE options): not the user's concern
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return cls(**{**kwargs, **options})
    except (TypeError, ValueError) as exc:
        raise UserError(f"bad options for the {name} sampler: {exc}", expected="options of its Optuna class",
                        hint=f"--sampler-option KEY=VALUE takes the keyword arguments of optuna.samplers.{cls.__name__}"
                        ) from None


# what Optuna's pruners need of their numeric options (optuna.pruners: SuccessiveHalving, Hyperband, Median)
PRUNER_MINIMUMS = {"reduction_factor": 2, "min_resource": 1, "max_resource": 1, "min_early_stopping_rate": 0,
                   "n_startup_trials": 0, "n_warmup_steps": 0, "interval_steps": 1, "n_min_trials": 1,
                   "bootstrap_count": 0}


def make_pruner(name: str, **options: Any) -> Any:
    """Return the Optuna pruner called ``name`` (asha, hyperband, median, none), with its options."""
    import optuna

    _check("pruner", name, PRUNERS)
    factories = {
        "asha": optuna.pruners.SuccessiveHalvingPruner,
        "hyperband": optuna.pruners.HyperbandPruner,
        "median": optuna.pruners.MedianPruner,
        "none": optuna.pruners.NopPruner,
    }
    for key, minimum in PRUNER_MINIMUMS.items():  # Hyperband takes reduction_factor=-1 and fails trials later
        value = options.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value < minimum:
            raise UserError(f"--pruner-option {key}={value} is too small for the {name} pruner",
                            expected=f"{key} >= {minimum}")
    try:
        return factories[name](**options)
    except (TypeError, ValueError) as exc:
        raise UserError(f"bad options for the {name} pruner: {exc}", expected="options of its Optuna class") from None


def rehearse(settings: Any, distributions: dict[str, Any], trials: int = 12) -> None:
    """Run the sampler and pruner over a few made-up trials in memory: an option value Optuna only trips
    on when it asks or prunes (``n_startup_trials=abc``) fails here, not in every queued worker."""
    import optuna

    sampler = make_sampler(settings.sampler, settings.seed, **settings.sampler_options)
    pruner = make_pruner(settings.pruner, **settings.pruner_options)
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "new study created in memory"
    study = optuna.create_study(direction=settings.direction, sampler=sampler, pruner=pruner)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for i in range(trials):  # past TPE's 10 random start-up trials, so its model is built once
                trial = study.ask(distributions)
                trial.report(i / trials, 1)
                trial.should_prune()
                study.tell(trial, i / trials)
    except Exception as exc:  # Optuna's own check of a bad value: TypeError, ValueError, ...
        raise UserError(f"the {settings.sampler} sampler or the {settings.pruner} pruner fails on a trial with "
                        f"these options: {type(exc).__name__}: {exc}",
                        expected="--sampler-option/--pruner-option values of the types their Optuna class takes",
                        hint=f"sampler options {settings.sampler_options}, pruner options {settings.pruner_options}"
                        ) from None


def journal_path(sweep_dir: str | Path) -> Path:
    """Return the study's journal file in the sweep dir."""
    return Path(sweep_dir) / JOURNAL_FILE


def open_study(
    sweep_dir: str | Path,
    direction: str = "maximize",
    sampler: str = "tpe",
    pruner: str = "asha",
    seed: int | None = None,
    *,
    pruner_options: dict[str, Any] | None = None,
    sampler_options: dict[str, Any] | None = None,
    stream: tuple[Any, ...] = (),
) -> Any:
    """Create or load the study of ``sweep_dir`` (journal file ``optuna.journal``, study name ``tune``)."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

    _check("direction", direction, DIRECTIONS)
    path = journal_path(sweep_dir)
    # the open-lock (O_CREAT|O_EXCL) works where symlinks are not allowed (some shared filesystems)
    storage = JournalStorage(JournalFileBackend(str(path), lock_obj=JournalFileOpenLock(str(path))))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(
        storage=storage,
        study_name=STUDY_NAME,
        direction=direction,  # type: ignore[arg-type]
        sampler=make_sampler(sampler, seed, stream, **(sampler_options or {})),
        pruner=make_pruner(pruner, **(pruner_options or {})),
        load_if_exists=True,
    )


def read_study(sweep_dir: str | Path) -> Any:
    """Return the study of ``sweep_dir`` read as its journal is now, or None when it has no study yet.

    For the readers (``status``, ``collect``, ``report``): unlike ``open_study`` it creates nothing, takes no
    lock and appends nothing (``create_study(load_if_exists=True)`` appends a create-study line under the
    journal's lock before it finds the study exists), so a read-only command leaves the dir's bytes as they
    were. Anything that would write to the journal raises."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    class ReadOnlyJournal(JournalFileBackend):
        """The journal file as it is: no file made, no lock, nothing appended."""

        def __init__(self, file_path: str) -> None:  # the base creates a missing file
            self._file_path = file_path
            self._log_number_offset: dict[int, int] = {0: 0}

        def append_logs(self, logs: list[dict[str, Any]]) -> None:
            raise RuntimeError(f"{self._file_path} is opened read-only (tune/study.py read_study)")

    path = journal_path(sweep_dir)
    if not path.is_file():
        return None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = JournalStorage(ReadOnlyJournal(str(path)))
    try:  # no sampler or pruner state: nothing is asked or pruned through a study read here
        return optuna.load_study(study_name=STUDY_NAME, storage=storage, sampler=optuna.samplers.RandomSampler(),
                                 pruner=optuna.pruners.NopPruner())
    except KeyError:  # a journal with no study "tune" in it (yet)
        return None

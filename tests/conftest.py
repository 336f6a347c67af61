"""Shared fixtures. `slurm_cluster` talks to a real SLURM (scripts/local-slurm.sh start)."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from hpc_runner.scheduler.memory.executor import MemoryCluster

# --import-mode=importlib puts no test folder on sys.path; the helpers shared by every folder live here
sys.path.insert(0, str(Path(__file__).resolve().parent))
from warm_python import WARM

# Job states after which a job never runs again (REQUEUED is not one: the job goes back to PENDING).
FINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "OUT_OF_MEMORY",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "REVOKED",
    }
)


@dataclass(frozen=True)
class SlurmCluster:
    """A SLURM cluster that answered: the environment to reach it and polling helpers."""

    env: dict[str, str]
    max_array_size: int
    partitions: tuple[str, ...]
    default_partition: str
    config: dict[str, str] = field(repr=False)

    def run(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """Run a SLURM command against this cluster; output is captured as text."""
        return subprocess.run(args, env=self.env, capture_output=True, text=True, timeout=timeout)

    def wait_for_jobs(self, job_ids: Iterable[str | int], timeout: float = 120) -> None:
        """Poll squeue until none of `job_ids` is pending, running or completing."""
        ids = ",".join(str(j) for j in job_ids)
        deadline = time.monotonic() + timeout
        while True:
            res = self.run("squeue", "-h", "-j", ids, "-o", "%i %T")
            # squeue refuses a list made only of purged ids: those jobs are long finished.
            if res.returncode != 0 and "Invalid job id" not in res.stderr:
                raise RuntimeError(f"squeue failed: {res.stderr.strip()}")
            left = res.stdout.strip() if res.returncode == 0 else ""
            if not left:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"jobs still queued after {timeout}s:\n{left}")
            time.sleep(0.25)

    def explain(self, folder: Path, job_ids: Iterable[str | int] = ()) -> str:
        """What a failure message needs: the scheduler's view of the jobs (reason, exit code) and the
        last lines of every job log and error.txt under ``folder``, so a CI log alone says why."""
        parts = []
        ids = ",".join(dict.fromkeys(str(j).split("_")[0] for j in job_ids if str(j)[:1].isdigit()))
        if ids:
            for args in (["squeue", "-h", "-t", "all", "-j", ids, "-o", "%i %T %r"],
                         ["sacct", "-X", "-P", "-j", ids, "-o", "JobID,State,ExitCode,Reason,Elapsed"]):
                res = self.run(*args)
                parts.append(f"$ {' '.join(args)}\n{(res.stdout + res.stderr).strip()}")
        logs = sorted(p for p in Path(folder).rglob("*") if p.is_file() and (p.suffix in (".err", ".out")
                                                                              or p.name == "error.txt"))
        for log in logs[:12]:
            tail = log.read_text(errors="replace").strip().splitlines()[-15:]
            if tail:
                parts.append(f"== {log}\n" + "\n".join(tail))
        return "\n".join(parts)[-8000:]

    def sacct_states(self, job_ids: Iterable[str | int], timeout: float = 60) -> dict[str, str]:
        """Poll sacct until every record of `job_ids` has a final state; return {record id: state}.

        sacct lags the controller by several seconds and may list only some tasks of an array at
        first, so the records the controller still knows (squeue -t all, kept MinJobAge seconds)
        must all appear. States are the first word ("CANCELLED by 0" -> "CANCELLED").
        """
        ids = ",".join(str(j) for j in job_ids)
        deadline = time.monotonic() + timeout
        while True:
            known = self.run("squeue", "-h", "-t", "all", "-j", ids, "-o", "%i")
            expected = set(known.stdout.split()) if known.returncode == 0 else set()
            res = self.run("sacct", "-X", "-n", "-P", "-j", ids, "-o", "JobID,State")
            states = {}
            for line in res.stdout.splitlines():
                if "|" in line:
                    job, state = line.split("|", 1)
                    states[job] = state.split()[0] if state.strip() else ""
            pending = {j for j, s in states.items() if s not in FINAL_STATES or "[" in j}
            pending |= expected - states.keys()
            if res.returncode == 0 and states and not pending:
                return states
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"sacct has no final state after {timeout}s for {sorted(pending) or ids}: "
                    f"{states} {res.stderr.strip()}"
                )
            time.sleep(0.5)


def _slurm_env() -> dict[str, str]:
    """The ambient environment, with SLURM_CONF from the local cluster's env.sh if there is one."""
    env = dict(os.environ)
    env_sh = Path(os.environ.get("LOCAL_SLURM_DIR", "/tmp/hpcr-slurm")) / "env.sh"
    if env_sh.is_file():
        m = re.search(r"^export SLURM_CONF=(.+)$", env_sh.read_text(), re.M)
        if m:
            env["SLURM_CONF"] = shlex.split(m.group(1))[0]
    return env


def _probe(env: dict[str, str]) -> SlurmCluster:
    """Ask the controller for its config and partitions; raise RuntimeError if it does not answer."""

    def run(*args: str) -> str:
        try:
            res = subprocess.run(args, env=env, capture_output=True, text=True, timeout=20)
        except FileNotFoundError:
            raise RuntimeError(f"{args[0]} is not installed") from None
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"{' '.join(args)} did not answer in 20 s") from None
        if res.returncode != 0:
            first = ((res.stderr or res.stdout).strip().splitlines() or ["no output"])[0]
            raise RuntimeError(f"{' '.join(args)} exited {res.returncode}: {first}")
        return res.stdout + res.stderr

    where = f"SLURM_CONF={env.get('SLURM_CONF', '(unset)')}"
    # Clients retry a missing config file for 60 s and a dead controller for 9 s; fail fast.
    if "SLURM_CONF" in env and not Path(env["SLURM_CONF"]).is_file():
        raise RuntimeError(f"{where} does not exist")
    try:
        run("scontrol", "ping")
        parts = run("sinfo", "-h", "-o", "%P %a %T").split("\n")
        # sbatch --test-only goes through the controller's submit path without queueing a job.
        run("sbatch", "--test-only", "-o", "/dev/null", "--wrap", "true")
        config = dict(
            (k.strip(), v.strip())
            for k, _, v in (line.partition("=") for line in run("scontrol", "show", "config").splitlines())
            if v
        )
    except RuntimeError as e:
        raise RuntimeError(f"{e} ({where})") from None
    rows = [p.split() for p in parts if p.strip()]
    names = [r[0] for r in rows]
    # A trailing * (not responding), drained or down node cannot run the tests' jobs.
    if not any(r[1:] and r[-1] in ("idle", "mixed", "allocated", "completing") for r in rows):
        raise RuntimeError(f"no usable node: sinfo says {parts} ({where})")
    default = next((n.rstrip("*") for n in names if n.endswith("*")), names[0].rstrip("*"))
    return SlurmCluster(
        env=env,
        max_array_size=int(config["MaxArraySize"]),
        partitions=tuple(dict.fromkeys(n.rstrip("*") for n in names)),
        default_partition=default,
        config=config,
    )


def uses_the_cluster(item: pytest.Item) -> bool:
    """Whether a test uses the local SLURM: it is marked ``slurm`` or asks for ``slurm_cluster`` (directly or
    through another fixture, such as ``qos_limit``). Where the test file lives does not matter."""
    return item.get_closest_marker("slurm") is not None or "slurm_cluster" in item.fixturenames


# Under xdist the controller schedules but never collects: the workers know the markers and fixtures, so each
# writes the cluster tests' node ids to a file the controller names (workerinput) and reads before scheduling.
_IDS_KEY = "hpcr_cluster_ids"


def pytest_configure(config: pytest.Config) -> None:
    """On the xdist controller: a file for the workers to list the cluster tests in."""
    if not hasattr(config, "workerinput") and config.getoption("dist", "no") != "no":
        fd, name = tempfile.mkstemp(prefix="hpcr-cluster-tests-", suffix=".txt")
        os.close(fd)
        config.stash[_IDS_FILE] = Path(name)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the controller's list of cluster tests."""
    if _IDS_FILE in config.stash:
        config.stash[_IDS_FILE].unlink(missing_ok=True)


_IDS_FILE = pytest.StashKey[Path]()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """Tell each xdist worker where the controller reads the cluster tests' ids."""
    path = node.config.stash.get(_IDS_FILE, None)
    if path is not None:
        node.workerinput[_IDS_KEY] = str(path)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the tests that use the cluster first (the long pole under `-n 2`); on an xdist worker, list them
    for the controller's scheduler."""
    cluster = [i for i in items if uses_the_cluster(i)]
    items[:] = cluster + [i for i in items if not uses_the_cluster(i)]
    target = getattr(config, "workerinput", {}).get(_IDS_KEY)
    if target:
        part = Path(f"{target}.{config.workerinput.get('workerid', 'w')}")
        part.write_text("".join(f"{i.nodeid}\n" for i in cluster))
        os.replace(part, target)  # both workers collect the same tests: the last complete list wins


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under pytest-xdist (`-n 2`): every test that uses the local SLURM goes to one worker, one at a time
    (there is one cluster; some tests take its node down or count the user's queue), while the other worker
    runs the rest, one test file at a time. Most SLURM tests spend their time waiting."""
    if config.getvalue("dist") == "each":
        return None
    from xdist.scheduler import LoadScopeScheduling

    ids_file = config.stash.get(_IDS_FILE, None)

    class OneClusterScheduling(LoadScopeScheduling):
        cluster_ids: set[str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.cluster_ids is None:  # read once, after the workers' collections (they come first)
                text = ids_file.read_text() if ids_file is not None and ids_file.is_file() else ""
                self.cluster_ids = set(text.splitlines())
            return "local SLURM" if nodeid in self.cluster_ids else nodeid.split("::", 1)[0]

    return OneClusterScheduling(config, log)


@pytest.fixture(autouse=True)
def _no_logging_handler_left_on_a_closed_stream() -> Iterator[None]:
    """MONAI's and ignite's loggers keep the StreamHandler they made at their first use, bound to sys.stdout as
    it was then: in an in-process test that is pytest's capture (or a run's log tee over it), closed when the
    test ends, so a later test's log line would print "Logging error ... I/O operation on closed file". After
    each test such a handler writes to the real stdout again, as it would in the next process."""
    yield
    loggers = [logging.getLogger(), *(x for x in logging.Logger.manager.loggerDict.values()
                                      if isinstance(x, logging.Logger))]
    for logger in loggers:
        for handler in logger.handlers:
            if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler) \
                    and getattr(handler.stream, "closed", False):
                with handler.lock or contextlib.nullcontext():
                    handler.stream = sys.__stdout__  # not setStream: it would flush the closed stream


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """A SLURM cluster that answers; SLURM_CONF is also exported to os.environ for the session.

    Skips when none answers, or fails when the env var CI is "true" (CI must start one).
    Code under test calls sbatch/submitit with the ambient environment, hence the export.
    """
    env = _slurm_env()
    try:
        cluster = _probe(env)
    except RuntimeError as e:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but no SLURM cluster answers: {e}", pytrace=False)
        pytest.skip(f"no SLURM cluster answers (start one with scripts/local-slurm.sh start): {e}")
    with pytest.MonkeyPatch.context() as mp:
        if "SLURM_CONF" in env:
            mp.setenv("SLURM_CONF", env["SLURM_CONF"])
        yield cluster


@pytest.fixture(autouse=True)
def _slurm_marker_needs_cluster(request: pytest.FixtureRequest) -> None:
    """Tests marked `slurm` get the cluster (or its skip) without naming the fixture."""
    if request.node.get_closest_marker("slurm") is not None:
        request.getfixturevalue("slurm_cluster")


@dataclass
class Cli:
    """Runs ``python -m hpc_runner`` as a user would: a new process (tests/warm_python.py's) with its own cwd and
    environment."""

    env: dict[str, str]

    def __call__(
        self, *args: str, cwd: Path, env: dict | None = None, timeout: float = 300
    ) -> subprocess.CompletedProcess:
        """Run the CLI and return the completed process (stdout/stderr captured as text)."""
        return WARM.run("hpc_runner", list(args), cwd=cwd, env={**self.env, **(env or {})}, timeout=timeout)


@pytest.fixture
def cli() -> Cli:
    """The hpc-runner CLI, without HPCR__/SLURM_ variables from the calling shell, one thread per op."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HPCR__", "SLURM_JOB", "SLURM_ARRAY"))}
    env["OMP_NUM_THREADS"] = "1"
    return Cli(env)


@pytest.fixture(scope="session", autouse=True)
def _private_cache_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Caches (the pre-flight's target verdicts) go to a folder of this test session, never the user's
    ~/.cache; the CLI processes a worker starts share it, so only its first pre-flight imports MONAI."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
        yield


@pytest.fixture
def make_cluster() -> Iterator[Callable[..., Any]]:
    """``make_cluster(**options)``: an in-memory cluster (scheduler/memory/executor.py) that ``executor: memory``
    profiles reach, for the tests of our logic in tests/sweep and tests/pipeline."""
    with contextlib.ExitStack() as stack:
        def make(**options: Any) -> MemoryCluster:
            return stack.enter_context(MemoryCluster(**options).installed())

        yield make


@pytest.fixture
def importing_heap() -> Iterator[tuple[int, ...]]:
    """The heap as an entry point leaves it before its command runs (hpc_runner/heap.py): the young threshold raised
    for the imports; yields CPython's own thresholds, which a command that waits puts back at its first poll. Put
    back as they were after the test, whatever the command did."""
    import gc

    from hpc_runner import heap

    assert heap._saved is None
    own = gc.get_threshold()
    heap.collect_less_while_importing()
    assert gc.get_threshold() != own and heap._saved == own
    try:
        yield own
    finally:
        heap._saved = None
        gc.set_threshold(*own)
        gc.unfreeze()


@pytest.fixture(scope="session")
def charliecloud_image() -> Path:
    """A real Charliecloud image (a folder) with Debian's Python, this venv's torch and MONAI, and hpc-runner copied
    fresh (scripts/build-test-image.sh: ~20 s the first time, ~1 s after); one per checkout, built under a lock."""
    import fcntl
    import getpass
    import hashlib
    import shutil

    root = Path(__file__).resolve().parents[1]
    if not (shutil.which("ch-run") and shutil.which("mmdebstrap")) and not os.environ.get("CI"):
        pytest.skip("Charliecloud or mmdebstrap is not installed (apt-get install charliecloud-runtime mmdebstrap; "
                    "CI installs them)")
    folder = Path("/var/tmp/hpcr-test-images")
    folder.mkdir(parents=True, exist_ok=True)
    image = folder / hashlib.sha256(str(root).encode()).hexdigest()[:12]
    venv = Path(sys.prefix)
    with open(folder / f"{image.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the other test worker builds or refreshes it at the same moment
        proc = subprocess.run(["bash", str(root / "scripts" / "build-test-image.sh"), str(image), str(venv)],
                              capture_output=True, text=True, timeout=600,
                              env={**os.environ, "USER": os.environ.get("USER") or getpass.getuser()})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return image

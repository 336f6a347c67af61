"""`--safe`'s boundary: the run re-executed inside a bubblewrap sandbox the kernel enforces.

The allow-list (config/safe_mode.py) is a fast first check; this is the promise. `run --safe` starts
``python -m hpc_runner run ... --safe`` again under ``bwrap``, where:

- the filesystem is a minimal root (:func:`system_binds`): read-only, ``/usr`` and the top-level ``/bin``,
  ``/sbin``, ``/lib*`` (links stay links), a fixed list of ``/etc`` files (``ETC_NAMES``: the loader's cache,
  passwd/group, hosts, certificates, fonts...), ``/dev`` (GPUs' device files added), ``/proc``; then Python's
  prefixes and ``sys.path``, hpc-runner, the current folder, the bundle and what the user names
  (``--readable``, the files and paths on the command line, hpc-runner's config file); writable only the run dir,
  the cache dir named on the command line (``--cache_dir``) and the folders named with ``--writable``. Nothing
  else of the host is there (``/etc/shadow``, ``/etc/munge``, ``/opt``, ``/srv``, other projects);
- ``$HOME`` (and the account's home from the password database), ``/tmp``, ``/var/tmp`` and ``/run`` are empty
  private tmpfs (what the run needs under them, such as a venv in ``$HOME``, is bound back over them);
- every capability is dropped (``--cap-drop ALL``): run as root, the code inside has none (CapEff 0);
- there is no network (a new network namespace: loopback only), no other process (a new PID
  namespace), no terminal to inject into (a new session), and the sandbox dies with its parent;
- the environment is rebuilt from a short list (PATH, locale, HPCR_*, the job's scheduler variables, the
  GPU and thread settings); HOME is the empty tmpfs.

The decisions (which paths, which variables, the argv) are plain functions; :func:`run_sandboxed` only
starts bwrap, relays stop signals to the run inside, and returns its exit code. Without bubblewrap, or
where it cannot make namespaces, ``--safe`` is refused (exit 2): there is no weaker mode.

Grants come from the user's command line only (:func:`checked_grant` refuses ``/``, ``$HOME``, a parent of
either and a path through a link), never from the run dir or the bundle's config: :class:`Grants`.
"""

from __future__ import annotations

import contextlib
import contextvars
import glob
import os
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from hpc_runner.config.ids import iter_ids
from hpc_runner.config.sandbox_marks import INSIDE_ENV, INSIDE_FILE
from hpc_runner.errors import UserError
from hpc_runner.records.command_output import run_command
from hpc_runner.scheduler.job_env import job_variables

FRESH_ENV = "HPCR_SANDBOX_FRESH"  # "1": the parent made the run dir for this run (removed again on bad input)
BWRAP_ENV = "HPCR_BWRAP"  # the bwrap program to use (default: bwrap on PATH)

# variables passed by name; HPCR_* (but the user config's path, rebound) and the job's variables by prefix
PASS_NAMES = (
    "PATH", "LANG", "LANGUAGE", "TZ", "TERM", "COLUMNS", "LINES", "NO_COLOR",
    "PYTHONUNBUFFERED", "PYTHONHASHSEED", "PYTHONIOENCODING", "PYTHONDONTWRITEBYTECODE", "PYTHONFAULTHANDLER",
    "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "ROCR_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES", "CUBLAS_WORKSPACE_CONFIG",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS",
)
PASS_PREFIXES = ("LC_", "HPCR_")
FORWARDED = (signal.SIGTERM, signal.SIGUSR2, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1)


@dataclass(frozen=True)
class Needs:
    """What a run needs of the machine: the folders it writes and reads, its working folder and home."""

    run_dir: str
    cwd: str
    home: str
    writable: tuple[str, ...] = ()
    readable: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()
    protected: tuple[str, ...] = ()  # inside a writable folder, bound read-only over it (the --safe mark, job files)
    devices: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


def hidden_folders(environ: Mapping[str, str], uid: int | None = None) -> list[str]:
    """Return the folders replaced by an empty tmpfs: $HOME, the account's home, the temp folders, /run/user/UID."""
    uid = os.getuid() if uid is None else uid
    found = [environ.get("HOME") or ""]
    try:
        import pwd

        found.append(pwd.getpwuid(uid).pw_dir)
    except (KeyError, ImportError):
        pass
    found += ["/tmp", "/var/tmp", "/run"]  # /run: daemons' sockets (munge, dbus, the agents of /run/user/UID)
    if os.path.isdir("/var/run") and not os.path.islink("/var/run"):  # usually a link to /run
        found.append("/var/run")
    out: list[str] = []
    for path in found:
        if not path or not os.path.isabs(path):
            continue
        path = os.path.normpath(path)
        if path != "/" and path not in out:
            out.append(path)
    return out


def python_paths() -> list[str]:
    """Return what this Python needs to start: its prefixes (``sys.prefix``, ``sys.base_prefix``,
    ``sys.exec_prefix``: exactly those, even inside ``$HOME``), the executable's folder and every folder on
    ``sys.path`` (site-packages, an editable install's source folder); what is not a folder here is left out."""
    paths = [sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.abspath(sys.executable)),
             os.path.dirname(os.path.realpath(sys.executable))]
    paths += [p for p in sys.path if p and os.path.isabs(p)]
    return [p for p in dict.fromkeys(os.path.normpath(p) for p in paths) if os.path.isdir(p)]


# the minimal root: what a Python program needs of the system, read-only (links such as /bin -> usr/bin stay links)
SYSTEM_TOPS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# of /etc, only these (never shadow, munge, ssh, ssl/private, sudoers...): the loader, names, time, certificates,
# fonts, MIME types; alternatives because Debian's /usr/bin links point there
ETC_NAMES = (
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "nsswitch.conf", "passwd", "group", "hosts", "host.conf",
    "localtime", "timezone", "alternatives", "ssl/certs", "ssl/openssl.cnf", "pki/tls/certs", "pki/ca-trust/extracted",
    "ca-certificates", "ca-certificates.conf", "fonts", "mime.types", "matplotlibrc",
)
MOUNTED = ("/dev", "/proc")  # made by bwrap itself (--dev: a minimal /dev; --proc: this PID namespace's)


def system_binds(root: str = "/") -> list[tuple[str, str, str]]:
    """Return (bwrap option, source, destination) of the minimal root: ``SYSTEM_TOPS`` and the ``ETC_NAMES`` that
    exist here (a link is made a link: ``--symlink TARGET PATH``; a folder or file is bound read-only)."""
    found: list[tuple[str, str, str]] = []
    for path in (*SYSTEM_TOPS, *(f"/etc/{name}" for name in ETC_NAMES)):
        here = os.path.join(root, path.lstrip("/"))
        if os.path.islink(here):
            found.append(("--symlink", os.readlink(here), path))
        elif os.path.exists(here):
            found.append(("--ro-bind", here, path))
    return found


def visible_paths(needs: Needs) -> list[str]:
    """Return what the run inside sees of the host's files: the minimal root, /dev, /proc and every path
    :func:`bind_plan` binds (a path under none of them is not there inside)."""
    system = [dest for option, _, dest in system_binds() if option != "--symlink"]
    return [*system, *MOUNTED, *(p for option, p in bind_plan(needs) if option != "--tmpfs")]


def sandbox_env(environ: Mapping[str, str], *, home: str, user_config: str | None = None) -> dict[str, str]:
    """Return the environment of the run inside: the passed names and prefixes, the job's variables, HOME."""
    env = {k: v for k, v in environ.items() if k in PASS_NAMES or k.startswith(PASS_PREFIXES)}
    env.update(job_variables(environ))
    env.pop("HPCR_CONFIG", None)
    if user_config:
        env["HPCR_CONFIG"] = user_config
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update({"HOME": home, "TMPDIR": "/tmp", INSIDE_ENV: "1"})
    return env


def under(path: str, folders: Iterable[str]) -> bool:
    """Return whether ``path`` is one of ``folders`` or inside one."""
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def _depth(path: str) -> int:
    return len([p for p in path.split("/") if p])


def bind_plan(needs: Needs) -> list[tuple[str, str]]:
    """Return (bwrap option, path) for every tmpfs and every path bound over the minimal root, shallowest first.

    A deeper mount lands on top of a shallower one, so the order alone says what wins: a hidden folder
    inside a folder bound (``$HOME`` inside the current folder) is hidden again, and what the run needs
    inside a hidden folder (the venv in ``$HOME``) is bound after it. A readable path that is a hidden
    folder is not bound (the tmpfs wins: running from ``$HOME`` does not show ``$HOME``), nor ``/`` (that would be
    the whole host again), nor one the minimal root shows already (``/usr/lib/python3``), nor one inside a folder
    already bound with nothing hidden or writable between. Writable paths are always bound; at the same path, a
    bind comes after the tmpfs. Protected paths (inside a writable folder) are bound read-only last, over it.
    Paths are absolute, and real (a link is bound at its real place too).
    """
    hidden = [os.path.normpath(h) for h in needs.hidden]
    writable = sorted({p for path in needs.writable for p in (os.path.abspath(path), os.path.realpath(path))})
    readable = sorted({p for path in needs.readable for p in (os.path.abspath(path), os.path.realpath(path))})
    readable = [p for p in readable if p != "/" and p not in hidden and not under(p, (*SYSTEM_TOPS, *MOUNTED))]
    marks = hidden + writable

    def covered(p: str) -> bool:  # inside another readable folder, nothing hidden or writable in between
        return any(q != p and under(p, [q]) and not any(under(m, [q]) and m != q and under(p, [m]) for m in marks)
                   for q in readable)

    plan = [("--tmpfs", h) for h in hidden]
    plan += [("--ro-bind-try", p) for p in readable if p not in writable and not covered(p)]
    plan += [("--bind", p) for p in writable]
    plan += [("--ro-bind", q) for q in sorted({q for p in needs.protected
                                               for q in (os.path.abspath(p), os.path.realpath(p))})]
    order = {"--tmpfs": 0, "--ro-bind-try": 1, "--bind": 2, "--ro-bind": 3}
    return sorted(plan, key=lambda item: (_depth(item[1]), order[item[0]], item[1]))


def bwrap_argv(bwrap: str, needs: Needs, command: Sequence[str]) -> list[str]:
    """Return the exact bwrap command line that runs ``command`` inside the sandbox ``needs`` describes: the
    minimal root (:func:`system_binds`), /dev (with ``needs.devices``), /proc, :func:`bind_plan`'s mounts, then
    the root made read-only, no capability, no network, no other process, a clean environment."""
    argv = [bwrap]
    for option, source, dest in system_binds():
        argv += [option, source, dest]
    argv += ["--dev", "/dev"]
    for device in needs.devices:
        argv += ["--dev-bind-try", device, device]
    argv += ["--proc", "/proc"]
    plan = bind_plan(needs)
    for option, path in plan:
        argv += [option, path] if option == "--tmpfs" else [option, os.path.realpath(path), path]
    if ("--tmpfs", "/run") in plan:  # what tells the run it is inside: a folder only bwrap makes, on its own /run
        argv += ["--dir", INSIDE_FILE]
    argv += ["--remount-ro", "/",  # the root bwrap made (the folders it holds are mount points): nothing new there
             "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
             "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--clearenv"]
    for key, value in sorted(needs.env.items()):
        argv += ["--setenv", key, value]
    argv += ["--chdir", needs.cwd, "--", *command]
    return argv


def _homes(environ: Mapping[str, str]) -> list[str]:
    """$HOME and the account's home from the password database."""
    homes = [environ.get("HOME") or ""]
    try:
        import pwd

        homes.append(pwd.getpwuid(os.getuid()).pw_dir)
    except (KeyError, ImportError):
        pass
    homes = [os.path.normpath(h) for h in homes if h and os.path.isabs(h)]
    return list(dict.fromkeys([*homes, *(os.path.realpath(h) for h in homes)]))  # a home reached by a link too


def checked_grant(path: str, option: str, environ: Mapping[str, str] | None = None) -> str:
    """Return the absolute path of a folder the user grants the sandbox (``--writable``, ``--readable``,
    ``--output_dir``, ``--cache_dir``, a profile's bind); bad input (exit 2) for ``/``, ``$HOME``, a parent of
    either, and a path through a symbolic link (name its real path instead: what is granted is what is named)."""
    environ = os.environ if environ is None else environ
    if not isinstance(path, str) or not path or any(ord(c) < 32 or ord(c) == 127 for c in path):
        raise UserError(f"{option} {path!r} is not a folder's path", where=option,
                        expected=f"{option} DIR naming one folder (no control characters)")
    full = os.path.abspath(os.path.expanduser(path))
    homes = _homes(environ)
    for granted in dict.fromkeys([full, os.path.realpath(full)]):
        if granted == "/" or any(under(h, [granted]) for h in homes):
            what = "the whole filesystem" if granted == "/" else (
                "your home folder" if granted in homes else f"a folder that holds your home folder {homes[0]}")
            raise UserError(
                f"{option} {path} would give the --safe sandbox {what} (SSH keys, shell profiles, every file of "
                "yours), which is what the sandbox hides; nothing was run or queued", where=option,
                expected=f"{option} naming the one folder the run needs (a dataset or cache folder), not /, "
                "$HOME or a folder above them")
    real = os.path.realpath(full)
    if real != full:
        raise UserError(
            f"{option} {path} goes through a symbolic link (its real path is {real}); a link can be changed to point "
            "elsewhere after it is checked, so the sandbox grants only real paths; nothing was run or queued",
            where=option, expected=f"{option} {real}")
    return full


@dataclass(frozen=True)
class Grants:
    """What the user's command line lets a --safe run write and read besides its run dir (never a record's)."""

    writable: tuple[str, ...] = ()
    readable: tuple[str, ...] = ()

    def to_record(self) -> dict[str, list[str]]:
        """Return the grants as a job's arguments carry them."""
        return {"writable": list(self.writable), "readable": list(self.readable)}

    @classmethod
    def from_record(cls, found: object, where: str = "the job's arguments") -> Grants:
        """Return the grants a job was submitted with (checked again, as on the command line)."""
        if found is None:
            return cls()
        if not isinstance(found, dict) or set(found) - {"writable", "readable"}:
            raise UserError(f"the --safe grants {found!r:.200} are not what hpc-runner submits", where=where,
                            expected="{writable: [DIR], readable: [DIR]}")
        lists = {}
        for key in ("writable", "readable"):
            value = found.get(key) or []
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise UserError(f"the --safe grants' {key} is {value!r:.200}", where=where,
                                expected="a list of absolute folders")
            lists[key] = tuple(checked_grant(v, f"--{key}") for v in value)
        return cls(**lists)


UNVERIFIED = "unverified"  # in a record's grants: the file was received, so they were dropped when it was read


def record_owned(file: str | os.PathLike) -> str | None:
    """Return None when the record ``file`` may grant (it and its folder are this account's own, no link, not
    writable by group or others: nobody else wrote what it says), else the reason in a few words."""
    path = os.path.abspath(file)
    for what, here in (("the file", path), ("its folder", os.path.dirname(path))):
        try:
            st = os.lstat(here)
        except OSError as exc:
            return f"{what} {here} cannot be read ({exc.strerror})"
        if stat.S_ISLNK(st.st_mode):
            return f"{what} {here} is a symbolic link"
        if st.st_uid != os.geteuid():
            return f"{what} {here} belongs to uid {st.st_uid}, not to you (uid {os.geteuid()})"
        if st.st_mode & 0o022:
            return f"{what} {here} is writable by its group or by others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def received_grants(found: object, file: str | os.PathLike) -> object:
    """Return a record's recorded grants as this account may honour them: as written when the record is its own
    (:func:`record_owned`), else none, with the reason under ``UNVERIFIED`` (so that the record, saved again by this
    account, still grants nothing: a received record's grants are never laundered by a rewrite)."""
    if not isinstance(found, dict) or UNVERIFIED in found or not (found.get("writable") or found.get("readable")):
        return found
    why = record_owned(file)
    return found if why is None else {"writable": [], "readable": [], UNVERIFIED: why}


_GIVEN: contextvars.ContextVar[Grants | None] = contextvars.ContextVar("hpcr_sandbox_grants", default=None)


@contextlib.contextmanager
def granted_on_command_line(grants: Grants | None) -> Iterator[None]:
    """While the block runs, the jobs a command submits again (``resume --writable/--readable``) get ``grants``
    instead of what their records recorded (None: the records' own, when they may grant)."""
    token = _GIVEN.set(grants)
    try:
        yield
    finally:
        _GIVEN.reset(token)


def recorded_grants(found: object, where: str) -> Grants:
    """Return the grants a job submitted again gets: the command line's (``granted_on_command_line``), else the
    record's own (``found``, read through :func:`received_grants`); bad input (exit 2) when the record was received
    (not this account's own) and granted something: it grants nothing, the command line must say it again."""
    given = _GIVEN.get()
    if given is not None:
        return given
    if isinstance(found, dict) and UNVERIFIED in found:
        raise UserError(
            f"{where} records --safe grants, and a record this account did not write alone grants nothing "
            f"({found[UNVERIFIED]}); its jobs were not submitted", where=where,
            expected="the folders its runs need, named again on the command line: hpc-runner resume DIR "
            "--readable DIR --writable DIR (only the ones you mean to grant)")
    return Grants.from_record(found, where)


def ungranted_paths(config: object, granted: Iterable[str], hidden: Iterable[str]) -> list[tuple[str, str]]:
    """Return (id, path) for each existing absolute path among the config's values that the sandbox hides (under a
    hidden folder) and that nothing granted shows: the run would not find it inside. (A path that does not exist
    yet is the run's to make; inside, it lands in the hidden tmpfs and is gone with it.)"""
    granted, hidden = [os.path.normpath(g) for g in granted], [os.path.normpath(h) for h in hidden]
    found = []
    for id_path, value in iter_ids(config):
        if not isinstance(value, str) or not value.startswith("/") or len(value) > 4096 or "\n" in value:
            continue
        path = os.path.normpath(value)
        if path != "/" and under(path, hidden) and not under(path, granted) and os.path.lexists(path):
            found.append((str(id_path), path))
    return found


def refuse_ungranted(config: object, granted: Iterable[str], hidden: Iterable[str], where: str) -> None:
    """Bad input (exit 2) naming the first config id whose path the sandbox would hide, and the --readable to add."""
    missing = ungranted_paths(config, granted, hidden)
    if missing:
        id_path, path = missing[0]
        folder = path if os.path.isdir(path) else os.path.dirname(path)
        raise UserError(
            f"id '{id_path}' names {path}, which the --safe sandbox hides (it shows only what the command line "
            f"grants){f', and {len(missing) - 1} more such path(s)' if len(missing) > 1 else ''}; nothing was run",
            where=where, id_path=id_path,
            expected=f"--readable {folder} (or --writable {folder} if the run writes there) on the command line, "
            "if the run may read it")


def refuse_hidden(config: object, needs: Needs, where: str) -> None:
    """Bad input (exit 2) naming the first config id whose existing absolute path the sandbox of ``needs`` does not
    show (anything outside :func:`visible_paths`), and the ``--readable`` to add. Only paths written in the config
    (or given as overrides) can be known here; a path a ``$`` expression or a ``@`` reference builds at run time
    cannot: inside, it is simply not there."""
    refuse_ungranted(config, visible_paths(needs), ["/"], where)


def gpu_devices() -> list[str]:
    """Return the GPU device files of this machine, bound into the sandbox's /dev: ``/dev/nvidia*`` (the devices,
    ``nvidiactl``, ``nvidia-uvm``, ``nvidia-caps``) and ``/dev/dri`` (none on a CPU machine)."""
    return sorted(glob.glob("/dev/nvidia*")) + (["/dev/dri"] if os.path.isdir("/dev/dri") else [])


def find_bwrap(environ: Mapping[str, str] | None = None) -> str:
    """Return the bwrap program after proving it makes the namespaces; raise UserError (exit 2) otherwise."""
    environ = os.environ if environ is None else environ
    name = environ.get(BWRAP_ENV) or "bwrap"
    program = shutil.which(name, path=environ.get("PATH"))
    expected = ("bubblewrap installed and allowed to make user, network and PID namespaces (Debian/Ubuntu: "
                "apt-get install bubblewrap; kernel.unprivileged_userns_clone=1), or run without --safe "
                "if you trust the bundle")
    if program is None:
        raise UserError(
            f"--safe runs the bundle inside a bubblewrap sandbox, and no {name!r} program is on PATH, so nothing "
            "was run (--safe has no weaker mode: Apptainer, Landlock and Charliecloud are not implemented yet)",
            expected=expected)
    probe = [program, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-net", "--unshare-pid",
             "--die-with-parent", "--new-session", "--", "/bin/sh", "-c", ":"]
    try:
        done = run_command(probe, timeout=30, env={"PATH": "/usr/bin:/bin"})
    except (OSError, subprocess.TimeoutExpired) as exc:
        why = str(exc)
    else:
        if done.returncode == 0:
            return program
        why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
    raise UserError(
        f"--safe runs the bundle inside a bubblewrap sandbox, and {program} cannot make one here ({why[:300]}), "
        "so nothing was run (--safe has no weaker mode)", expected=expected)


def _proc_text(path: str) -> str:
    """A small kernel file of /proc, decoded with errors="replace" (a process's name is any bytes)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        return os.read(fd, 1 << 16).decode("utf-8", errors="replace")
    finally:
        os.close(fd)


def sandboxed_pid(bwrap_pid: int) -> int | None:
    """Return the host PID of the command bwrap started (bwrap, its PID-namespace init, then the command)."""
    frontier = [bwrap_pid]
    for _ in range(4):
        children: list[int] = []
        for pid in frontier:
            try:
                children += [int(c) for c in _proc_text(f"/proc/{pid}/task/{pid}/children").split()]
            except (OSError, ValueError):
                continue
        for pid in children:
            try:
                if _proc_text(f"/proc/{pid}/comm").strip() != "bwrap":
                    return pid
            except OSError:
                continue
        frontier = children
    return None


def run_sandboxed(argv: Sequence[str], stop: Callable[[], str | None] | None = None, *,
                  env: Mapping[str, str] | None = None,
                  target: Callable[[int], int | None] = sandboxed_pid) -> int:
    """Run a bwrap command line; relay stop signals to the run inside; return its exit code.

    bwrap runs in its own process group, so a Ctrl-C at the terminal reaches only this process, which
    passes it on (as SIGTERM and SIGUSR2 from SLURM) to the run inside, which checkpoints and stops. A
    signal that comes before bwrap has started the run is passed on as soon as the run is there.
    With ``stop`` (a job, whose own stop handlers already turn signals into requests, in any thread) no
    handler is installed: a pending request is passed on as SIGUSR2, once. ``env``: the starter's own
    environment (default: PATH alone); ``target``: which process gets the signals (a container runtime that
    relays them itself, or execs the command: the started process).
    """
    relay = sys.stdout.fileno() if _has_fileno(sys.stdout) else subprocess.PIPE
    relay_err = sys.stderr.fileno() if _has_fileno(sys.stderr) else subprocess.PIPE
    started: list[subprocess.Popen] = []
    pending: list[int] = []

    def deliver() -> None:
        pid = target(started[0].pid) if started and pending else None
        while pid is not None:
            try:
                signum = pending.pop(0)  # a handler may run between two lines of this loop: pop, never test
            except IndexError:
                return
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def forward(signum: int, _frame: object) -> None:
        pending.append(signum)
        deliver()

    previous = {}
    told = False
    # before bwrap starts: a stop signal from now on is the run's, never this process's end
    for s in FORWARDED if stop is None else ():
        try:
            previous[s] = signal.signal(s, forward)
        except ValueError:  # not the main thread: no relay
            break
    try:
        proc = subprocess.Popen(list(argv), stdout=relay, stderr=relay_err, stdin=subprocess.DEVNULL,
                                env=dict(env) if env is not None else {"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                                start_new_session=True)
        started.append(proc)
        threads = _copy_output(proc) if subprocess.PIPE in (relay, relay_err) else []
        while True:
            try:
                rc = proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                if stop is not None and not told and stop():
                    told = True
                    pending.append(signal.SIGUSR2)
                deliver()
        for t in threads:
            t.join(timeout=5)
        return rc
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _has_fileno(stream: object) -> bool:
    try:
        stream.fileno()  # type: ignore[attr-defined]
        return True
    except (AttributeError, OSError, ValueError):
        return False


def _copy_output(proc: subprocess.Popen) -> list:
    """Copy the run's output to this process's streams when they are not files (pytest's capture, a notebook);
    return the copying threads."""
    import threading

    def pump(src, dest) -> None:
        for line in iter(src.readline, b""):
            dest.write(line.decode("utf-8", "backslashreplace"))
            dest.flush()

    threads = [threading.Thread(target=pump, args=(src, dest), daemon=True)
               for src, dest in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr)) if src is not None]
    for t in threads:
        t.start()
    return threads

"""`--safe`'s boundary: the run re-executed inside a bubblewrap sandbox the kernel enforces.

The allow-list (config/safe_mode.py) is a fast first check; this is the promise. `run --safe` starts
``python -m hpc_runner run ... --safe`` again under ``bwrap``, where:

- the filesystem is the host's, read-only; only the run dir, the cache dir named on the command line
  (``--cache_dir``) and the folders named with ``--writable`` are writable;
- ``$HOME`` (and the account's home from the password database), ``/tmp``, ``/var/tmp``, ``/run`` and
  ``/var/run`` are empty private tmpfs: SSH keys, ~/.config, agents' and daemons' sockets (munge, dbus) are not
  there; what the run reads from them (the venv, the bundle, the current folder, the files named on the
  command line and with ``--readable``, hpc-runner's own config file) is bound back read-only;
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
import glob
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

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
    """Return what this Python needs to start: its prefixes, the executable and every folder on sys.path."""
    paths = [sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.abspath(sys.executable)),
             os.path.dirname(os.path.realpath(sys.executable))]
    paths += [p for p in sys.path if p and os.path.isabs(p)]
    return paths


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
    """Return (bwrap option, path) for every tmpfs and every path bound back, shallowest first.

    A deeper mount lands on top of a shallower one, so the order alone says what wins: a hidden folder
    inside a folder bound back (``$HOME`` inside the current folder) is hidden again, and what the run needs
    inside a hidden folder (the venv in ``$HOME``) is bound back after it. A readable path that is a hidden
    folder is not bound (the tmpfs wins: running from ``$HOME`` does not show ``$HOME``);
    a readable path outside every hidden folder needs no bind (the read-only root shows it), nor does one
    inside a folder already bound back with nothing hidden or writable between. Writable paths are always
    bound; at the same path, a bind comes after the tmpfs. Protected paths (inside a writable folder) are bound
    read-only last, over it. Paths are absolute, and real (a link is bound at its real place too).
    """
    hidden = [os.path.normpath(h) for h in needs.hidden]
    writable = sorted({p for path in needs.writable for p in (os.path.abspath(path), os.path.realpath(path))})
    readable = sorted({p for path in needs.readable for p in (os.path.abspath(path), os.path.realpath(path))})
    readable = [p for p in readable if under(p, hidden) and p not in hidden]
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
    """Return the exact bwrap command line that runs ``command`` inside the sandbox ``needs`` describes."""
    argv = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for device in needs.devices:
        argv += ["--dev-bind-try", device, device]
    plan = bind_plan(needs)
    for option, path in plan:
        argv += [option, path] if option == "--tmpfs" else [option, os.path.realpath(path), path]
    if ("--tmpfs", "/run") in plan:  # what tells the run it is inside: a folder only bwrap makes, on its own /run
        argv += ["--dir", INSIDE_FILE]
    argv += ["--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent",
             "--new-session", "--cap-drop", "ALL", "--clearenv"]
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
    return [os.path.normpath(h) for h in homes if h and os.path.isabs(h)]


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


def ungranted_paths(config: object, granted: Iterable[str], hidden: Iterable[str]) -> list[tuple[str, str]]:
    """Return (id, path) for each existing absolute path among the config's values that the sandbox hides (under a
    hidden folder) and that nothing granted shows: the run would not find it inside. (A path that does not exist
    yet is the run's to make; inside, it lands in the hidden tmpfs and is gone with it.)"""
    from hpc_runner.config.ids import iter_ids

    granted, hidden = [os.path.normpath(g) for g in granted], [os.path.normpath(h) for h in hidden]
    found = []
    for id_path, value in iter_ids(config):
        if not isinstance(value, str) or not value.startswith("/") or len(value) > 4096 or "\n" in value:
            continue
        path = os.path.normpath(value)
        if under(path, hidden) and not under(path, granted) and os.path.lexists(path):
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


def gpu_devices() -> list[str]:
    """Return the NVIDIA device files of this machine (bound into the sandbox; none on a CPU machine)."""
    return sorted(glob.glob("/dev/nvidia*"))


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

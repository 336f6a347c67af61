"""The --safe sandbox grants what the user names and guesses nothing (issue 44): grants come from the command line
or the job's own submission, never from a run dir or the bundle's config; inside, no capability, no daemon's
socket, no home; outside, no link the run planted is followed; "inside" is nothing the caller can set.

The tests that need bubblewrap run it for real (as root in CI: CapEff must still be 0); without bwrap they skip,
except under CI, where they fail (CI installs it)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest
import yaml

from hpc_runner.config.sandbox_marks import INSIDE_ENV, inside_sandbox
from hpc_runner.engine.sandbox import Grants, bwrap_argv, checked_grant, refuse_ungranted
from hpc_runner.engine.sandbox_job import job_grants, job_needs, job_plan
from hpc_runner.errors import UserError
from hpc_runner.records.safe_mark import write_mark

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "bundles" / "synthetic_seg"

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None and not os.environ.get("CI"),
    reason="bubblewrap is not installed (apt-get install bubblewrap; CI installs it)",
)


def _inside(tmp_path: Path, code: str, grants: Grants | None = None, home: Path | None = None) -> dict:
    """Run ``code`` (Python printing one JSON line) in the sandbox hpc-runner builds for a job of ``tmp_path/run``."""
    from hpc_runner.engine.sandbox import find_bwrap

    run_dir = tmp_path / "run"
    run_dir.mkdir(exist_ok=True)
    write_mark(run_dir)  # as the job's outside writes it before the sandbox starts (bound read-only inside)
    environ = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home or tmp_path / "home")}
    needs = job_needs(str(run_dir), environ, job_plan(str(run_dir), grants or Grants(), None), str(REPO))
    argv = bwrap_argv(find_bwrap(), needs, [sys.executable, "-c", code])
    proc = subprocess.run(argv, capture_output=True, timeout=120, env={"PATH": environ["PATH"]})
    out = proc.stdout.decode("utf-8", "replace")
    assert proc.returncode == 0, out + proc.stderr.decode("utf-8", "replace")
    return json.loads(out.strip().splitlines()[-1])


# ------------------------------------------------------------------ inside: what the run gets

@needs_bwrap
def test_the_code_inside_has_no_capability_even_when_run_as_root(tmp_path: Path) -> None:
    found = _inside(tmp_path, "import json, re; s = open('/proc/self/status').read(); "
                              "print(json.dumps({k: re.search(k + r':\\s*(\\w+)', s).group(1) "
                              "for k in ('CapEff', 'CapPrm', 'CapAmb', 'NoNewPrivs')}))")
    # none now, none by exec (no new privileges: a setuid or file-capability program gains nothing)
    assert found == {"CapEff": "0000000000000000", "CapPrm": "0000000000000000", "CapAmb": "0000000000000000",
                     "NoNewPrivs": "1"}


@needs_bwrap
def test_a_unix_socket_under_run_is_not_reachable_from_inside(tmp_path: Path) -> None:
    folder = Path("/run") / f"hpcr-test-{uuid.uuid4().hex[:8]}"
    try:
        folder.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot make a folder under /run here ({exc})")
    path = folder / "daemon.sock"
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(path))
        server.listen(1)
        code = ("import json, socket; s = socket.socket(socket.AF_UNIX)\n"
                f"try:\n    s.connect({str(path)!r}); r = 'connected'\n"
                "except OSError as e:\n    r = type(e).__name__\nprint(json.dumps({'r': r}))")
        assert _inside(tmp_path, code)["r"] in ("FileNotFoundError", "ConnectionRefusedError")
        server.setblocking(False)
        with pytest.raises(BlockingIOError):
            server.accept()
    finally:
        server.close()
        shutil.rmtree(folder, ignore_errors=True)


@needs_bwrap
def test_a_job_whose_config_names_a_key_in_home_cannot_read_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_x").write_text("SECRET-KEY-MATERIAL\n")
    key = str(home / ".ssh" / "id_x")
    # before the sandbox starts, the parent names the id and the --readable that would grant it
    with pytest.raises(UserError) as err:
        refuse_ungranted({"network": {"weights": key}}, [str(tmp_path / "run")], [str(home), "/tmp"], "config.yaml")
    assert "id 'network::weights'" in str(err.value.message) and f"--readable {home / '.ssh'}" in str(err.value)
    # and whatever gets past that (a path built at run time) finds an empty home
    code = (f"import json\ntry:\n    r = open({key!r}).read()\nexcept OSError as e:\n    r = type(e).__name__\n"
            "print(json.dumps({'r': r}))")
    assert _inside(tmp_path, code, home=home)["r"] == "FileNotFoundError"


@needs_bwrap
def test_the_run_knows_it_is_inside_only_in_the_real_sandbox(tmp_path: Path) -> None:
    code = ("import json; from hpc_runner.config.sandbox_marks import inside_sandbox; "
            "print(json.dumps(inside_sandbox()))")
    assert _inside(tmp_path, code) is True
    assert not inside_sandbox({INSIDE_ENV: "1"})  # here, outside, the variable alone says nothing


def test_hpcr_sandboxed_in_the_callers_environment_still_sandboxes(tmp_path: Path, cli) -> None:
    # with no bwrap to be found, a run that went into the sandbox is refused (exit 2): it did not skip it
    res = cli("run", "--safe", "--bundle", str(EXAMPLE), "--output_dir", str(tmp_path / "run"), cwd=tmp_path,
              env={"HPCR_BWRAP": str(tmp_path / "no-bwrap"), INSIDE_ENV: "1", "HPCR_TEST_SAFE_STATIC": "off"})
    assert res.returncode == 2 and "no weaker mode" in res.stderr, res.stdout + res.stderr
    assert not (tmp_path / "run").exists()


def test_cache_safe_without_bubblewrap_is_refused_and_runs_nothing(tmp_path: Path, cli) -> None:
    res = cli("cache", "--safe", "--bundle", str(EXAMPLE), "--cache_dir", str(tmp_path / "cache"), cwd=tmp_path,
              env={"HPCR_BWRAP": str(tmp_path / "no-bwrap")})
    assert res.returncode == 2 and "no weaker mode" in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert not (tmp_path / "cache").exists() and not (EXAMPLE / "data" / "never-made-by-this-test").exists()


def test_verify_safe_does_not_build_the_network_outside_the_sandbox(tmp_path: Path, cli) -> None:
    res = cli("verify", str(EXAMPLE), "--safe", "--net", cwd=tmp_path)
    assert res.returncode == 2 and "outside the --safe sandbox" in res.stderr, res.stdout + res.stderr


# ------------------------------------------------------------------ grants: only what the user names

@pytest.mark.parametrize("option", ["--writable", "--readable", "--output_dir", "--cache_dir"])
@pytest.mark.parametrize("which", ["root", "home", "above home", "link"])
def test_a_grant_of_root_home_a_parent_of_home_or_a_link_is_refused(
        option: str, which: str, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hpc_runner.cli import main

    home = tmp_path / "users" / "me"
    home.mkdir(parents=True)
    (tmp_path / "real").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "real")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HPCR_BWRAP", shutil.which("bwrap") or "bwrap")
    path = {"root": "/", "home": str(home), "above home": str(tmp_path / "users"),
            "link": str(tmp_path / "linked")}[which]
    args = ["run", "--safe", "--bundle", str(EXAMPLE)]
    args += [option, path] if option != "--output_dir" else []
    args += ["--output_dir", path if option == "--output_dir" else str(tmp_path / "out")]
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (without it --safe is refused before the grants are read)")
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2 and err.count("error:") == 1 and "Traceback" not in err, err
    assert option.split("_")[0] in err or option in err, err
    assert ("symbolic link" in err and str(tmp_path / "real") in err) if which == "link" else "sandbox hides" in err
    assert not (tmp_path / "out").exists() and sorted(os.listdir(home)) == []


def test_checked_grant_accepts_a_folder_of_home_and_refuses_its_parents() -> None:
    env = {"HOME": "/home/u"}
    assert checked_grant("/home/u/data", "--writable", env) == "/home/u/data"
    for bad in ("/", "/home", "/home/u", "/home/u/", "/home/u/data/../.."):
        with pytest.raises(UserError):
            checked_grant(bad, "--writable", env)


def test_a_job_decides_from_its_submission_and_a_mark_grants_nothing(tmp_path: Path) -> None:
    from hpc_runner.config.recorded import load_recorded_config

    run = tmp_path / "run"
    run.mkdir()
    (run / "run.yaml").write_text(yaml.safe_dump({"safe": False}))
    assert job_grants(None, run) is None  # submitted without --safe, nothing says otherwise: runs as submitted
    grants = job_grants({"sandbox": {"writable": [str(tmp_path / "data")], "readable": []}}, run)
    assert grants == Grants((str(tmp_path / "data"),), ())
    write_mark(run, [str(Path.home()), "/"])  # a received (or rewritten) mark naming home and the root
    with pytest.raises(UserError, match="was not submitted with --safe"):
        job_grants({}, run)  # never run outside, never granted what the mark names
    with pytest.raises(UserError):
        job_grants({"sandbox": {"writable": ["/"], "readable": []}}, run)  # the arguments are checked again
    # a re-run or resume of a marked run dir gets no folder of the mark
    (run / "config.yaml").write_text(yaml.safe_dump({"x": 1}))
    cfg, _ = load_recorded_config(run)
    assert cfg.safe and cfg.sandbox_writable == ()


# ------------------------------------------------------------------ outside: never follow what the run planted

@pytest.mark.parametrize("plant", ["link", "fifo"])
def test_a_lock_file_the_run_planted_is_never_followed_nor_waited_on(plant: str, tmp_path: Path) -> None:
    from hpc_runner.records.rundir import RECORD_LOCK, RunDir

    run = tmp_path / "run"
    run.mkdir()
    (run / "run.yaml").write_text(yaml.safe_dump({"status": "running"}))
    victim = tmp_path / "home" / ".bash_profile"
    victim.parent.mkdir()
    if plant == "link":
        (run / RECORD_LOCK).symlink_to(victim)
    else:
        os.mkfifo(run / RECORD_LOCK)
    done: list[BaseException | None] = []

    def update() -> None:
        try:
            RunDir(run).update_record(status="completed")
            done.append(None)
        except BaseException as exc:  # reported below
            done.append(exc)

    worker = threading.Thread(target=update, daemon=True)
    worker.start()
    worker.join(timeout=20)
    assert done, "updating the record hung on a planted lock file"
    assert isinstance(done[0], UserError) and str(run / RECORD_LOCK) in str(done[0]), done
    assert not victim.exists()


# ------------------------------------------------------------------ containers: no empty image, no spliced bind

@pytest.mark.parametrize("cli_image, block", [("", None), ("  ", None), (None, {"image": ""}),
                                              (None, {"image": None}), (None, {"runtime": "apptainer"})])
def test_an_empty_image_name_is_refused_not_run_on_the_host(cli_image, block) -> None:
    from hpc_runner.engine.container import container_spec

    with pytest.raises(UserError, match="names no image"):
        container_spec(cli_image, None, block, "profile x")


def test_run_container_with_an_empty_name_exits_2(tmp_path: Path, cli) -> None:
    res = cli("run", "--container", "", "--bundle", str(EXAMPLE), "--output_dir", str(tmp_path / "run"),
              cwd=tmp_path)
    assert res.returncode == 2 and "names no image" in res.stderr, res.stdout + res.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("runtime, path, ok", [
    ("charliecloud", "/data/a:b", False), ("apptainer", "/data/a,b", False), ("singularity", "/data/a:b", False),
    ("podman", "/data/a:b", False), ("charliecloud", "/data/a,b", True), ("apptainer", "/data/a b", True),
    ("podman", "/data/line\nbreak", False),
])
def test_one_function_builds_every_bind_and_refuses_what_its_runtime_cannot_say(runtime, path, ok) -> None:
    from hpc_runner.engine.container import ContainerSpec, Mounts, bind_argument, container_argv

    if not ok:
        with pytest.raises(UserError, match="cannot be bound"):
            bind_argument(runtime, path)
        with pytest.raises(UserError):
            container_argv(ContainerSpec(image="/img", runtime=runtime), Mounts(paths=(path,), cwd="/"), ["true"])
        return
    option = bind_argument(runtime, path)
    assert option.endswith(f"={path}:{path}")
    assert option in container_argv(ContainerSpec(image="/img", runtime=runtime), Mounts(paths=(path,), cwd="/"),
                                    ["true"])


@pytest.mark.parametrize("bind", ["/", "HOME", "HOME/..", "/a:/b:/c", "relative", "LINK"])
def test_a_profile_bind_is_checked_as_writable_is(bind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hpc_runner.engine.container import container_spec

    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    monkeypatch.setenv("HOME", str(home))
    bind = bind.replace("HOME", str(home)).replace("LINK", str(tmp_path / "link"))
    with pytest.raises(UserError):
        container_spec(str(tmp_path), "apptainer", {"binds": [bind]}, "profile x")
    assert container_spec(str(tmp_path), "apptainer", {"binds": [f"{tmp_path / 'real'}:/opt/site"]},
                          "profile x").binds == (f"{tmp_path / 'real'}:/opt/site",)


# ------------------------------------------------------------------ the minimal root: nothing ungranted is there

def _outside_folder() -> Path:
    """A folder with a secret made outside, in a place the sandbox never binds (not /tmp: a tmpfs inside anyway)."""
    for parent in ("/srv", "/var/lib"):
        try:
            folder = Path(parent) / f"hpcr-test-{uuid.uuid4().hex[:8]}"
            folder.mkdir()
        except OSError:
            continue
        (folder / "secret.txt").write_text("SECRET-OUTSIDE\n")
        return folder
    pytest.skip("cannot make a folder under /srv or /var/lib here")


@needs_bwrap
def test_the_sandbox_root_is_minimal_and_shows_nothing_ungranted(tmp_path: Path) -> None:
    from hpc_runner.engine.sandbox import ETC_NAMES

    folder = _outside_folder()
    try:
        code = ("import json, os\nr = {}\nimport torch, monai\n"
                "r['torch'] = float(torch.ones(2).sum()); r['monai'] = monai.__version__\n"
                f"r['secret'] = os.path.exists({str(folder / 'secret.txt')!r}) or os.path.exists({str(folder)!r})\n"
                "r['shadow'] = os.path.exists('/etc/shadow'); r['etc'] = sorted(os.listdir('/etc'))\n"
                "r['opt'] = os.listdir('/opt') if os.path.isdir('/opt') else None\n"
                "r['srv'] = os.listdir('/srv') if os.path.isdir('/srv') else None\n"
                f"r['work'] = sorted(os.listdir({str(REPO.parent)!r}))\n"
                "try:\n    open('/planted', 'w'); r['root'] = 'written'\nexcept OSError as e:\n    r['root'] = str(e)\n"
                "print(json.dumps(r))")
        found = _inside(tmp_path, code)
        assert found["torch"] == 2.0 and found["monai"]  # torch and MONAI import and run inside
        assert found["secret"] is False and found["shadow"] is False, found
        assert set(found["etc"]) <= {name.split("/")[0] for name in ETC_NAMES}, found["etc"]
        assert "munge" not in found["etc"] and "ssh" not in found["etc"]
        # /opt, /srv and the repository's parent hold only what leads to a bound path (Python, the repository)
        python = {p for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
        for top in ("/opt", "/srv"):
            leads = {Path(p).relative_to(top).parts[0] for p in python if p.startswith(top + "/")}
            assert found[top.strip("/")] in (None, sorted(leads)) or set(found[top.strip("/")]) <= leads, found
        # (a clone under /tmp, as a CI may lay it out, shares its parent with the run's own writable folder)
        bound = (*python, str(REPO), str(tmp_path), os.getcwd())
        leads = {Path(p).relative_to(REPO.parent).parts[0] for p in bound if p.startswith(str(REPO.parent) + "/")}
        assert set(found["work"]) <= leads, found["work"]
        assert "Read-only" in found["root"], found
        # granted with --readable: there, and read-only
        code = (f"import json\nr = {{'read': open({str(folder / 'secret.txt')!r}).read()}}\n"
                f"try:\n    open({str(folder / 'new')!r}, 'w'); r['write'] = 'written'\n"
                "except OSError as e:\n    r['write'] = str(e)\nprint(json.dumps(r))")
        found = _inside(tmp_path, code, Grants((), (str(folder),)))
        assert found["read"] == "SECRET-OUTSIDE\n" and "Read-only" in found["write"], found
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_config_path_the_sandbox_would_not_show_is_refused_at_submission_before_queueing(
        tmp_path: Path, cli) -> None:
    folder = _outside_folder()
    try:
        args = ["submit", "--safe", "--bundle", str(EXAMPLE), "--cluster", "local", "--dry-run",
                "--dataset_dir", str(folder), "--output_dir", str(tmp_path / "run")]
        res = cli(*args, cwd=tmp_path)
        assert res.returncode == 2 and res.stderr.count("error:") == 1, res.stdout + res.stderr
        assert "id 'dataset_dir'" in res.stderr and f"--readable {folder}" in res.stderr, res.stderr
        assert not (tmp_path / "run").exists()
        res = cli(*args, "--readable", str(folder), cwd=tmp_path)  # granted: it goes on (a dry run: nothing queued)
        assert res.returncode == 0, res.stdout + res.stderr
        # a swept path too, naming the point
        res = cli("sweep", "--safe", "--bundle", str(EXAMPLE), "--cluster", "local", "--dry-run", "--sweep",
                  f"dataset_dir={tmp_path / 'd'},{folder}", "--output_dir", str(tmp_path / "sw"), cwd=tmp_path)
        assert res.returncode == 2 and "sweep point 1" in res.stderr and f"--readable {folder}" in res.stderr, \
            res.stdout + res.stderr
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# ------------------------------------------------------------------ a received record grants nothing

def _job_sandbox(cluster, job_id: str) -> dict:
    """The sandbox grants a queued job of the in-memory cluster carries in its arguments."""
    found = [a for arg in cluster.job(job_id).args for a in (arg if isinstance(arg, list) else [arg])
             if isinstance(a, dict) and "sandbox" in a]
    return found[0]["sandbox"]


@pytest.mark.parametrize("received", ["file chowned to nobody", "file group-writable", "folder group-writable"])
def test_a_received_sweep_yaml_grants_nothing_until_the_command_line_says_it(
        received: str, tmp_path: Path, make_cluster, capsys: pytest.CaptureFixture) -> None:
    import pwd

    from hpc_runner.cli import main
    from hpc_runner.engine.sandbox import UNVERIFIED
    from hpc_runner.jobs import ledger as sr
    from hpc_runner.scheduler.profiles import ClusterProfile
    from hpc_runner.scheduler.select import executor_for
    from hpc_runner.sweep.submission import submit_points, top_up

    cluster = make_cluster(max_submit=1)
    data_dir, mine = tmp_path / "data", tmp_path / "mine"
    data_dir.mkdir()
    mine.mkdir()
    profile = ClusterProfile("mem", [], {"executor": "memory", "time": 10, "mem_gb": 1})
    path = tmp_path / "sw"
    path.mkdir(mode=0o755)
    grants = {"writable": [str(data_dir)], "readable": []}
    data = {"kind": sr.KIND, "version": 1, "submissions": [], "cluster": profile.to_record(), "sandbox": grants}
    sr.write_new(sr.SweepRecord(path, data, sr.new_points([{"a": 0}, {"a": 1}, {"a": 2}], 3)))
    with sr.locked(path) as ledger:
        submit_points(ledger, range(3), executor_for(profile), entry=None, reason="sweep", log=lambda line: None)
        ledger.data["state"] = "submitted"
    (first,) = cluster.queued()
    assert _job_sandbox(cluster, first) == grants  # its own sweep.yaml: its grants go with its jobs

    file = path / sr.SWEEP_FILE
    if received == "file chowned to nobody":
        os.chown(file, pwd.getpwnam("nobody").pw_uid, -1) if os.geteuid() == 0 else pytest.skip("needs root")
    elif received == "file group-writable":
        file.chmod(0o664)
    else:
        path.chmod(0o775)
    assert sr.SweepRecord.load(path).data["sandbox"][UNVERIFIED]  # dropped as it is read
    cluster.advance(0)
    cluster.finish(first)
    lines: list[str] = []
    assert top_up(path, log=lines.append) == 0 and len(cluster.queued()) == 0  # status's top-up: nothing sent
    assert any("grants nothing" in line and "--readable" in line for line in lines), lines
    if received != "folder group-writable":  # saved again by this account: still granting nothing (no laundering)
        assert os.stat(file).st_uid == os.geteuid() and sr.SweepRecord.load(path).data["sandbox"][UNVERIFIED]

    assert main(["resume", str(path)]) == 2  # resume: one paragraph asking for the grants on its command line
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "grants nothing" in err and "--readable" in err and "Traceback" not in err
    assert len(cluster.queued()) == 0
    assert main(["resume", str(path), "--writable", str(mine)]) == 0, capsys.readouterr().err
    (sent,) = cluster.queued()
    assert _job_sandbox(cluster, sent) == {"writable": [str(mine)], "readable": []}  # what resume named, only
    if received != "folder group-writable":
        assert sr.SweepRecord.load(path).data["sandbox"] == {"writable": [str(mine)], "readable": []}


def test_a_received_run_yaml_grants_nothing(tmp_path: Path) -> None:
    from hpc_runner.engine.sandbox import granted_on_command_line, received_grants, recorded_grants

    run = tmp_path / "run"
    run.mkdir(mode=0o755)
    (run / "run.yaml").write_text("{}")
    grants = {"writable": [str(tmp_path / "data")], "readable": []}
    assert recorded_grants(received_grants(grants, run / "run.yaml"), "run.yaml") == Grants((str(tmp_path / "data"),))
    (run / "run.yaml").chmod(0o666)
    found = received_grants(grants, run / "run.yaml")
    with pytest.raises(UserError, match="grants nothing"):
        recorded_grants(found, "run.yaml")
    with granted_on_command_line(Grants((), (str(tmp_path / "x"),))):
        assert recorded_grants(found, "run.yaml") == Grants((), (str(tmp_path / "x"),))

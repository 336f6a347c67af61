"""Issue 44, "one way in": hostile bytes from outside, each through its one chokepoint, on real inputs.

- a scheduler answer the profile checks refuse (or one with non-UTF-8 bytes) leaves no profile behind
  (`cluster init` validates fully, then writes atomically);
- an outside command's bytes are decoded with errors="replace" and bounded (records/command_output.py);
- numbers from outside are ASCII digits only (records/numbers.py): '²', '١', '𝟗' are not numbers;
- cluster profiles (and their extends: chain) and the user config are read by the bounded reader: a FIFO, a
  symlink to /dev/zero and an alias bomb are one error paragraph naming the file, exit 2;
- the job runner looks a function up in JOB_ENTRIES before importing anything;
- name patterns refuse a trailing newline.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from hpc_runner.errors import ClusterError, ConfigError, UserError
from hpc_runner.records.command_output import run_command
from hpc_runner.records.numbers import is_ascii_digits, leading_int, outside_int, require_int

ROOT = Path(__file__).resolve().parents[2]
ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True))
SINFO_GOOD = "small*|up|1-00:00:00|2|8|32000|gpu:2\n"


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


@pytest.fixture
def fake(tmp_path: Path):
    """``fake(command, stdout_bytes, status=0)``: ``command`` on PATH prints those bytes; returns the env to use."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HPCR_", "SLURM_"))}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", HPCR_CLUSTER_PATH=str(tmp_path / "clusters"),
               HOME=str(tmp_path / "home"), XDG_CONFIG_HOME=str(tmp_path / "config"),
               XDG_CACHE_HOME=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))

    def make(command: str, out: bytes, status: int = 0) -> dict[str, str]:
        data = bin_dir / f"{command}.out"
        data.write_bytes(out)
        script = bin_dir / command
        script.write_text(f"#!/bin/sh\ncat '{data}'\nexit {status}\n")
        script.chmod(0o755)
        return env

    return make


def cli(env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hpc_runner", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=20, preexec_fn=_limit)


def refused(res: subprocess.CompletedProcess[str], *culprits: str) -> str:
    """Exit 2, one error paragraph naming each culprit, no traceback; return the paragraph."""
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    assert "Traceback" not in res.stderr + res.stdout
    errors = [line for line in res.stderr.splitlines() if ": error: " in line]
    assert len(errors) == 1, res.stderr
    for culprit in culprits:
        assert culprit in errors[0], errors[0]
    return errors[0]


def _cluster(fake, sinfo: bytes, config: bytes = b"MaxArraySize = 1001\nClusterName = c1\n") -> dict[str, str]:
    fake("sacctmgr", b"", 1)  # no accounting: partitions only
    fake("sbatch", b"", 0)  # a client is here (cluster init asks whether a controller answers first)
    fake("scontrol", config)
    return fake("sinfo", sinfo)


# --- class 1: a profile is validated fully before it is written, then written atomically


@pytest.mark.parametrize("sinfo", [
    b"gp;u*|up|1:00:00|1|4|8000|(null)\n",  # a partition name sbatch could not take
    b"gpu\xff*|up|1:00:00|1|4|8000|(null)\n",  # a non-UTF-8 byte in it
    b"gpu*|up|1:00:00|1|4|8000|gpu:\xd9\xa1\n",  # an Arabic-Indic digit in the GRES
], ids=["refused-name", "non-utf8", "unicode-digit"])
def test_cluster_init_leaves_nothing_when_the_scheduler_answer_is_refused(fake, tmp_path, sinfo):
    env = _cluster(fake, sinfo)
    res = cli(env, "cluster", "init", "mine", cwd=tmp_path)
    if res.returncode == 0:  # what is written must load: the answer was read as something sensible
        assert (tmp_path / "clusters" / "mine.yaml").is_file()
        assert cli(env, "cluster", "show", "mine", cwd=tmp_path).returncode == 0
        assert "gpus_per_node" not in (tmp_path / "clusters" / "mine.yaml").read_text()  # '١' is no GPU count
        return
    refused(res, "partition")
    assert not (tmp_path / "clusters").exists(), list((tmp_path / "clusters").iterdir())


def test_cluster_init_writes_a_profile_whose_comments_hold_the_scheduler_bytes_harmlessly(fake, tmp_path):
    env = _cluster(fake, SINFO_GOOD.encode(), b"MaxArraySize = \xc2\xb2\nClusterName = c\xff\nx\n1\n")
    res = cli(env, "cluster", "init", "mine", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    text = (tmp_path / "clusters" / "mine.yaml").read_text(encoding="utf-8")
    assert "max_array_size: 1001" in text  # '²' is not a number: SLURM's default
    assert cli(env, "cluster", "show", "mine", cwd=tmp_path).returncode == 0
    assert [p.name for p in (tmp_path / "clusters").iterdir()] == ["mine.yaml"]  # no temp file left


def test_a_profile_name_with_a_newline_or_unicode_is_refused_before_anything_is_asked(fake, tmp_path):
    env = _cluster(fake, SINFO_GOOD.encode())
    for name in ("mine\n", "mine²", "../x"):
        refused(cli(env, "cluster", "init", name, cwd=tmp_path), "cannot be a file name")
    assert not (tmp_path / "clusters").exists()


# --- class 2: one decoder for every outside command


def test_run_command_replaces_bad_bytes_and_bounds_what_it_reads(tmp_path):
    res = run_command([sys.executable, "-c", "import sys; sys.stdout.buffer.write(b'ok\\xff\\xfe'); "
                       "sys.stderr.buffer.write(b'\\x80')"], timeout=20)
    assert (res.returncode, res.stdout, res.stderr, res.cut) == (0, "ok\ufffd\ufffd", "\ufffd", False)
    big = run_command([sys.executable, "-c", "import sys\nwhile True: sys.stdout.buffer.write(b'x' * 65536)"],
                      timeout=20, limit=1 << 20)
    assert big.cut and len(big.stdout) == 1 << 20
    with pytest.raises(subprocess.TimeoutExpired):
        run_command(["sleep", "10"], timeout=0.2)
    assert run_command(["cat"], input="é\n").stdout == "é\n"


def test_scheduler_answers_with_non_utf8_bytes_are_read_not_tracebacks(fake):
    from hpc_runner.scheduler.slurm import accounting, cluster_info

    env = fake("sacct", b"JobID|State|ExitCode\n12|COMPLETED\xff|0:0\n")
    fake("scontrol", b"MaxArraySize = \xd9\xa1\xd9\xa0\nClusterName = \xfe\n")
    old = os.environ["PATH"]
    os.environ["PATH"] = env["PATH"]
    cluster_info._CACHE.clear()
    try:
        answer = accounting.query_scheduler(["12"])
        assert answer.calls >= 1  # read, whatever it made of the state
        assert cluster_info.max_array_size() == (1001, "SLURM's default (scontrol did not answer)")
        assert cluster_info.scheduler_config()["ClusterName"] == "\ufffd"
    finally:
        os.environ["PATH"] = old
        cluster_info._CACHE.clear()


# --- class 3: numbers from outside


@pytest.mark.parametrize("text", ["²", "١", "𝟗", "١٢", "-1", "+1", "1_000", "1e3", "1.0", "", " ", "0x10",
                                  "9" * 19, "9" * 5000, "1\x00", "١\n"])
def test_only_ascii_digits_are_numbers(text):
    assert outside_int(text) is None
    assert not is_ascii_digits(text.strip()) or len(text) > 18  # digits, but too many to be a count
    with pytest.raises(UserError, match="where-it-came-from"):
        require_int(text, "where-it-came-from")


def test_ascii_numbers_within_range_are_read():
    assert outside_int(" 42\n") == 42 and outside_int("0") == 0 and outside_int("5", low=6) is None
    assert leading_int("23081+") == 23081 and leading_int("²3") == 0 and leading_int("9" * 5000) == int("9" * 18)


def test_scheduler_parsers_read_unicode_digits_as_no_number():
    from hpc_runner.scheduler.job_env import memory_grant_mb
    from hpc_runner.scheduler.slurm.hostlist import expand_hostlist
    from hpc_runner.scheduler.slurm.limits import parse_associations, parse_qos
    from hpc_runner.scheduler.slurm.profile_init import parse_sinfo
    from hpc_runner.scheduler.slurm.variables import env_int, restart_count

    assert parse_qos("normal|²|١\n") == {"normal": {"max_submit_pu": None, "max_jobs_pu": None}}
    assert parse_associations("u|a|a||normal|normal|𝟗|١\n")[0]["max_submit"] is None
    part = parse_sinfo("p*|up|1:00:00|١|²|٣٢٠٠٠|gpu:١\n")[0]
    assert (part.nodes, part.cpus, part.mem_mb, part.gpus) == (0, 0, 0, 0)
    assert restart_count({"SLURM_RESTART_COUNT": "²"}) == 0
    assert memory_grant_mb({"SLURM_MEM_PER_NODE": "١٠٠"}) is None
    with pytest.raises(ClusterError, match="SLURM_PROCID"):
        env_int({"SLURM_PROCID": "١"}, "SLURM_PROCID")
    with pytest.raises(ValueError, match="not a list of numbers"):
        expand_hostlist("n[١-٣]")


def test_kept_limits_with_unicode_digits_are_no_limits(tmp_path, monkeypatch):
    from hpc_runner.scheduler.slurm import cluster_info, limits, limits_cache

    monkeypatch.setitem(cluster_info._CACHE, "", {"MaxArraySize": "7", "ClusterName": "c1",
                                                  "AccountingStorageEnforce": "associations,limits,qos"})
    monkeypatch.setenv("SLURM_CONF", "")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("HPCR_LIMITS_CACHE_S", "300")
    commands = [limits._assoc_command("root"), limits.QOS_COMMAND]
    limits_cache.keep("c1", "root", commands, ["root|acc|acc||q|q|²|١\n", "q|٣|𝟗\n"])
    monkeypatch.setattr(limits, "_run", lambda cmd, *a, **k: limits.CommandOutput(tuple(cmd), 0, "", ""))
    found = limits.read_limits({"qos": "q"}, user="root")
    assert all(limit.value is None or isinstance(limit.value, int) for limit in found.limits)
    assert not [limit for limit in found.limits if "sacctmgr" in limit.source]


# --- class 4: profiles and the user config through the bounded reader


def _profile_cases(folder: Path) -> dict[str, str]:
    """name -> what the error names; each a real hostile file in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    os.mkfifo(folder / "fifo.yaml")
    (folder / "zero.yaml").symlink_to("/dev/zero")
    (folder / "bomb.yaml").write_text(ALIAS_BOMB)
    (folder / "deep.yaml").write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    (folder / "latin1.yaml").write_bytes(b"partition: caf\xe9\n")
    (folder / "huge.yaml").write_bytes(b"# " + b"x" * (2 << 20) + b"\n")
    (folder / "bigint.yaml").write_text("max_array_size: " + "9" * 5000 + "\n")
    (folder / "via-fifo.yaml").write_text(f"extends: {folder / 'fifo.yaml'}\n")
    (folder / "via-zero.yaml").write_text("extends: zero\n")
    (folder / "via-bomb.yaml").write_text("extends: bomb\n")
    return {"fifo": "named pipe", "zero": "character device", "bomb": "alias", "deep": "nests",
            "latin1": "not UTF-8", "huge": "larger than", "bigint": "cannot be read", "via-fifo": "named pipe",
            "via-zero": "character device", "via-bomb": "alias"}


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_hostile_profiles_are_one_paragraph_naming_the_file(fake, tmp_path):
    env = fake("sinfo", b"")
    cases = _profile_cases(tmp_path / "clusters")
    for name, what in cases.items():
        paragraph = refused(cli(env, "cluster", "show", name, cwd=tmp_path), what)
        culprit = {"via-fifo": "fifo", "via-zero": "zero", "via-bomb": "bomb"}.get(name, name)
        assert f"{culprit}.yaml" in paragraph, paragraph


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_hostile_profiles_in_process_are_cluster_errors(tmp_path):
    from hpc_runner.scheduler.profiles import load_profile

    cases = _profile_cases(tmp_path / "clusters")
    env = {"HPCR_CLUSTER_PATH": str(tmp_path / "clusters"), "HOME": str(tmp_path)}
    for name, what in cases.items():
        with pytest.raises(ClusterError, match=what):
            load_profile(name, environ=env)
    with pytest.raises(ClusterError, match="named pipe"):  # named as a path, too
        load_profile(str(tmp_path / "clusters" / "fifo.yaml"), environ=env)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_hostile_user_configs_are_config_errors_naming_the_file(tmp_path):
    from hpc_runner.registry.user_config import load_user_config, safe_targets

    folder = tmp_path / "user"
    folder.mkdir()
    os.mkfifo(folder / "fifo.yaml")
    (folder / "zero.yaml").symlink_to("/dev/zero")
    (folder / "bomb.yaml").write_text(ALIAS_BOMB)
    (folder / "newline.yaml").write_text('safe_targets: ["mygroup.transforms\\n"]\n')
    for name, what in {"fifo": "named pipe", "zero": "character device", "bomb": "alias"}.items():
        env = {"HPCR_CONFIG": str(folder / f"{name}.yaml")}
        with pytest.raises(ConfigError, match=what) as err:
            load_user_config(env)
        assert f"{name}.yaml" in err.value.paragraph()
    with pytest.raises(ConfigError, match="safe_targets"):  # a module name with a trailing newline
        safe_targets({"HPCR_CONFIG": str(folder / "newline.yaml")})


# --- class 5: the job runner imports nothing it does not know


def _args_file(tmp_path: Path, function: str) -> Path:
    path = tmp_path / "array-x.json"
    path.write_text(json.dumps({"function": function, "tasks": [[]]}))
    return path


@pytest.mark.parametrize("function", [
    "hpc_runner.cli.run:main",  # hpc-runner's, but no job entry
    "hpc_runner.scheduler.slurm.job_call:main",
    "os:system", "antigravity:fly", "hpc_runner.jobs.task:run_sweep_task\n", "", "hpc_runner.jobs.task",
])
def test_the_job_runner_refuses_an_unlisted_function_before_importing(tmp_path, monkeypatch, function):
    from hpc_runner.scheduler import job_arguments as job_call

    def no_import(name: str, *args, **kwargs):
        raise AssertionError(f"imported {name}")

    monkeypatch.setattr(job_call.importlib, "import_module", no_import)
    with pytest.raises(ValueError, match="not a function of hpc-runner a job may run"):
        job_call.task_call(_args_file(tmp_path, function), 0)


def test_a_job_runner_in_a_job_does_not_run_an_unlisted_modules_import_time_code(tmp_path):
    marker = tmp_path / "ran"
    pkg = tmp_path / "evil"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\ndef go(): pass\n")
    args = _args_file(tmp_path, "evil:go")
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}", "SLURM_JOB_ID": "42"}
    res = subprocess.run([sys.executable, "-m", "hpc_runner.scheduler.slurm.job_call", str(args)], env=env,
                         capture_output=True, text=True, timeout=30)
    assert res.returncode != 0 and "not a function of hpc-runner" in res.stderr
    assert not marker.exists()


def test_deep_or_huge_job_arguments_are_refused_by_the_bounded_reader(tmp_path):
    from hpc_runner.records.read import RecordError
    from hpc_runner.scheduler.slurm.job_call import task_call

    deep = tmp_path / "deep.json"
    deep.write_text('{"function": "hpc_runner.jobs.task:run_sweep_task", "tasks": ' + "[" * 100_000
                    + "]" * 100_000 + "}")
    with pytest.raises(RecordError, match="nests"):
        task_call(deep, 0)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(RecordError, match="named pipe"):
        task_call(fifo, 0)


def test_every_listed_job_entry_is_a_marked_function_and_no_other_may_be_marked():
    import importlib

    from hpc_runner.scheduler.executor import JOB_ENTRIES, JOB_ENTRY, job_entry

    for name in JOB_ENTRIES:
        module, _, function = name.partition(":")
        assert getattr(getattr(importlib.import_module(module), function), JOB_ENTRY, False), name

    def stray() -> None:
        pass

    with pytest.raises(TypeError, match="JOB_ENTRIES"):
        job_entry(stray)


# --- class 14: a trailing newline is no valid name


def test_name_patterns_refuse_a_trailing_newline(tmp_path):
    from hpc_runner.config import monai_names, values
    from hpc_runner.data import items
    from hpc_runner.engine.checkpoint import list_checkpoints
    from hpc_runner.jobs import retry
    from hpc_runner.records import atomic
    from hpc_runner.registry import manifest, search, user_config
    from hpc_runner.tune import space

    (tmp_path / "ckpt_00000001.pt\n").write_bytes(b"")
    (tmp_path / "ckpt_00000002.pt").write_bytes(b"")
    assert [p.name for p in list_checkpoints(tmp_path)] == ["ckpt_00000002.pt"]
    assert atomic._TEMP_NAME.match(".x.yaml.host.12.abcdefgh.tmp")
    assert not atomic._TEMP_NAME.match(".x.yaml.host.12.abcdefgh.tmp\n")
    assert search._SEMVER.fullmatch("1.2.3") and not search._SEMVER.fullmatch("1.2.3\n")
    assert search.version_key("1.2.3\n") == search.version_key("1.2.3")  # stripped before, as it always was
    assert user_config._DOTTED.fullmatch("a.b") and not user_config._DOTTED.fullmatch("a.b\n")
    assert manifest._LINE.match("0" * 64 + "  a") and not manifest._LINE.match("0" * 64 + "  a\n")
    assert retry._CHANGE.match("mem*2") and not retry._CHANGE.match("mem*2\n")
    assert not values._INT.match("1\n") and values._INT.match("1") and not values._BOOL.match("true\n")
    assert not space._CALL.match("choice(1, 2)\nx") and space._CALL.match("choice(1, 2)\n")  # \s* takes it
    assert items._OBJECT_REPR.match("<a.B object at 0x1f>") and not items._OBJECT_REPR.match("<a.B object at 0x1f>\n")
    assert monai_names._EXCLUDED.match("x.__main__") and not monai_names._EXCLUDED.match("x.__main__\n")


def test_scaffold_sweep_and_run_head_patterns_refuse_a_trailing_newline():
    from hpc_runner.errors import BundleError
    from hpc_runner.records import run_head
    from hpc_runner.registry import scaffold
    from hpc_runner.sweep import spec

    scaffold.check_name("spleen_seg")
    with pytest.raises(BundleError):
        scaffold.check_name("spleen_seg\n")
    assert spec._FUNC.match("range(3)") and not spec._FUNC.match("range(3)\n")
    assert run_head._TOP_KEY.fullmatch("status: done") and not run_head._TOP_KEY.fullmatch("status: done\n")
    assert run_head._CHILD.fullmatch("  id: 12") and not run_head._CHILD.fullmatch("  id: 12\n")

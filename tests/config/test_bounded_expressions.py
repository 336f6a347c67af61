"""``config --resolve``, ``--safe`` and ``verify --net`` bound an expression before they compute it (issue 32, item 5).

The length and depth of a ``$`` expression are bounded before and after it is parsed, and the size of what
``%``, ``str.format``, f-strings, ``*``, ``str``, ``join`` and friends would make is predicted before they
run (``sum`` adds numbers only). Each attack runs in a process of 1 GiB of address space that must end
within 10 s: the old code built a 1 GB string, ran for minutes or printed a RecursionError traceback.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tracemalloc
from pathlib import Path
from types import SimpleNamespace

import pytest

ATTACKS = {
    "percent": "$'%0999999999d' % 0",
    "format": "$'{:>{}}'.format('', 999999999)",
    "str": "$str([[0]*100000]*100000)",
    "sum": "$sum([[0]*100000]*100000, [])",
    "plus": "$" + "+".join(["1"] * 200_000),  # 400 KB
    "minus": "$" + "-" * 200_000 + "1",  # 200 KB
}


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HPCR_")}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=10, preexec_fn=_limit)


@pytest.mark.parametrize("name", list(ATTACKS))
def test_config_resolve_shows_the_attack_as_written_without_computing_it(tmp_path: Path, name: str):
    (tmp_path / "c.json").write_text(json.dumps({"x": ATTACKS[name], "y": "$1 + 1"}))
    res = run([sys.executable, "-m", "hpc_runner", "config", "--config_file", "c.json", "--resolve"], tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "Traceback" not in res.stderr + res.stdout
    assert "y: 2" in res.stdout  # the rest of the config is still resolved
    note = next(line for line in res.stdout.splitlines() if line.startswith("#   x: "))
    assert any(word in note for word in ("too large", "too long", "not evaluated")), note


@pytest.mark.parametrize("expr", ["'%0999999999d' % 0", "'{:>{}}'.format('', 999999999)", "'%-99999999s' % 'x'"])
def test_no_large_string_is_built_before_the_size_check(expr: str):
    from hpc_runner.config.pure_eval import NotPure, evaluate_pure

    tracemalloc.start()
    try:
        with pytest.raises(NotPure, match=r"not evaluated|too large"):
            evaluate_pure(expr)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 10 << 20, f"{expr}: {peak >> 20} MiB allocated"


@pytest.mark.parametrize("name", ["plus", "minus"])
def test_safe_refuses_a_huge_expression_with_one_paragraph(tmp_path: Path, name: str):
    (tmp_path / "c.json").write_text(json.dumps({"x": ATTACKS[name]}))
    res = run([sys.executable, "-m", "hpc_runner", "config", "--config_file", "c.json", "--safe"], tmp_path)
    assert res.returncode == 2, res.stderr[-2000:]
    assert "Traceback" not in res.stderr + res.stdout
    errors = [line for line in res.stderr.splitlines() if ": error: " in line]
    assert len(errors) == 1 and "--safe refuses" in errors[0], res.stderr
    assert "c.json:1: id 'x': '$' expression" in res.stderr


def test_references_repeating_a_large_value_are_refused_before_printing(tmp_path: Path):
    # each `@a` is the same object: cheap to hold, 2 GB to print
    (tmp_path / "c.json").write_text(json.dumps({"a": "$'x' * 99000", "b": ["@a"] * 20_000}))
    res = run([sys.executable, "-m", "hpc_runner", "config", "--config_file", "c.json", "--resolve"], tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]
    errors = [line for line in res.stderr.splitlines() if ": error: " in line]
    assert len(errors) == 1 and "at id 'b'" in errors[0] and "16 MiB to print" in errors[0], res.stderr


HELD_OUT = [
    "'{0}{0}{0}{0}{0}{0}'.format('x' * 90000)",
    "'{:{}}'.format(1, 10 ** 9)",
    "'{0.__class__}'.format(1)",
    "f'{\"\":>{10 ** 8}}'",
    "'%.*f' % (10 ** 8, 1.0)",
    "'%(a)s%(a)s' % {'a': 'x' * 90000}",
    "'%.99999f' % 1.0",
    "'-'.join(['x' * 90000] * 2)",
    "str(list(range(100000)))",
    "str([[0] * 1000] * 1000)",
    "round(5, -10 ** 8)",
    "'ab'.replace('', 'x' * 60000)",
    "(1,) * 100000",
    "sum([[1]], [])",
    "str(__ref0)",
    "'%s' % (__ref1,)",
    "[__ref1] * 2",
    "__ref0.upper()",
    "1" + "+1" * 1999,  # under the length bound, over the depth bound
    "-" * 3999 + "1",
]


def test_a_held_out_corpus_is_refused_in_microseconds_not_computed():
    code = f"""
import json, time
from hpc_runner.config.pure_eval import NotPure, evaluate_pure
names = {{"__ref0": "x" * 1_000_000, "__ref1": [[0] * 10] * 100_000}}
out = []
for expr in {HELD_OUT!r}:
    start = time.monotonic()
    try:
        evaluate_pure(expr, names)
        out.append([expr, "evaluated", 0])
    except NotPure as exc:
        out.append([expr, str(exc), time.monotonic() - start])
print(json.dumps(out))
"""
    res = run([sys.executable, "-c", code], Path.cwd())
    assert res.returncode == 0, res.stderr[-2000:]
    for expr, why, seconds in json.loads(res.stdout):
        assert why != "evaluated", expr
        assert seconds < 1, (expr, seconds)


def test_what_is_small_is_still_evaluated():
    from hpc_runner.config.pure_eval import evaluate_pure

    assert evaluate_pure("'x' * 99000") == "x" * 99000
    assert evaluate_pure("'{:>5}|{:.2f}'.format('a', 1.5)") == "    a|1.50"
    assert evaluate_pure("'%05d-%s' % (7, 'b')") == "00007-b"
    assert evaluate_pure("sum([1, 2.5]) + len(__ref0)", {"__ref0": [0] * 200_000}) == 200_003.5
    assert evaluate_pure("'/'.join(['a', 'b'])") == "a/b"


def test_verify_net_bounds_shape_patterns_before_computing_them():
    code = """
from hpc_runner.config.verify_net import shape_value
try:
    shape_value("((((((9**16)**16)**16)**16)**16)**16)**16")
except ValueError as exc:
    print("refused:", exc)
"""
    res = run([sys.executable, "-c", code], Path.cwd())
    assert res.returncode == 0 and "refused:" in res.stdout and "1,048,576" in res.stdout, res.stderr[-2000:]


def test_verify_net_refuses_a_dummy_input_too_large_to_build():
    from hpc_runner.config.verify_net import net_problems

    def meta(shape):
        return {"network_data_format": {"inputs": {"image": {"num_channels": 1, "spatial_shape": shape}},
                                        "outputs": {"pred": {"num_channels": 2, "spatial_shape": shape}}}}

    for shape in ([4096, 4096, 4096], ["2**16", "2**16"], [-5, 8]):
        cfg = SimpleNamespace(meta=meta(shape), locate=lambda _id: "metadata.json:1", meta_file="metadata.json",
                              config={"network_def": {"_target_": "UNet"}}, config_files=["train.json"])
        problems, summary = net_problems(cfg)  # type: ignore[arg-type]
        assert summary is None and len(problems) == 1
        assert "verify --net builds at most 33,554,432" in problems[0].message


@pytest.mark.parametrize("expr", [ATTACKS["plus"], ATTACKS["minus"], "$" + "+".join(["1"] * 20_000),
                                  "$" + "-" * 20_000 + "1"])
def test_preflight_names_an_expression_python_cannot_parse_instead_of_crashing(expr: str):
    from hpc_runner.config.preflight import expression_problem

    problem = expression_problem(expr)
    assert problem is not None and problem.startswith("'$' expression "), problem
    assert any(word in problem for word in ("characters long", "nests too deeply")), problem
    assert expression_problem("$[" + "1," * 40_000 + "]") is None  # long and flat: Python parses it, so may we

"""``config --resolve`` evaluates only what it can prove pure; everything else is shown as written, marked."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpc_runner.config.display import resolve_with_notes
from hpc_runner.config.pure_eval import NotPure, evaluate_pure


@pytest.mark.parametrize(
    ("expr", "names", "value"),
    [
        ("1 + 2 * 3", {}, 7),
        ("__ref0 * 2", {"__ref0": 8}, 16),
        ("[__ref0, __ref0 * 2, __ref0 * 4]", {"__ref0": 8}, [8, 16, 32]),
        ("os.path.join(__ref0, 'models')", {"__ref0": "/b"}, "/b/models"),
        ("__ref0 + '/eval'", {"__ref0": "/b"}, "/b/eval"),
        ("'cuda' if False else 'cpu'", {}, "cpu"),
        ("f'{__ref0}_{__ref1:03d}'", {"__ref0": "ck", "__ref1": 7}, "ck_007"),
        ("__ref0.replace('a', 'b')", {"__ref0": "aa"}, "bb"),
        ("len(__ref0) // 2", {"__ref0": [1, 2, 3, 4]}, 2),
        ("2 ** 10", {}, 1024),
        ("{'a': 1}.get('a')", {}, 1),
    ],
)
def test_pure_expressions_are_evaluated(expr, names, value):
    assert evaluate_pure(expr, names) == value


@pytest.mark.parametrize(
    ("expr", "why"),
    [
        ("os.replace('a.txt', 'moved.txt')", "calls os.replace"),  # a method *name* on the list is not enough
        ("os.system('touch M')", "calls os.system"),
        ("__import__('os').system('touch M')", "calls __import__"),
        ("open('x', 'w').write('y')", "calls open"),
        ("torch.save({}, 'x.pt')", "calls torch.save"),
        ("shutil.rmtree('x')", "calls shutil.rmtree"),
        ("().__class__.__base__.__subclasses__()", "attribute is not evaluated"),
        ("(lambda: 1)()", "calls an expression"),
        ("[x for x in range(3)]", "listcomp"),
        ("10 ** 10 ** 10", "too large"),
        ("'x' * 10 ** 12", "too large"),
        ("'x'.zfill(10 ** 9)", "too large"),
        ("'{:999999999}'.format(1)", "too large"),
        ("f'{1:999999999}'", "too wide"),
        ("range(10 ** 12)", "too large"),
        ("monai.bundle.ConfigParser()", "calls monai.bundle.ConfigParser"),
        ("1 / 0", "ZeroDivisionError"),
    ],
)
def test_anything_that_may_have_an_effect_is_not_evaluated_and_says_why(expr, why):
    with pytest.raises(NotPure, match=why.replace("(", r"\(")):
        evaluate_pure(expr)


def test_resolve_lists_every_expression_it_leaves_as_written():
    config = {"root": "/b", "ckpt": "$@root + '/models'", "mover": "$os.replace('a.txt', 'moved.txt')",
              "deep": {"net": {"x": "$torch.load('w.pt')"}}, "imp": "$import glob"}
    out, notes = resolve_with_notes(config)
    assert out["ckpt"] == "/b/models"
    assert out["mover"] == config["mover"] and out["deep"]["net"]["x"] == "$torch.load('w.pt')"
    assert {n.id_path: n.reason for n in notes} == {
        "mover": "calls os.replace", "deep::net::x": "calls torch.load", "imp": "not a Python expression "
        "(invalid syntax)"}


def test_config_resolve_through_the_cli_moves_no_file_and_marks_what_it_left(tmp_path: Path):
    bundle = tmp_path / "b"
    (bundle / "configs").mkdir(parents=True)
    (bundle / "configs" / "train.yaml").write_text(
        "x: \"$os.replace('a.txt', 'moved.txt')\"\n"
        "y: \"$__import__('os').system('touch M5')\"\n"
        "z: \"$@w * 2\"\n"
        "w: 21\n"
    )
    example = Path(__file__).resolve().parents[2] / "bundles" / "synthetic_seg" / "configs" / "metadata.json"
    (bundle / "configs" / "metadata.json").write_text(example.read_text())
    (tmp_path / "a.txt").write_text("keep me here")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HPCR_")}
    res = subprocess.run([sys.executable, "-m", "hpc_runner", "config", "--bundle", str(bundle), "--resolve"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "a.txt").read_text() == "keep me here" and not (tmp_path / "moved.txt").exists()
    assert not (tmp_path / "M5").exists()
    assert "z: 42" in res.stdout
    assert "#   x: $os.replace('a.txt', 'moved.txt')  (calls os.replace)" in res.stdout
    assert "#   y: $__import__('os').system('touch M5')  (calls __import__)" in res.stdout

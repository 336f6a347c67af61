"""The hostile inputs, one hypothesis strategy per class (issue 44).

Three kinds of slot take a hostile value, and each kind has its classes:

- ``TEXT_CLASSES``: a string that lands in argv or in the environment (an option's value, an override, a sweep
  value, a path, a name): empty, control characters and ANSI escapes, odd Unicode digits, non-finite numbers,
  path characters (``:`` ``,`` ``$(...)`` newlines), non-UTF-8 bytes (as Python's argv holds them: surrogate
  escapes), names too long for the filesystem.
- ``FILE_CLASSES``: a file the command is pointed at (a profile, a record, a job file, a dataset.json): a FIFO (or
  a link to one), a link to /dev/zero, a folder, a dangling link, a huge sparse file, deeply nested JSON or YAML, a
  YAML alias bomb, non-UTF-8 bytes, text with control characters, odd numbers (NaN, 1e999, '²'), an empty file,
  and a valid document of the slot's own shape with one value replaced by a hostile one (``mutated``).
- ``ANSWER_CLASSES``: what a fake scheduler command (SLURM's sbatch, sacct, squeue, sinfo, scontrol, sacctmgr,
  scancel, srun; Grid Engine's qsub, qstat, qacct, qconf, qdel, qalter) prints: nothing, megabytes, non-UTF-8
  bytes, odd digits, control characters, the wrong shape.

Each class's strategy starts from its most hostile member (Hypothesis tries the simplest example first, so even one
example per class is a useful case); more examples add variations.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

# ----------------------------------------------------------------------------------------------- text in argv

ODD_DIGITS = ["²", "١", "١٢", "１２", "٣.٥", "𝟙𝟘", "½", "Ⅻ", "٠", "߁", "1_000", "0x10", "+1", "-0", " 7 ", "07",
              "1e3", "٣e٢", "１e-３"]
NON_FINITE = ["nan", "1e999", "-1e999", "inf", "-inf", "NaN", ".nan", ".inf", "-.inf", "Infinity", "-Infinity",
              "1e-999", "9" * 400, "-" + "9" * 400, "0x" + "f" * 64]
PATH_CHARS = ["a:b", "a,b", "$(touch PWNED)", "`touch PWNED`", "a\nb", "a;touch PWNED", "${HOME}x", "a b",
              "%A_%a", "%j", "-x", "--", "*", "x/../y", "a\\b", "'", '"', "a\tb", "#x", "a=b", "x//y/", ".", "@x",
              "a::b", "a#b"]
CONTROL_PIECES = ["\x1b[31m", "\x1b[2J", "\x1b]0;title\x07", "\r", "\n", "\x07", "\x08", "\x7f", "\x9b", "\u202e",
                  "\u2028", "\x85", "\ufeff", "\x01", "\x1f", "\t"]
NON_UTF8 = ["\udcff", "caf\udce9", "\udcc3\udc28", "\udcfe\udcff", "a\udc80b", "\udced\udca0\udc80"]
EMPTY_TEXT = ["", " ", "\t", "''", '""', "\n"]


def _mixed(pieces: list[str]) -> st.SearchStrategy[str]:
    """One of ``pieces``, then joins of a few of them with plain letters between."""
    return st.one_of(st.sampled_from(pieces),
                     st.lists(st.one_of(st.sampled_from(pieces), st.text("abc019.-_/", max_size=3)),
                              min_size=2, max_size=5).map("".join))


TEXT_CLASSES: dict[str, st.SearchStrategy[str]] = {
    "empty": st.sampled_from(EMPTY_TEXT),
    "control chars": _mixed(CONTROL_PIECES),
    "odd digits": _mixed(ODD_DIGITS),
    "non-finite": st.sampled_from(NON_FINITE),
    "path chars": _mixed(PATH_CHARS),
    "non-UTF-8": _mixed(NON_UTF8),
    "too long": st.sampled_from([300, 5000, 100_000]).map(lambda n: "x" * n),
}

# ----------------------------------------------------------------------------------------------- files


@dataclass(frozen=True)
class FileSpec:
    """A hostile file, made at a path by ``make``. ``kind``: bytes, fifo, link_fifo, link_zero, folder, dangling,
    sparse (``size`` bytes of holes), mutate (the slot's valid document with the leaf ``index`` set to ``value``)."""

    kind: str
    data: bytes = b""
    size: int = 0
    index: int = 0
    value: Any = None

    def make(self, path: Path, original: Any = None) -> None:
        """Make the file at ``path`` (its folder exists); ``original``: the valid document a mutation starts from
        (a dict or list; written back in ``path``'s format, JSON or YAML by its suffix)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink() or path.is_file():
            path.unlink()
        if self.kind == "bytes":
            path.write_bytes(self.data)
        elif self.kind == "fifo":
            os.mkfifo(path)
        elif self.kind == "link_fifo":
            target = path.with_name(f".{path.name}.fifo")
            os.mkfifo(target)
            path.symlink_to(target)
        elif self.kind == "link_zero":
            path.symlink_to("/dev/zero")
        elif self.kind == "folder":
            path.mkdir()
            (path / "inside").write_text("x")
        elif self.kind == "dangling":
            path.symlink_to(path.with_name(".nowhere"))
        elif self.kind == "sparse":
            with open(path, "wb") as f:
                f.truncate(self.size)
        elif self.kind == "mutate":
            path.write_bytes(serialize(mutated(original, self.index, self.value), path.suffix))
        else:
            raise AssertionError(self.kind)

    def __repr__(self) -> str:  # the reproduction in a failure message: short, exact enough to redo
        if self.kind == "bytes":
            shown = self.data if len(self.data) <= 160 else self.data[:120] + b"..." + self.data[-20:]
            return f"FileSpec(bytes, {len(self.data)} B: {shown!r})"
        if self.kind == "sparse":
            return f"FileSpec(sparse, {self.size} B of holes)"
        if self.kind == "mutate":
            value = repr(self.value)
            return f"FileSpec(mutate leaf #{self.index} := {value[:160]}{'...' if len(value) > 160 else ''})"
        return f"FileSpec({self.kind})"


def fifo_safe_unblock(root: Path) -> None:
    """Open every FIFO under ``root`` for writing (non-blocking) and close it, so a reader still blocked in a thread
    reads end-of-file instead of waiting forever."""
    for p in root.rglob("*"):
        try:
            if p.is_fifo():
                fd = os.open(p, os.O_WRONLY | os.O_NONBLOCK)
                os.close(fd)
        except OSError:
            pass


def serialize(doc: Any, suffix: str) -> bytes:
    """``doc`` as JSON (``.json``/``.jsonl``, NaN written as NaN) or YAML; lone surrogates become raw bytes."""
    if suffix in (".json", ".jsonl"):
        text = json.dumps(doc, allow_nan=True, ensure_ascii=False, default=str)
    else:
        try:
            text = yaml.safe_dump(doc, allow_unicode=True, sort_keys=False)
        except yaml.YAMLError:
            text = json.dumps(doc, allow_nan=True, ensure_ascii=False, default=str)  # JSON is YAML too
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


def leaves(doc: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path (keys and indexes) to a value of ``doc``, containers included, root excluded."""
    out: list[tuple] = []
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for key, value in items:
        out.append((*prefix, key))
        out += leaves(value, (*prefix, key))
    return out


def mutated(doc: Any, index: int, value: Any) -> Any:
    """A deep copy of ``doc`` with its ``index``-th path (modulo their number) set to ``value``."""
    doc = json.loads(json.dumps(doc, default=str))
    paths = leaves(doc)
    if not paths:
        return value
    *parents, last = paths[index % len(paths)]
    node = doc
    for key in parents:
        node = node[key]
    node[last] = value
    return doc


def _deep_json(depth: int, kind: str) -> bytes:
    if kind == "list":
        return b"[" * depth + b"]" * depth
    if kind == "dict":
        return b'{"a":' * depth + b"1" + b"}" * depth
    return b"[" * depth  # never closed


def _deep_yaml(depth: int, kind: str) -> bytes:
    if kind == "block":  # indents grow with depth: 100,000 levels would be a 5 GB file (the generator's own OOM)
        depth = min(depth, 3000)  # 4.5 MB, still 30x the nesting any reader takes
        return "".join(f"{' ' * i}a:\n" for i in range(depth)).encode() + b" " * depth + b"a: 1\n"
    if kind == "dashes":
        return b"- " * depth + b"x\n"
    return b"a: " + b"[" * depth + b"]" * depth + b"\n"


def _alias_bomb(levels: int, width: int) -> bytes:
    lines = ['a0: &a0 ["lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]")
    lines.append(f"bomb: *a{levels - 1}")
    return ("\n".join(lines) + "\n").encode()


HOSTILE_SCALARS: st.SearchStrategy[Any] = st.one_of(
    st.sampled_from([float("nan"), float("inf"), -float("inf"), 10**400, -(10**400), None, True, "", [], {},
                     "1e999", "²", "١٢", "１２", "$(touch PWNED)", "../../../../etc/passwd", "\x1b[2J\x00",
                     "a\nb: c", "\udcff", "x" * 70_000, [[[[[[[[[[[[]]]]]]]]]]]]]),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    st.text(alphabet="".join(CONTROL_PIECES) + "١²ab\udcff", max_size=20),
)

FILE_CLASSES: dict[str, st.SearchStrategy[FileSpec]] = {
    "fifo": st.sampled_from([FileSpec("fifo"), FileSpec("link_fifo")]),
    "device or folder": st.sampled_from([FileSpec("link_zero"), FileSpec("folder"), FileSpec("dangling")]),
    "huge": st.sampled_from([600 << 20, 64 << 20]).map(lambda n: FileSpec("sparse", size=n)),
    "deep": st.one_of(
        st.builds(_deep_json, st.sampled_from([100_000, 3000]), st.sampled_from(["list", "dict", "open"])),
        st.builds(_deep_yaml, st.sampled_from([100_000, 3000]), st.sampled_from(["flow", "dashes", "block"])),
    ).map(lambda b: FileSpec("bytes", b)),
    "alias bomb": st.builds(_alias_bomb, st.sampled_from([9, 6, 12]), st.sampled_from([9, 10])).map(
        lambda b: FileSpec("bytes", b)),
    "non-UTF-8": st.one_of(
        st.sampled_from([b"\xff\xfe\x00k\x00e\x00y\x00", b"key: \xff\xfe\n", b"\xc3\x28: 1\n", bytes(range(256))]),
        st.binary(min_size=1, max_size=64),
    ).map(lambda b: FileSpec("bytes", b)),
    "control chars": _mixed([*CONTROL_PIECES, "a: ", "\x00", "{", "- "]).map(
        lambda s: FileSpec("bytes", s.encode("utf-8", "surrogatepass"))),
    "odd numbers": st.sampled_from(
        [b"NaN", b"[NaN, Infinity, -Infinity]", b'{"a": 1e999}', b"a: .nan\nb: 1e999\n", b"a: \xc2\xb2\n",
         "{\"a\": ١٢}".encode(), b"a: 0x" + b"f" * 5000 + b"\n", b"9" * 5000]).map(lambda b: FileSpec("bytes", b)),
    "empty": st.sampled_from([b"", b"\n", b"null", b"~", b"---\n", b"[]", b"{}", b'""']).map(
        lambda b: FileSpec("bytes", b)),
    "mutated": st.builds(lambda i, v: FileSpec("mutate", index=i, value=v), st.integers(0, 10_000), HOSTILE_SCALARS),
}

# ----------------------------------------------------------------------------------------------- scheduler answers

GOLDEN_GRID_ENGINE = Path(__file__).resolve().parents[1] / "scheduler" / "golden" / "gridengine"

SLURM_COMMANDS = ("sbatch", "sacct", "squeue", "sinfo", "scontrol", "sacctmgr", "scancel", "srun")
GRID_ENGINE_COMMANDS = ("qsub", "qstat", "qacct", "qconf", "qdel", "qalter")
SCHEDULER_COMMANDS = SLURM_COMMANDS + GRID_ENGINE_COMMANDS  # each profile's commands are on the fake PATH at once


@dataclass(frozen=True)
class Answers:
    """What each fake scheduler command prints (``out``: command -> bytes; ``huge``: command -> a size printed by
    the script itself) and its exit status (``code``)."""

    out: dict[str, bytes] = field(default_factory=dict)
    huge: dict[str, int] = field(default_factory=dict)
    code: int = 0

    def __repr__(self) -> str:
        shown = {k: (v if len(v) <= 80 else v[:60] + b"...") for k, v in self.out.items()}
        return f"Answers(code={self.code}, out={shown}, huge={self.huge})"


# the shape of a sane answer of each command, {x} where the hostile piece goes
TEMPLATES: dict[str, list[bytes]] = {
    "sbatch": [b"Submitted batch job {x}\n", b"{x}\n", b"{x};fuzz\n"],
    "sacct": [b"{x}|COMPLETED|0:0|00:00:01|00:01:00|1|1G|\n", b"{x}_0|RUNNING|0:0\n{x}_1|{x}|{x}\n"],
    "squeue": [b"{x} PENDING\n", b"{x}|{x}|{x}\n"],
    "sinfo": [b"{x}* up infinite 1 idle\n", b"{x}|{x}|{x}|{x}\n"],
    "scontrol": [b"MaxArraySize = {x}\nClusterName = fuzz\nAccountingStorageEnforce = limits\nMaxJobCount = {x}\n",
                 b"{x}\n"],
    "sacctmgr": [b"{x}|{x}|{x}|{x}\n", b"root|fuzz|normal|{x}|{x}\n"],
    "scancel": [b"{x}\n"],
    "srun": [b"{x}\n"],
    # Grid Engine's (tests/scheduler/golden/gridengine/ has the real ones)
    "qsub": [b"{x}\n", b"{x}.1-2:1\n", b"Your job {x} (\"x\") has been submitted\n"],
    "qstat": [b"<?xml version='1.0'?>\n<job_info><queue_info><job_list state=\"running\"><JB_job_number>{x}"
              b"</JB_job_number><state>{x}</state><tasks>{x}</tasks><slots>{x}</slots></job_list></queue_info>"
              b"<job_info></job_info></job_info>\n", b"{x}\n"],
    "qacct": [b"=" * 62 + b"\nqname        all.q\nhostname     {x}\njobnumber    {x}\ntaskid       {x}\n"
              b"failed       {x}\nexit_status  {x}\nru_wallclock {x}\nmaxvmem      {x}\n"
              b"category     -l h_rt={x},h_vmem={x}\n", b"{x}\n"],
    "qconf": [b"qname {x}\nslots {x}\npe_list {x}\nh_rt {x}\nh_vmem {x}\nmax_u_jobs {x}\nmax_aj_tasks {x}\n"
              b"max_aj_instances {x}\n", b"{x}\n"],
    "qdel": [b"{x}\n"],
    "qalter": [b"{x}\n"],
}

_PIECES: dict[str, st.SearchStrategy[bytes]] = {
    "non-UTF-8": st.sampled_from([b"\xff\xfe", b"\xc3\x28", b"1\xff2", b"\x80" * 5]),
    "odd digits": st.sampled_from([s.encode() for s in ODD_DIGITS] + [b"NaN", b"1e999", b"-1", b"9" * 40]),
    "control chars": st.sampled_from([s.encode() for s in CONTROL_PIECES] + [b"\x00", b"1\r\n2"]),
    "wrong shape": st.sampled_from([b"", b"|||||", b"Submitted", b"job", b"(null)", b"N/A", b"None", b"=", b"1 2 3"]),
}


@st.composite
def _answers(draw: st.DrawFn, piece: st.SearchStrategy[bytes] | None, huge: bool = False, empty: bool = False):
    out: dict[str, bytes] = {}
    sizes: dict[str, int] = {}
    for name in SCHEDULER_COMMANDS:
        if empty:
            out[name] = b""
        elif huge:
            sizes[name] = draw(st.sampled_from([8 << 20, 1 << 20]))
        else:
            template = draw(st.sampled_from(TEMPLATES[name]))
            out[name] = template.replace(b"{x}", draw(piece))
    return Answers(out, sizes, draw(st.sampled_from([0, 1])) if not huge else 0)


ANSWER_CLASSES: dict[str, st.SearchStrategy[Answers]] = {
    "empty": _answers(None, empty=True),
    "huge": _answers(None, huge=True),
    **{name: _answers(piece) for name, piece in _PIECES.items()},
}


def fake_scheduler(bin_dir: Path, answers: Answers) -> None:
    """Write the fake scheduler commands (SLURM's and Grid Engine's) into ``bin_dir`` (first on PATH): each prints
    its answer and exits with the answer's status; every call is listed in ``bin_dir/calls.txt``."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in SCHEDULER_COMMANDS:
        body = [f'echo "{name} $*" >> "{bin_dir}/calls.txt"']
        if name in answers.huge:
            body.append(f"head -c {answers.huge[name]} /dev/zero | tr '\\0' '9'")
        else:
            (bin_dir / f"{name}.out").write_bytes(answers.out.get(name, b""))
            body.append(f'cat "{bin_dir}/{name}.out"')
        body.append(f"exit {answers.code}")
        script = bin_dir / name
        script.write_text("#!/bin/sh\n" + "\n".join(body) + "\n")
        script.chmod(0o755)


SANE_ANSWERS = Answers({
    "sbatch": b"Submitted batch job 4242\n",
    "sacct": b"",
    "squeue": b"",
    "sinfo": b"debug* up infinite 1 idle\n",
    "scontrol": b"MaxArraySize = 1001\nClusterName = fuzz\nAccountingStorageEnforce = limits\nMaxJobCount = 10000\n",
    "sacctmgr": b"",
    "scancel": b"",
    "srun": b"",
    "qsub": b"4242\n",  # -terse; `-w v` (the check) reads only the exit status
    "qstat": b"<?xml version='1.0'?>\n<job_info><queue_info></queue_info><job_info></job_info></job_info>\n",
    "qacct": b"",
    "qconf": (GOLDEN_GRID_ENGINE / "qconf_sq.txt").read_bytes()  # -sq and -sconf read their own keys of both
    + (GOLDEN_GRID_ENGINE / "qconf_sconf_global.txt").read_bytes(),
    "qdel": b"",
    "qalter": b"",
})

"""Run every `python -m monai.bundle <command>` of the model zoo's READMEs through MONAI and through hpc-runner.

For ckpt_export, onnx_export, verify_metadata, verify_net_in_out, init_bundle and run_workflow commands in
models/*/docs/README.md of a model-zoo checkout: each bundle is copied twice (one copy per runner), the
checkpoint the command names is made when git lacks it (the config's network_def with random weights:
large weights are not in git), and the same argv runs through `python -m monai.bundle` and
`python -m hpc_runner`, one after the other. Exported TorchScript files are compared (metadata, configs
inside, weights). Prints a Markdown table; nothing is written outside ``--work``.

    python scripts/zoo_monai_commands.py --zoo /tmp/zoo24/models --work /tmp/zoo24/work
"""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

COMMANDS = ("ckpt_export", "onnx_export", "verify_metadata", "verify_net_in_out", "init_bundle", "run_workflow")
LINE = re.compile(r"^\s*(?:torchrun\s+\S+\s+)?(?:python\s+)?-m monai\.bundle (" + "|".join(COMMANDS) + r")\b(.*)$")


def readme_commands(bundle: Path) -> list[tuple[str, list[str], str]]:
    """The (command, argv, line) of each MONAI bundle command in the bundle's README (continued lines joined)."""
    text = (bundle / "docs" / "README.md").read_text(encoding="utf-8").replace("\\\n", " ")
    found = []
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            found.append((m.group(1), shlex.split(m.group(2)), line.strip()))
    return found


def _arg(argv: list[str], name: str) -> str | None:
    for i, tok in enumerate(argv):
        if tok == f"--{name}" and i + 1 < len(argv):
            return argv[i + 1]
        if tok.startswith(f"--{name}="):
            return tok.split("=", 1)[1]
    return None


def make_weights(bundle: Path, argv: list[str]) -> str:
    """Save network_def with random weights where the command's --ckpt_file points, unless it exists."""
    ckpt = _arg(argv, "ckpt_file")
    config = _arg(argv, "config_file")
    if not ckpt or not config or (bundle / ckpt).is_file():
        return "weights from git" if ckpt else ""
    code = (  # pretrained ImageNet weights cannot be downloaded here: random ones are as good for a checkpoint
        "import sys, torch; from monai.bundle import ConfigParser\n"
        "p = ConfigParser(); p.read_config(sys.argv[1]); p['bundle_root'] = sys.argv[3]\n"
        "net_cfg = p[sys.argv[4]]\n"
        "if isinstance(net_cfg, dict) and net_cfg.get('pretrained'): p[sys.argv[4] + '#pretrained'] = False\n"
        "torch.manual_seed(0); net = p.get_parsed_content(sys.argv[4])\n"
        "torch.save(net.state_dict(), sys.argv[2])\n"
    )
    (bundle / ckpt).parent.mkdir(parents=True, exist_ok=True)
    net_id = argv[0] if argv and not argv[0].startswith("-") else (_arg(argv, "net_id") or "network_def")
    res = subprocess.run([sys.executable, "-c", code, config, ckpt, ".", net_id], cwd=bundle, capture_output=True,
                         text=True, timeout=900)
    if res.returncode != 0:
        return "random weights failed: " + (res.stderr.strip().splitlines() or ["?"])[-1][:200]
    return "random weights"


def run(module: str, command: str, argv: list[str], cwd: Path, timeout: float) -> tuple[int, float, str]:
    """Run `python -m MODULE COMMAND ARGV` in ``cwd``; return exit code, seconds and the last error line."""
    start = time.monotonic()
    try:
        res = subprocess.run([sys.executable, "-m", module, command, *argv], cwd=cwd, capture_output=True,
                             text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return -1, time.monotonic() - start, f"timed out after {timeout:.0f} s"
    lines = [ln for ln in res.stderr.strip().splitlines() if ln.strip()]
    why = next((ln for ln in reversed(lines) if re.match(r"(\w+(\.\w+)*(Error|Exception)|hpc-runner \w+: error)", ln)),
               lines[-1] if lines else "")
    return res.returncode, time.monotonic() - start, why[:300]


def same_torchscript(a: Path, b: Path) -> str:
    """Compare two TorchScript exports: metadata, extra files and weights."""
    code = (
        "import sys, torch, zipfile\n"
        "def load(p):\n"
        "    names = [n.split('/', 1)[1] for n in zipfile.ZipFile(p).namelist() if '/extra/' in n]\n"
        "    extra = {n.split('/', 1)[1]: '' for n in names}\n"
        "    m = torch.jit.load(p, map_location='cpu', _extra_files=extra)\n"
        "    return m.state_dict(), extra\n"
        "(sa, ea), (sb, eb) = load(sys.argv[1]), load(sys.argv[2])\n"
        "same = ea == eb and sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)\n"
        "print('same' if same else 'DIFFERENT', sorted(ea))\n"
    )
    res = subprocess.run([sys.executable, "-c", code, str(a), str(b)], capture_output=True, text=True, timeout=600)
    return (res.stdout.strip() or res.stderr.strip().splitlines()[-1])[:200]


def main() -> int:
    """Run the survey and print the table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zoo", type=Path, required=True, help="the models/ folder of a model-zoo checkout")
    ap.add_argument("--work", type=Path, required=True, help="scratch folder for the copies")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--only", nargs="*", help="bundle names")
    args = ap.parse_args()
    rows = []
    for bundle in sorted(p for p in args.zoo.iterdir() if (p / "docs" / "README.md").is_file()):
        if args.only and bundle.name not in args.only:
            continue
        for n, (command, argv, line) in enumerate(readme_commands(bundle)):
            if line.startswith("torchrun"):
                rows.append((bundle.name, line, "-", "-", "-", "-", "torchrun with GPUs (nproc_per_node=gpu)"))
                continue
            if re.search(r"<[^>]*>", line) or "/path/to" in line:
                rows.append((bundle.name, line, "-", "-", "-", "-", "placeholder in the command (<...>, /path/to)"))
                continue
            results = {}
            for module in ("monai.bundle", "hpc_runner"):
                copy = args.work / f"{module}-{n}" / bundle.name
                shutil.rmtree(copy, ignore_errors=True)
                shutil.copytree(bundle, copy)
                weights = make_weights(copy, argv)
                results[module] = (*run(module, command, argv, copy, args.timeout), copy)
                print(f"{bundle.name} {command} {module}: exit {results[module][0]} in {results[module][1]:.1f} s "
                      f"({weights}) {results[module][2]}", file=sys.stderr, flush=True)
            note = weights
            out = _arg(argv, "filepath")
            if command == "ckpt_export" and out and all(r[0] == 0 for r in results.values()):
                ts = out if Path(out).suffix else out + ".ts"
                note += "; .ts " + same_torchscript(results["monai.bundle"][3] / ts, results["hpc_runner"][3] / ts)
            whys = {m: r[2] for m, r in results.items() if r[0] != 0}
            if whys:
                note += "; " + "; ".join(f"{m}: {w}" for m, w in whys.items())
            m_, h_ = results["monai.bundle"], results["hpc_runner"]
            rows.append((bundle.name, line, m_[0], f"{m_[1]:.1f}", h_[0], f"{h_[1]:.1f}", note))
    print("| bundle | command | MONAI exit | MONAI s | hpc-runner exit | hpc-runner s | notes |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        cells = [str(c).replace("|", "\\|") for c in row]
        cells[1] = f"`{cells[1]}`"
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Helpers of the report tests (imported by name: pytest's importlib mode puts no test folder on sys.path)."""

from __future__ import annotations

import html
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from warm_python import WARM

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "bundles" / "synthetic_seg"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
)


def tiny_overrides(dataset_dir: Path) -> list[str]:
    """Overrides that make the example bundle train in about a second on one CPU."""
    return ["--dataset_dir", str(dataset_dir), "--num_train", "4", "--num_val", "2", "--image_size", "16",
            "--max_epochs", "2", "--val_interval", "1", "--batch_size", "2"]


def subprocess_env() -> dict[str, str]:
    """The environment for ``python -m hpc_runner``: no HPCR__/SLURM job variables, one thread per op."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HPCR__", "SLURM_JOB", "SLURM_ARRAY"))}
    env["OMP_NUM_THREADS"] = "1"
    return env


def hpc_runner(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run the CLI in a new process, as a user would."""
    return WARM.run("hpc_runner", list(args), cwd=cwd, env=subprocess_env(), timeout=timeout)


def assert_png(path: Path, min_size: tuple[int, int] = (300, 200)) -> None:
    """The file is a PNG that PIL opens, at least ``min_size``, and not one flat colour."""
    from PIL import Image, ImageStat

    assert path.is_file() and path.stat().st_size > 1000, path
    with Image.open(path) as img:
        assert img.format == "PNG", path
        assert img.width >= min_size[0] and img.height >= min_size[1], (path, img.size)
        stddev = ImageStat.Stat(img.convert("L")).stddev[0]
    assert stddev > 5, f"{path} looks blank (grey-level stddev {stddev:.2f})"


@dataclass
class Chromium:
    """Headless Chromium, no network, a private profile."""

    binary: str
    profile: Path

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        cmd = [self.binary, *CHROMIUM_FLAGS, f"--user-data-dir={self.profile}", *args]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, f"{' '.join(cmd)} exited {res.returncode}: {res.stderr[-2000:]}"
        return res

    def screenshot(self, page: Path, out: Path, size: str = "1200,900", fragment: str = "") -> Path:
        """Render ``page`` and write a PNG screenshot of the window."""
        self._run(f"--screenshot={out}", f"--window-size={size}", page.resolve().as_uri() + fragment)
        return out

    def dom(self, page: Path, fragment: str = "") -> str:
        """Return the DOM after the page's scripts ran (``fragment``, e.g. ``#sort=-val_dice``, is in the URL)."""
        return self._run("--dump-dom", page.resolve().as_uri() + fragment).stdout


# Appended to a copy of a page: once it has loaded, the top of each <section> (page coordinates) and every
# image's natural width (0: it did not decode) are written into an attribute that --dump-dom shows.
LAYOUT_PROBE = """<script>window.addEventListener('load',function(){var out={sections:{},images:[]};
Array.prototype.forEach.call(document.querySelectorAll('section[id]'),function(s){
 out.sections[s.id]=s.getBoundingClientRect().top+window.scrollY;});
Array.prototype.forEach.call(document.images,function(i){out.images.push([i.alt,i.naturalWidth]);});
document.body.setAttribute('data-layout',JSON.stringify(out));});</script>"""


def page_layout(chromium: Chromium, page: Path, size: str = "1200,900") -> dict:
    """Return where Chromium laid out ``page``: {"sections": {id: top px}, "images": [[alt, naturalWidth]]}."""
    probe = page.with_name(f".layout-{page.name}")  # beside the page: the same relative links
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", LAYOUT_PROBE + "</body>"), encoding="utf-8")
    try:
        dom = chromium._run(f"--window-size={size}", "--dump-dom", probe.resolve().as_uri()).stdout
    finally:
        probe.unlink()
    start = dom.index('data-layout="') + len('data-layout="')
    return json.loads(html.unescape(dom[start : dom.index('"', start)]))


def find_chromium() -> str | None:
    """Return the Chromium binary ($HPCR_CHROMIUM, then the usual names on PATH), or None."""
    if os.environ.get("HPCR_CHROMIUM"):
        return os.environ["HPCR_CHROMIUM"]
    return next((p for p in (shutil.which(n) for n in CHROMIUM_NAMES) if p), None)

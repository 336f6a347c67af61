"""The report of one real run dir: valid PNGs, an escaped self-contained page, Chromium renders and sorts it.

The page reads top down as a user reads it (issue 35): the curves and the hyper-parameters, a validation slice,
then where the time went; the count that ``report`` prints is the number of PNGs in plots/.
"""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from report_helpers import assert_png, hpc_runner, page_layout

from hpc_runner.pages.bottleneck import analyse
from hpc_runner.records.metrics_log import read_metrics
from hpc_runner.records.rundir import VAL_SAMPLE_FILE
from hpc_runner.report.build import build_report


def _rows(dom: str, table_id: str) -> list[list[str]]:
    body = dom[dom.index(f'<table id="{table_id}"') :]
    body = body[body.index("<tbody>") : body.index("</tbody>")]
    return [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", body, re.S)]


def test_run_report_plots_and_page(report_run: Path) -> None:
    report = build_report(report_run)
    assert report.kind == "run" and report.html == report_run / "report.html"
    names = ["loss.png", "val_sample.png", "timeline.png", "transforms.png"]
    assert [p.name for p in report.pngs] == names
    assert sorted(p.name for p in (report_run / "plots").iterdir()) == sorted(names)
    for png in report.pngs:
        assert_png(png, (900, 300))
    text = report.html.read_text(encoding="utf-8")
    assert text.count("data:image/png;base64,") == len(names)
    for name in names:  # each plot is also listed under Files
        assert f'<a href="plots/{name}">plots/{name}</a>' in text
    assert not re.search(r"""(src|href)=["']https?://""", text), "the page must not load anything from outside"
    summary = json.loads((report_run / "summary.json").read_text())
    assert html.escape(summary["bottleneck"]["verdict"]) in text
    for o in yaml.safe_load((report_run / "overrides.yaml").read_text()):
        assert f"<td>{html.escape(o['id'])}</td>" in text
    # relative links, URL-quoted: the run dir's name has a space
    assert '<a href="config.yaml">config.yaml</a>' in text and '<a href="log.txt">' in text
    assert "hpc-runner rerun &#x27;" in text  # the quoted path of the dir with a space


def test_hyper_parameters_name_where_in_the_config_they_were_found(report_run: Path) -> None:
    text = build_report(report_run).html.read_text(encoding="utf-8")
    rows = {row[0]: row[1:] for row in _rows(text, "hyperparams")}
    assert rows["learning rate"] == ["0.002", "optimizer::lr -&gt; learning_rate"]
    assert rows["batch size"] == ["2", "train_loader::batch_size -&gt; batch_size"]
    assert rows["epochs"] == ["2", "trainer::max_epochs -&gt; max_epochs"]
    assert rows["network"][0].startswith("UNet(spatial_dims=3, in_channels=1, out_channels=2, channels=[8, 16, 32")
    assert rows["optimizer"] == ["torch.optim.Adam", "trainer::optimizer -&gt; optimizer"]
    assert rows["seed"] == ["0", "trainer::seed -&gt; seed"]


def test_the_last_validation_left_one_small_slice(report_run: Path) -> None:
    import numpy as np

    path = report_run / VAL_SAMPLE_FILE
    assert 0 < path.stat().st_size < 8192
    with np.load(path, allow_pickle=False) as sample:
        assert sample["image"].shape == sample["label"].shape == sample["prediction"].shape == (16, 16)
        assert int(sample["epoch"]) == 1 and list(sample["shape"]) == [16, 16, 16]  # the second (last) epoch
        assert set(np.unique(sample["label"])) == {0, 1}


def test_a_run_without_validation_says_so_in_one_line(run_copy: Path) -> None:
    kept = [r for r in read_metrics(run_copy / "metrics.jsonl") if r.get("kind") != "val"]
    (run_copy / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    (run_copy / VAL_SAMPLE_FILE).unlink()
    report = build_report(run_copy)  # the copy's plots/ has the val_sample.png of the first report
    text = report.html.read_text(encoding="utf-8")
    assert "No validation in this run" in text and 'alt="validation sample"' not in text
    assert sorted(p.name for p in (run_copy / "plots").iterdir()) == sorted(p.name for p in report.pngs)
    assert "val_sample.png" not in [p.name for p in report.pngs]


def test_report_escapes_recorded_text(run_copy: Path) -> None:
    overrides = yaml.safe_load((run_copy / "overrides.yaml").read_text())
    overrides.append({"id": "note", "value": "<script>alert('x')</script> & more", "source": "cli",
                      "origin": '--note"><b>', "replaced": None})
    (run_copy / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    text = build_report(run_copy).html.read_text(encoding="utf-8")
    assert "<script>alert" not in text and '"><b>' not in text
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; more" in text
    assert text.count("<script>") == 1  # only the page's own sorting script


def test_report_of_a_run_still_going(run_copy: Path) -> None:
    """No summary.json yet: the verdict is computed from the iterations logged so far."""
    (run_copy / "summary.json").unlink()
    records = read_metrics(run_copy / "metrics.jsonl")
    kept = records[:3]  # two iterations and the first validation
    (run_copy / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept) + '{"kind": "it')
    iters = [r for r in kept if r["kind"] == "iter"]
    verdict = analyse([r["data_s"] for r in iters], [r["compute_s"] for r in iters]).verdict
    report = build_report(run_copy)
    for png in report.pngs:
        assert_png(png)
    assert html.escape(verdict) in report.html.read_text(encoding="utf-8")


def test_report_names_the_error_of_a_failed_run(run_copy: Path) -> None:
    rec = yaml.safe_load((run_copy / "run.yaml").read_text())
    rec.update(status="failed", error={"type": "ValueError", "message": "batch_size <0>", "id": "train_loader"})
    (run_copy / "run.yaml").write_text(yaml.safe_dump(rec))
    (run_copy / "error.txt").write_text("Traceback ...\nValueError: batch_size <0>\n")
    text = build_report(run_copy).html.read_text(encoding="utf-8")
    assert "ValueError: batch_size &lt;0&gt; (at id &#x27;train_loader&#x27;)" in text
    assert '<a href="error.txt">error.txt</a>' in text


def test_cli_report_and_no_matplotlib_at_cli_import(run_copy: Path, tmp_path: Path) -> None:
    (run_copy / "plots" / "transforms.png").unlink()  # written again: counted once, as what this report wrote
    out = hpc_runner("report", str(run_copy), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "report.html" in out.stdout and (run_copy / "plots" / "timeline.png").is_file()
    printed = int(re.search(r"wrote (\d+) PNG plot\(s\)", out.stdout)[1])
    assert printed == len(list((run_copy / "plots").glob("*.png"))) == 4
    bad = hpc_runner("report", str(tmp_path / "nowhere"), cwd=tmp_path)
    assert bad.returncode == 2 and "not a run dir or a sweep dir" in bad.stderr
    probe = "import sys, hpc_runner.cli as c; c.build_parser(); print('matplotlib' in sys.modules)"
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert res.stdout.strip() == "False", res.stdout + res.stderr


@pytest.mark.slow
def test_chromium_renders_and_sorts_the_run_page(report_run: Path, chromium, tmp_path: Path) -> None:
    page = build_report(report_run).html
    shot = chromium.screenshot(page, tmp_path / "shot.png")
    assert_png(shot, (1200, 900))
    # top down as a user reads it: curves and set-up, the validation slice, then the profiling
    layout = page_layout(chromium, page)
    tops = layout["sections"]
    assert tops["results"] < tops["sample"] < tops["profiling"], tops
    assert tops["results"] < 300, "the curves start near the top of the page"
    widths = dict(layout["images"])
    assert list(widths) == ["loss", "validation sample", "timeline", "transforms"]
    assert all(w > 0 for w in widths.values()), f"an image did not decode: {widths}"
    ids = [re.sub(r"<.*?>", "", row[0]) for row in _rows(page.read_text(encoding="utf-8"), "overrides")]
    assert "dataset_dir" in ids and "output_dir" in ids
    # #sort=-id clicks the "id" header twice: descending; the DOM is dumped after the page's script ran
    dom = chromium.dom(page, "#sort=-id")
    assert dom.count("<img") == 4 and "data:image/png;base64," in dom
    got = [re.sub(r"<.*?>", "", row[0]) for row in _rows(dom, "overrides")]
    assert got == sorted(ids, reverse=True) and got != ids
    assert 'aria-sort="descending"' in dom

"""The study report in a real browser (Debian's Chromium, headless): it renders, its table
rows and plots are in the DOM, and the screenshot is not blank. The runs are SYNTHETIC
(made-up numbers written by this test, labelled estimated), so nothing here is a result."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np

from greenckpt.study.summary import write_report
from tests.conftest import debian_tool


def synthetic_study(out: Path) -> None:
    """Two cells x 3 blocks of made-up runs, each with a tiny made-up run report."""
    out.mkdir()
    identity = {
        "name": "synthetic",
        "mirrors": "a test <b>fixture</b>",
        "order": "blocks",
        "repeats": 3,
        "factors": {"checkpoint": ["none", "ckp(1,2,3,4)"]},
        "baseline": {"checkpoint": "none"},
    }
    (out / "study.json").write_text(json.dumps(identity))
    lines = []
    for block in range(3):
        for i, level in enumerate(("none", "ckp(1,2,3,4)")):
            run = f"r{block * 2 + i + 1:04d}"
            seconds = (10.0 + block * 0.1) * (1.1 if i else 1.0)
            report = out / "runs" / run / "report"
            report.mkdir(parents=True)
            t = np.linspace(0, seconds, 50)
            records = [{"kind": "compute", "start_s": 0.0, "end_s": seconds}]
            if i:
                records.append({"kind": "checkpoint", "start_s": 2.0, "end_s": 3.0})
            doc = {"trace": {"source": "estimated", "t_s": t.tolist(),
                             "power_w": (8 + np.sin(t)).tolist()}, "records": records}  # fmt: skip
            (report / "report.json").write_text(json.dumps(doc))
            by_kind = {"compute": {"energy_j": 80.0, "seconds": 10.0, "count": 1}}
            if i:
                by_kind["checkpoint"] = {"energy_j": 8.0, "seconds": 1.0, "count": 2}
            metrics = {"seconds": seconds, "energy_j": 8.0 * seconds, "mean_power_w": 8.0,
                       "power_source": "estimated", "epe_w": 8.0 + i, "cpu_s": 2 * seconds,
                       "by_kind": by_kind, "bytes_written": 2**28 if i else 0,
                       "bytes_read": 0}  # fmt: skip
            lines.append(json.dumps({"run": run, "cell": f"checkpoint={level}", "block": block,
                                     "repeat": block, "factors": {"checkpoint": level},
                                     "ok": True, "report": f"runs/{run}/report",
                                     "metrics": metrics}))  # fmt: skip
    (out / "runs.jsonl").write_text("\n".join(lines) + "\n")


def test_the_report_renders_in_chromium(tmp_path: Path) -> None:
    chromium = debian_tool("chromium", "chromium")
    out = tmp_path / "study"
    synthetic_study(out)
    page = write_report(out)
    text = page.read_text()
    assert "<b>fixture</b>" not in text and "&lt;b&gt;fixture&lt;/b&gt;" in text  # escaped
    for fetch in ('src="http', "src='http", 'href="http', "url(http", "<script", "<link"):
        assert fetch not in text  # nothing to fetch: the page is self-contained
    shot = tmp_path / "shot.png"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    url = page.resolve().as_uri()
    subprocess.run([chromium, *flags, f"--screenshot={shot}", "--window-size=1200,2400", url],
                   capture_output=True, timeout=180, check=True)  # fmt: skip
    dumped = [chromium, *flags, "--dump-dom", url]
    dom = subprocess.run(dumped, capture_output=True, text=True, timeout=180, check=True).stdout
    assert dom.count('<tr class="cell">') == 4  # measured (time, CPU-s), then estimated energy
    assert dom.index("Time and CPU-seconds (measured)") < dom.index("Energy and power (estimated)")
    assert dom.count('<figure class="plot">') == 6 and dom.count("<svg") >= 6
    assert "+10.0 %" in dom  # time of the checkpointed cell vs the baseline, paired by block
    pixels = mpimg.imread(shot)
    assert pixels.shape[0] == 2400 and pixels.shape[1] == 1200
    ink = (pixels[..., :3].mean(axis=2) < 0.9).mean()
    assert ink > 0.02  # text, tables and plots: far from a blank page
    assert len(np.unique(pixels[..., :3].reshape(-1, 3).round(2), axis=0)) > 20  # colours

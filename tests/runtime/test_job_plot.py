"""The job's power plot (issue 15 item 2): job-power.png is written; the outlier node — the
one whose series is unlike the others' — is the one drawn and named in the legend; the axes
say the power's source and the title SYNTHETIC for a fake platform; a report without any
node's series is refused with a one-line error."""

from __future__ import annotations

from pathlib import Path

import pytest

from greenckpt.errors import InvalidValueError
from greenckpt.report.job_plot import job_figure, plot_job
from greenckpt.runtime.job import JobPhase, NodeView
from greenckpt.runtime.job_report import JobReport

ODD = 2


def _view(node: int, *, series: bool = True) -> NodeView:
    watts = [300.0 + 50.0 * (i % 2) for i in range(40)] if node == ODD else [100.0] * 40
    summary = {
        "power": {"source": "estimated", "meters": ["estimator"]},
        "total": {"seconds": 40.0, "energy_j": sum(watts), "source": "estimated"},
        "useful_compute_s": 30.0,
        "synthetic": True,
        "records": 4,
    }
    return NodeView(
        node,
        state="finished",
        host=f"h{node}",
        power_source="estimated",
        summary=summary,
        series={"t_s": [float(i + 1) for i in range(40)], "power_w": watts, "source": "estimated"}
        if series
        else None,
        t0_unix=1000.0,
    )


def _report(*, series: bool = True) -> JobReport:
    phase = JobPhase("checkpoint", 0)
    for _ in range(4):
        phase.add({"start_s": 10.0, "end_s": 12.0, "node_energy_j": 200.0}, 1000.0)
    return JobReport.build(
        job_id="plot-1",
        launcher="test",
        command=["app"],
        nodes=[_view(k, series=series) for k in range(4)],
        phases=[phase],
        started_unix=1000.0,
        ended_unix=1041.0,
    )


def _texts(report: JobReport) -> list[str]:
    fig = job_figure(report)
    texts = [fig.get_suptitle()]
    for ax in fig.axes:
        texts.append(ax.get_ylabel())
        legend = ax.get_legend()
        texts += [t.get_text() for t in legend.get_texts()] if legend else []
    return texts


def test_the_png_is_written_and_the_outlier_node_is_the_odd_one(tmp_path: Path) -> None:
    report = _report()
    assert report.doc["series"]["outlier_node"] == ODD
    path = plot_job(report, tmp_path / "job-power.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    texts = _texts(report)
    outliers = [t for t in texts if "outlier" in t]
    assert outliers and all(t.startswith(f"node {ODD}:") for t in outliers)
    assert any(t.startswith("job sum (estimated)") for t in texts)
    assert any(t == "job checkpoint" for t in texts)
    assert all("estimated" in t for t in texts if t.startswith(("job power", "node power")))
    assert texts[0].startswith("SYNTHETIC") and "4 node(s)" in texts[0]


def test_the_outlier_line_is_the_odd_nodes_series() -> None:
    fig = job_figure(_report())
    lines = [ln for ln in fig.axes[1].get_lines() if "outlier" in str(ln.get_label())]
    assert len(lines) == 1
    ys = [y for y in lines[0].get_ydata() if y == y]  # noqa: PLR0124 - NaN: not covered
    assert min(ys) >= 300.0  # the odd node's power, never the others' 100 W


def test_no_series_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(InvalidValueError, match="no power series"):
        plot_job(_report(series=False), tmp_path / "job-power.png")
    assert not (tmp_path / "job-power.png").exists()

"""The job's power plot (issue 15 item 2): job-power.png is written; the outlier node — the
one whose series is unlike the others' — is the one drawn and named in the legend; the axes
say the power's source and the title SYNTHETIC for a fake platform; a report without any
node's series is refused with a one-line error."""

from __future__ import annotations

from pathlib import Path

import pytest

from greenckpt.errors import InvalidValueError
from greenckpt.report.job_plot import job_figure, plot_job
from greenckpt.report.job_text import render_job_text
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


def _one_machine(nodes: int, host_id: str | None) -> JobReport:
    views = [_view(k) for k in range(nodes)]
    for v in views:
        v.host_id = host_id
    return _build(views, [])


def _build(views: list[NodeView], phases: list[JobPhase]) -> JobReport:
    return JobReport.build(
        job_id="plot-2",
        launcher="test",
        command=["app"],
        nodes=views,
        phases=phases,
        started_unix=1000.0,
        ended_unix=1041.0,
    )


def test_nodes_that_are_one_machine_count_its_energy_once() -> None:
    """Three Slurm nodes on one host (own host names, one machine id and boot id): their
    meters all read the machine, so the job total is the largest figure, not the sum."""
    shared = _one_machine(4, "abc123")
    energies = [r["energy_j"] for r in shared.doc["nodes"]]
    assert shared.doc["total"]["energy_j"] == pytest.approx(max(energies))
    assert shared.doc["machines"] == 1 and shared.doc["series"]["machines"] == 1
    assert max(x for x in shared.doc["series"]["sum_w"] if x is not None) <= 350.0 + 1e-6
    assert any("nodes 0-3 are one machine (host id abc123" in n for n in shared.doc["notes"])
    apart = _one_machine(4, None)  # no host id: each node its own machine
    assert apart.doc["total"]["energy_j"] == pytest.approx(sum(energies))
    assert apart.doc["machines"] == 4 and not any("one machine" in n for n in apart.doc["notes"])


@pytest.mark.parametrize("nodes", [1, 2])
def test_one_or_two_nodes_have_no_outlier(nodes: int) -> None:
    report = _one_machine(nodes, None)
    assert report.doc["series"]["outlier_node"] is None
    assert not any("outlier" in t for t in _texts(report))
    assert "outlier" not in render_job_text(report)
    assert "job W = job energy / wall time" in render_job_text(report)


def test_the_job_plot_shades_compute_and_tells_levels_apart() -> None:
    phases = []
    for ordinal, (kind, level, start) in enumerate(
        [("compute", None, 1.0), ("checkpoint", 1, 10.0), ("checkpoint", 4, 20.0)]
    ):
        phase = JobPhase(kind, ordinal)
        record = {"start_s": start, "end_s": start + 2.0, "node_energy_j": 1.0, "level": level}
        phase.add(record, 1000.0)
        phases.append(phase)
    texts = _texts(_build([_view(k) for k in range(3)], phases))
    assert {"job compute", "job checkpoint L1", "job checkpoint L4"} <= set(texts)

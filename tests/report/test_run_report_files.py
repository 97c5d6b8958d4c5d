"""A run report shown and saved by report/: the text table, the plot and the three files,
from a hand-made report (no machine), and the fallback when the directory cannot be written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from greenckpt.report.run_files import write_report, write_report_safely
from greenckpt.report.run_plot import plot_run, run_figure
from greenckpt.report.run_text import render_run_text
from greenckpt.runtime.run_report import PhaseRecord, PowerTrace, RunReport

EST = "estimator/cpu"


def _record(index: int, kind: str, start: float, end: float, joules: float) -> PhaseRecord:
    return PhaseRecord(
        kind=kind,  # type: ignore[arg-type]
        index=index,
        start_s=start,
        end_s=end,
        energy_j={EST: joules},
        sources={EST: "estimated"},
        node_energy_j=joules,
        power_source="estimated",
        power_domains=(EST,),
        level=1 if kind == "checkpoint" else None,
        size=0 if kind == "compute" else 2**20,
    )


def _report(*, trace: bool = True) -> RunReport:
    records = [
        _record(0, "compute", 0.0, 4.0, 400.0),
        _record(1, "checkpoint", 4.0, 5.0, 80.0),
        _record(2, "compute", 5.0, 9.0, 400.0),
    ]
    power = PowerTrace((1.0, 5.0, 9.0), (100.0, 90.0, 100.0), "estimated", "cpu") if trace else None
    return RunReport.from_records(records, trace=power, synthetic=True, policy="profile")


def test_the_text_says_its_source_and_synthetic() -> None:
    text = render_run_text(_report())
    assert text.startswith("greenckpt run report (policy profile) [SYNTHETIC")
    assert "checkpoint" in text and "  L1" in text and "estimated, SYNTHETIC" in text
    assert "useful compute 8.000 s" in text


def test_the_figure_and_the_plot() -> None:
    (ax,) = run_figure(_report()).axes
    assert ax.get_title().startswith("SYNTHETIC (fake platform)")


def test_plot_refuses_other_formats(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"a \.png or \.svg file"):
        plot_run(_report(), tmp_path / "power.pdf")


def test_write_report_writes_the_three_files(tmp_path: Path) -> None:
    paths = write_report(_report(), tmp_path / "out")
    assert [p.name for p in paths] == ["report.json", "phases.csv", "power.png"]
    doc = json.loads(paths[0].read_text())
    assert doc["synthetic"] is True
    assert [p.name for p in write_report(_report(trace=False), tmp_path / "bare")] == [
        "report.json",
        "phases.csv",
    ]


def test_write_report_safely_falls_back_to_a_temporary_directory(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    paths, problem = write_report_safely(_report(trace=False), blocked / "out")
    assert problem is not None and "could not be written" in problem
    assert paths and all(p.exists() for p in paths)
    assert paths[0].parent != blocked / "out"
    for p in paths:
        p.unlink()
    paths[0].parent.rmdir()

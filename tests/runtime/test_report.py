"""The run report on hand-made records whose totals, EPE and wu2018 Equation-2 percentages are
computed by hand below, and on a short run of the runtime over a SYNTHETIC platform.

Every figure here is SYNTHETIC (made up or produced by fake meters); none is a measurement.
"""

from __future__ import annotations

import csv
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from greenckpt.platform.meters.base import Source
from greenckpt.platform.sampler import Series
from greenckpt.report.run_plot import plot_run
from greenckpt.report.run_text import render_run_text
from greenckpt.runtime import Node, Settings
from greenckpt.runtime.run_report import (
    BaselineRun,
    PhaseRecord,
    PowerTrace,
    RunKind,
    RunReport,
    load_report,
    percent_difference,
)
from greenckpt.runtime.session import Runtime
from tests.platform import fake_power as fp
from tests.platform.fake_cpu import FakeSysfsRoot, build_tree

EST = "estimator/cpu"


def rec(
    index: int,
    kind: RunKind,
    start: float,
    end: float,
    joules: float | None,
    *,
    source: Source = "estimated",
    level: int | None = None,
    background: bool = False,
    ok: bool = True,
    settings: Settings | None = None,
    gaps: int = 0,
) -> PhaseRecord:
    """A SYNTHETIC record on the estimator's one domain."""
    return PhaseRecord(
        kind=kind,
        index=index,
        start_s=start,
        end_s=end,
        energy_j={} if joules is None else {EST: joules},
        sources={} if joules is None else {EST: source},
        node_energy_j=joules,
        power_source=None if joules is None else source,
        power_domains=() if joules is None else (EST,),
        level=level,
        path=None if kind in ("compute", "rework") else "/ckpt",
        size=0 if kind in ("compute", "rework") else 2**30,
        settings=settings,
        ok=ok,
        background=background,
        gaps={} if joules is None else {EST: gaps},
    )


CKPT_SETTINGS = Settings(
    io_processes=2,
    source="profile lookup",
    frequency_hz=1_400_000_000,
    notes=("the profile is SYNTHETIC",),
)


def hand_records() -> list[PhaseRecord]:
    """A 40 s run: 30 s compute at 100 W, checkpoints at L1 (2 s, 150 W) and L2 (3 s, 120 W),
    a 1 s restart (100 J), 4 s of rework (400 J), and a background flush (8 s, 800 J) that
    overlaps compute. Foreground energy 1000+300+1000+360+100+400+1000 = 4160 J."""
    return [
        rec(0, "compute", 0.0, 10.0, 1000.0),
        rec(1, "checkpoint", 10.0, 12.0, 300.0, level=1, settings=CKPT_SETTINGS),
        rec(2, "compute", 12.0, 22.0, 1000.0),
        rec(3, "flush", 12.0, 20.0, 800.0, level=4, background=True),
        rec(4, "checkpoint", 22.0, 25.0, 360.0, level=2, ok=False),
        rec(5, "restart", 25.0, 26.0, 100.0, level=1),
        rec(6, "rework", 26.0, 30.0, 400.0),
        rec(7, "compute", 30.0, 40.0, 1000.0),
    ]


BASELINE = BaselineRun(
    "performance", seconds=36.0, energy_j=4000.0, source="estimated", epe_w=125.0
)


@pytest.fixture
def report() -> RunReport:
    return RunReport.from_records(
        reversed(hand_records()),  # sorted by start time whatever the order given
        policy="profile",
        predicted_epe=130.0,
        predicted_source="synthetic",
        baselines=[BASELINE],
        power_scope="CPU, estimated from utilisation and TDP (not a measurement)",
    )


# ---------------------------------------------------------------------------- figures


def test_equation_2_is_wu2018s_percent_difference() -> None:
    # wu2018 Table 5: the original HDC run took 1076 s; ckp(1,2,3,4) took 1.67 % longer.
    assert round(percent_difference(1094.0, 1076.0), 2) == 1.67
    assert percent_difference(90.0, 100.0) == pytest.approx(-10.0)
    assert percent_difference(110.0, 100.0) == pytest.approx(10.0)
    assert math.isnan(percent_difference(1.0, 0.0))


def test_totals_per_kind_and_level_on_hand_computed_numbers(report: RunReport) -> None:
    assert [r.index for r in report.records] == [0, 1, 2, 3, 4, 5, 6, 7]
    assert report.total_seconds == pytest.approx(40.0)  # background flush not added
    assert report.total_energy_j == pytest.approx(4160.0)
    assert report.mean_power_w == pytest.approx(104.0)
    kinds = report.by_kind()
    assert list(kinds) == ["compute", "rework", "checkpoint", "restart", "flush"]
    c = kinds["compute"]
    assert (c.count, c.seconds, c.energy_j, c.mean_power_w) == (3, 30.0, 3000.0, 100.0)
    k = kinds["checkpoint"]
    assert (k.count, k.failed, k.seconds, k.energy_j, k.mean_power_w) == (2, 1, 5.0, 660.0, 132.0)
    assert kinds["flush"].background and kinds["flush"].energy_j == 800.0
    assert report.count("restart") == 1 and report.count("flush") == 1
    levels = {(t.kind, t.level): t for t in report.by_level()}
    assert set(levels) == {("checkpoint", 1), ("checkpoint", 2), ("restart", 1), ("flush", 4)}
    assert levels["checkpoint", 1].energy_j == 300.0 and levels["checkpoint", 1].seconds == 2.0
    assert levels["checkpoint", 2].mean_power_w == pytest.approx(120.0)
    assert all(t.source == "estimated" for t in kinds.values())


def test_observed_epe_counts_rework_as_useful_and_sits_next_to_the_prediction(
    report: RunReport,
) -> None:
    # issue 18 item 1: rework is the surviving copy of the work a failure lost (the lost copy
    # is a "lost" record, none here), so useful compute = 30 s compute + 4 s rework
    assert report.useful_seconds == pytest.approx(34.0)
    assert report.rework_seconds == pytest.approx(4.0)
    assert report.lost_seconds == 0.0
    assert report.observed_epe == pytest.approx(4160.0 / 34.0)
    assert report.epe_vs_predicted_pct == pytest.approx((4160.0 / 34.0 - 130.0) / 130.0 * 100)


def test_percentages_against_a_baseline_follow_equation_2(report: RunReport) -> None:
    (c,) = report.comparisons()
    assert c.baseline == "performance"
    assert c.runtime_pct == pytest.approx((40 - 36) / 36 * 100)  # +11.11 %
    assert c.energy_pct == pytest.approx((4160 - 4000) / 4000 * 100)  # +4.00 %
    assert c.power_pct == pytest.approx((104 - 4000 / 36) / (4000 / 36) * 100)  # -6.40 %
    assert c.epe_pct == pytest.approx((4160 / 34 - 125) / 125 * 100)  # -2.12 %
    assert c.source == "estimated" and not c.synthetic
    itself = RunReport.from_records(
        hand_records(), baselines=[BaselineRun.from_report(report, "same")]
    ).comparisons()[0]
    assert (itself.runtime_pct, itself.energy_pct, itself.power_pct, itself.epe_pct) == (
        0.0,
        0.0,
        0.0,
        0.0,
    )


def test_measured_against_estimated_is_labelled_estimated() -> None:
    measured = [rec(0, "compute", 0.0, 10.0, 500.0, source="measured")]
    r = RunReport.from_records(measured, baselines=[BASELINE])
    assert r.power_source == "measured"
    assert r.comparisons()[0].source == "estimated"


def test_overlaps_gaps_and_missing_node_figures_are_stated() -> None:
    records = [
        rec(0, "compute", 0.0, 10.0, 1000.0),
        rec(1, "checkpoint", 9.0, 12.0, 300.0, gaps=2),  # overlaps compute by 1 s
    ]
    r = RunReport.from_records(records)
    assert any("overlapped for 1.000 s" in n for n in r.notes)
    assert any("1 record(s) include failed or degraded" in n for n in r.notes)
    bare = RunReport.from_records([rec(0, "compute", 0.0, 5.0, None)])
    assert bare.total_energy_j is None and bare.observed_epe is None
    assert bare.by_kind()["compute"].energy_j is None
    assert "n/a" in render_run_text(bare)


def test_records_refuse_impossible_values() -> None:
    with pytest.raises(ValueError, match="before it starts"):
        rec(0, "compute", 5.0, 4.0, 1.0)
    with pytest.raises(ValueError, match="phase kind"):
        rec(0, "idle", 0.0, 1.0, 1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lasts > 0"):
        BaselineRun("x", seconds=0.0, energy_j=1.0, source="measured")


# ---------------------------------------------------------------------------- JSON and CSV


def test_json_has_every_figure_with_its_source_and_reads_back(
    report: RunReport, tmp_path: Path
) -> None:
    path = report.write_json(tmp_path / "out" / "report.json")
    doc: dict[str, Any] = json.loads(path.read_text())  # strict JSON: parses everywhere
    assert doc["format"] == "greenckpt-run-report" and doc["synthetic"] is False
    assert doc["total"] == {
        "seconds": 40.0,
        "energy_j": 4160.0,
        "mean_power_w": 104.0,
        "source": "estimated",
    }
    assert doc["useful_compute_s"] == 34.0 and doc["rework_s"] == 4.0 and doc["lost_s"] == 0.0
    assert doc["epe"]["observed_w"] == pytest.approx(4160 / 34)
    assert doc["epe"]["observed_source"] == "estimated"
    assert (doc["epe"]["predicted_w"], doc["epe"]["predicted_source"]) == (130.0, "synthetic")
    assert doc["by_kind"]["checkpoint"]["energy_j"] == 660.0
    assert doc["by_kind"]["checkpoint"]["source"] == "estimated"
    assert doc["comparisons"][0]["energy_pct"] == pytest.approx(4.0)
    assert "wu2018 Eq. 2" in doc["comparisons"][0]["equation"]
    assert len(doc["records"]) == 8
    first_ckpt = doc["records"][1]
    assert first_ckpt["kind"] == "checkpoint" and first_ckpt["power_source"] == "estimated"
    assert first_ckpt["domains"][EST] == {"joules": 300.0, "source": "estimated", "gaps": 0}
    assert first_ckpt["settings"]["frequency_hz"] == 1_400_000_000
    again = load_report(path)
    assert again.records == report.records
    assert render_run_text(again) == render_run_text(report)
    assert again.by_level() == report.by_level()


def test_json_writes_undefined_figures_as_null(tmp_path: Path) -> None:
    r = RunReport.from_records(
        [rec(0, "compute", 0.0, 0.0, 0.0)],
        baselines=[BaselineRun("zero", seconds=1.0, energy_j=0.0, source="estimated")],
    )
    doc = json.loads(r.to_json())
    assert doc["records"][0]["mean_power_w"] is None
    assert doc["epe"]["observed_w"] is None
    assert doc["comparisons"][0]["energy_pct"] is None  # a zero baseline has no percentage


def test_bad_report_files_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text('{"format": "something else"}')
    with pytest.raises(ValueError, match="not a greenckpt run report"):
        load_report(path)
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not JSON"):
        load_report(path)


def test_csv_has_one_row_per_record_with_settings_and_labels(
    report: RunReport, tmp_path: Path
) -> None:
    path = report.write_csv(tmp_path / "report.csv")
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["kind"] for r in rows] == [
        "compute",
        "checkpoint",
        "compute",
        "flush",
        "checkpoint",
        "restart",
        "rework",
        "compute",
    ]
    assert all(r["power_source"] == "estimated" for r in rows)
    ckpt = rows[1]
    assert (ckpt["level"], ckpt["frequency_hz"], ckpt["io_processes"]) == ("1", "1400000000", "2")
    assert ckpt["settings_source"] == "profile lookup" and ckpt["codec"] == "none"
    assert "SYNTHETIC" in ckpt["notes"]
    assert float(ckpt["node_energy_j"]) == 300.0 and float(ckpt["mean_power_w"]) == 150.0
    assert float(ckpt[f"energy_j[{EST}]"]) == 300.0
    assert rows[3]["background"] == "1" and rows[4]["ok"] == "0"
    assert rows[0]["frequency_hz"] == "" and rows[0]["settings_source"] == ""
    synthetic = RunReport.from_records(hand_records(), synthetic=True)
    with synthetic.write_csv(tmp_path / "s.csv").open(newline="") as fh:
        assert all("SYNTHETIC" in r["power_source"] for r in csv.DictReader(fh))


# ---------------------------------------------------------------------------- text


def _row(text: str, name: str) -> list[str]:
    line = next(ln for ln in text.splitlines() if ln.startswith(name + " "))
    return line.split()


def test_text_table_shows_count_seconds_joules_watts_and_source(report: RunReport) -> None:
    text = render_run_text(report)
    header = ["phase", "count", "bytes", "seconds", "joules", "W", "source"]
    assert _row(text, "phase") == header
    assert _row(text, "compute") == ["compute", "3", "30.000", "3000.0", "100.0", "estimated"]
    assert _row(text, "checkpoint")[:9] == [
        "checkpoint",
        "2",
        "(1",
        "failed)",
        "2",
        "GiB",
        "5.000",
        "660.0",
        "132.0",
    ]
    assert _row(text, "  L2") == [
        "L2",
        "1",
        "(1",
        "failed)",
        "1",
        "GiB",
        "3.000",
        "360.0",
        "120.0",
        "estimated",
    ]
    assert "background" in next(ln for ln in text.splitlines() if ln.startswith("flush"))
    assert _row(text, "run total")[2:] == ["40.000", "4160.0", "104.0", "estimated"]
    assert "EPE observed 122.35 W (estimated); predicted 130.00 W (model, synthetic" in text
    assert "vs baseline performance (wu2018 Eq. 2, estimated): runtime +11.11 %" in text
    assert "energy +4.00 %" in text and "node power -6.40 %" in text
    synthetic = render_run_text(RunReport.from_records(hand_records(), synthetic=True))
    assert "SYNTHETIC" in synthetic.splitlines()[0]
    assert _row(synthetic, "compute")[-2:] == ["estimated,", "SYNTHETIC"]


# ---------------------------------------------------------------------------- traces and plots


def hand_series() -> Series:
    """Cumulative joules of three overlapping SYNTHETIC domains; t = 2 read twice."""
    return Series(
        domains=("rapl/package-0", "rapl/dram-0", "rapl/core-0"),
        sources={
            "rapl/package-0": "measured",
            "rapl/dram-0": "measured",
            "rapl/core-0": "measured",
        },
        t_s=np.array([0.0, 1.0, 2.0, 2.0, 3.0]),
        unix=np.array([0.0, 1.0, 2.0, 2.0, 3.0]),
        energy_j=np.array(
            [[0, 0, 0], [100, 10, 50], [250, 20, 120], [250, 20, 120], [400, 30, 200]],
            dtype=np.float64,
        ),
        boundary=np.array([True, False, True, True, False]),
        held=np.zeros((5, 3), dtype=bool),
    )


def test_the_trace_sums_the_node_domains_of_the_samplers_series() -> None:
    trace = PowerTrace.from_series(hand_series(), ["rapl/package-0", "rapl/dram-0"], "CPU side")
    assert trace.t_s == (1.0, 2.0, 3.0)
    assert trace.watts == (110.0, 160.0, 160.0)  # core-0 is inside package-0: not added
    assert trace.source == "measured"


@pytest.mark.parametrize("suffix", [".png", ".svg"], ids=["png", "svg"])
def test_plots_are_written_with_labelled_phases(
    report: RunReport, tmp_path: Path, suffix: str
) -> None:
    trace = PowerTrace(
        t_s=tuple(float(t) for t in range(1, 41)),
        watts=tuple(100.0 + (t % 5) for t in range(1, 41)),
        source="estimated",
        scope="CPU",
    )
    with_trace = RunReport.from_records(report.records, trace=trace, policy="profile")
    path = plot_run(with_trace, tmp_path / f"power{suffix}")
    data = path.read_bytes()
    assert len(data) > 1000
    if suffix == ".png":
        assert data.startswith(b"\x89PNG")
    else:
        text = data.decode()
        assert "<svg" in text
        assert "power estimated" in text and "node power (estimated)" in text
        for label in ("checkpoint L1", "checkpoint L2", "restart L1", "rework", "flush L4"):
            assert label in text


def test_a_report_without_trace_plots_the_mean_power_per_phase(
    report: RunReport, tmp_path: Path
) -> None:
    synthetic = RunReport.from_records(report.records, synthetic=True)
    text = plot_run(synthetic, tmp_path / "p.svg").read_text()
    assert "mean power per phase (estimated, SYNTHETIC)" in text and "SYNTHETIC (fake" in text
    with pytest.raises(ValueError, match=r"\.png or \.svg"):
        plot_run(synthetic, tmp_path / "p.pdf")


# ---------------------------------------------------------------------------- from a run


def test_a_run_of_the_runtime_gives_a_complete_report(tmp_path: Path) -> None:
    root = FakeSysfsRoot(build_tree("vm-no-cpufreq", tmp_path / "vm"))
    node = Node(cpus=2, frequency_control=False, frequency_reason="cpufreq not available")

    class Defaults:  # SYNTHETIC policy
        name = "defaults"

        def decide(self, request: Any) -> Settings:
            return Settings(io_processes=2, source="defaults (test)")

    meter = fp.FakeMeter({"package-0": 50.0, "dram-0": 5.0}, name="rapl")
    rt = Runtime(
        Defaults(),
        root=root,
        meters=[meter],
        state_file=tmp_path / "s.json",
        node=node,
        rate_hz=200,
    )
    with rt:
        time.sleep(0.05)
        with rt.phase("checkpoint", path="/ckpt", size=2**20, level=1):
            time.sleep(0.03)
        time.sleep(0.05)
    report = rt.report(predicted_epe=60.0, predicted_source="synthetic", synthetic=True)
    assert [r.kind for r in report.records] == ["compute", "checkpoint", "compute"]
    assert report.total_energy_j == pytest.approx(sum(r.node_energy_j or 0 for r in report.records))
    assert report.observed_epe is not None and report.observed_epe > 55.0  # checkpoint on top
    assert report.trace is not None and len(report.trace.t_s) > 5
    assert all(t > 0 for t in report.trace.t_s)
    assert list(report.trace.t_s) == sorted(report.trace.t_s)
    assert np.median(report.trace.watts) == pytest.approx(55.0, rel=0.1)
    doc = json.loads(report.to_json())
    assert doc["synthetic"] is True and doc["policy"] == "defaults"
    assert doc["power"]["meters"] == ["rapl"] and doc["power"]["source"] == "measured"
    assert len(doc["trace"]["t_s"]) == len(report.trace.t_s)
    for suffix in (".png", ".svg"):
        assert plot_run(report, tmp_path / f"run{suffix}").stat().st_size > 1000
    text = render_run_text(report)
    assert "SYNTHETIC" in text and "no frequency control" in text
    assert root.log == []

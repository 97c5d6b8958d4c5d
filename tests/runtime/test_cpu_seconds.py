"""CPU-seconds in the run report, against a SYNTHETIC fake /proc/stat: a record's ``cpu_s`` is
the difference of the node's busy jiffies at its two boundaries, the totals per kind and the
run's add up, the text report shows them with their origin, and a report saved before they
were recorded still loads (and shows no CPU column). No figure here measures anything.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from greenckpt.platform.root import SysRoot
from greenckpt.report.run_text import render_run_text
from greenckpt.runtime import Node, PhaseRequest, Settings
from greenckpt.runtime.run_report import load_report
from greenckpt.runtime.session import Runtime
from greenckpt.testing import power as fp

MIB = 2**20
TICK = os.sysconf("SC_CLK_TCK")


class FixedPolicy:
    """A SYNTHETIC policy: two I/O processes, nothing else changed."""

    name = "fixed"

    def decide(self, request: PhaseRequest) -> Settings:
        return Settings(io_processes=2, source="fixed (test)")


def _runtime(root: Path, state: Path) -> Runtime:
    return Runtime(
        FixedPolicy(),
        root=SysRoot(root),
        meters=[fp.FakeMeter({"package-0": 100.0}, name="rapl")],
        control=False,
        state_file=state,
        node=Node(),
    )


def _run(tmp_path: Path) -> Runtime:
    """compute (busy 1000 -> 1300 jiffies), checkpoint (-> 1800), compute (-> 1900), a
    restart (-> 2600) and compute to the close (-> 2650)."""
    fp.proc_tree(tmp_path, busy=1000, idle=9000)
    rt = _runtime(tmp_path, tmp_path / "state.json")
    with rt:
        fp.set_stat(tmp_path, busy=1300, idle=9100)
        with rt.phase("checkpoint", path="/ckpt", size=MIB, level=1):
            fp.set_stat(tmp_path, busy=1800, idle=9150)
        fp.set_stat(tmp_path, busy=1900, idle=9400)
        with rt.phase("restart", path="/ckpt", size=MIB, level=1):
            fp.set_stat(tmp_path, busy=2600, idle=9500)
        fp.set_stat(tmp_path, busy=2650, idle=9600)
    return rt


def test_each_record_holds_the_counter_difference_over_it(tmp_path: Path) -> None:
    rt = _run(tmp_path)
    got = [(r.kind, r.cpu_s) for r in rt.records]
    assert [k for k, _ in got] == ["compute", "checkpoint", "lost", "restart", "compute"]
    expected = [300, 500, 100, 700, 50]
    assert [c for _, c in got] == pytest.approx([j / TICK for j in expected])


def test_totals_per_kind_and_of_the_run_add_up(tmp_path: Path) -> None:
    report = _run(tmp_path).report()
    assert report.total_cpu_s == pytest.approx(1650 / TICK)
    by_kind = report.by_kind()
    assert sum(t.cpu_s or 0.0 for t in by_kind.values()) == pytest.approx(1650 / TICK)
    assert by_kind["checkpoint"].cpu_s == pytest.approx(500 / TICK)
    (l1,) = [t for t in report.by_level() if t.kind == "checkpoint"]
    assert l1.cpu_s == pytest.approx(500 / TICK)
    doc = report.to_dict()
    assert doc["cpu"]["total_s"] == pytest.approx(1650 / TICK)
    assert "/proc/stat" in doc["cpu"]["definition"]
    assert doc["by_kind"]["restart"]["cpu_s"] == pytest.approx(700 / TICK)
    assert doc["records"][1]["cpu_s"] == pytest.approx(500 / TICK)


def test_text_report_shows_a_cpu_column_labelled_measured(tmp_path: Path) -> None:
    text = render_run_text(_run(tmp_path).report())
    lines = text.splitlines()
    assert any("CPU-s" in ln and "measured from /proc/stat" in ln for ln in lines)
    header = next(ln for ln in lines if ln.startswith("phase "))
    assert header.split()[:5] == ["phase", "count", "bytes", "seconds", "CPU-s"]
    ckpt = next(ln for ln in lines if ln.startswith("checkpoint ")).split()
    assert ckpt[2:4] == ["1", "MiB"] and ckpt[5] == f"{500 / TICK:.3f}"
    total = next(ln for ln in lines if ln.startswith("run total")).split()
    assert total[3] == f"{1650 / TICK:.3f}"


def test_json_and_csv_keep_the_figures(tmp_path: Path) -> None:
    report = _run(tmp_path).report()
    again = load_report(report.write_json(tmp_path / "r.json"))
    assert again.records == report.records
    assert again.total_cpu_s == report.total_cpu_s
    assert render_run_text(again) == render_run_text(report)
    csv_text = report.write_csv(tmp_path / "r.csv").read_text()
    assert "cpu_s" in csv_text.splitlines()[0].split(",")


def test_without_proc_stat_the_figures_are_none_and_said(tmp_path: Path) -> None:
    rt = _runtime(tmp_path, tmp_path / "state.json")
    with rt, rt.phase("checkpoint", path="/ckpt", size=MIB):
        pass
    assert all(r.cpu_s is None for r in rt.records)
    report = rt.report()
    assert report.total_cpu_s is None
    assert any(n.startswith("no CPU-seconds") for n in report.notes)
    header = next(ln for ln in render_run_text(report).splitlines() if ln.startswith("phase "))
    assert "CPU-s" not in header


def test_a_report_saved_before_cpu_seconds_loads(tmp_path: Path) -> None:
    doc: dict[str, Any] = _run(tmp_path).report().to_dict()
    del doc["cpu"]
    for section in (doc["records"], list(doc["by_kind"].values()), doc["by_level"]):
        for entry in section:
            del entry["cpu_s"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(doc))
    old = load_report(path)
    assert old.total_cpu_s is None
    assert all(r.cpu_s is None for r in old.records)
    assert all(t.cpu_s is None for t in old.by_kind().values())
    text = render_run_text(old)
    assert "CPU-s" not in text
    assert next(ln for ln in text.splitlines() if ln.startswith("phase ")).split() == [
        "phase",
        "count",
        "bytes",
        "seconds",
        "joules",
        "W",
        "source",
    ]

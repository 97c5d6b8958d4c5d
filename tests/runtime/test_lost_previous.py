"""Work lost by an earlier run (issue 30 item 7), on hand-made records, and the bytes column
of the run report's text (item 8).

A job that died is resubmitted: the next run's restart reads a checkpoint the earlier run
wrote, so the earlier run's work from its last committed checkpoint to its end is lost and is
accounted from its report, labelled as coming from it. Every figure here is SYNTHETIC (made
up by hand, with the expected values worked out below); none is a measurement.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from greenckpt.errors import InvalidValueError
from greenckpt.report.run_text import bytes_cell, render_run_text
from greenckpt.runtime.earlier_run import earlier_run
from greenckpt.runtime.lost_previous import ended_of, previous_loss
from greenckpt.runtime.run_report import PhaseRecord, PowerTrace, RunReport, load_report
from tests.runtime.test_report import rec


def _earlier(status: int | None = 1, *, levels: tuple[int, ...] = (1,)) -> RunReport:
    """An earlier run of 30 s: compute 0-8, a checkpoint of each of ``levels`` (8-10 for the
    first, then 2 s apart), compute to 30 s; 10 W everywhere (so 10 J per second)."""
    records = [rec(0, "compute", 0.0, 8.0, 80.0)]
    t = 8.0
    for i, level in enumerate(levels):
        records.append(rec(1 + i, "checkpoint", t, t + 2.0, 20.0, level=level))
        t += 2.0
    records.append(rec(9, "compute", t, 30.0, 10.0 * (30.0 - t)))
    return replace(RunReport.from_records(records, total_seconds=30.0), exit_status=status)


def _restarted(level: int | None = 1, *, own_checkpoint: bool = False) -> list[PhaseRecord]:
    """This run: start-up compute 0-1 s, a restart 1-2 s (of ``level``), rework 2-5 s."""
    records = [rec(0, "compute", 0.0, 1.0, 10.0)]
    if own_checkpoint:
        records = [rec(0, "compute", 0.0, 0.5, 5.0), rec(1, "checkpoint", 0.5, 1.0, 5.0, level=1)]
    records += [
        rec(2, "restart", 1.0, 2.0, 10.0, level=level),
        rec(3, "rework", 2.0, 5.0, 30.0),
    ]
    return records


def test_the_earlier_runs_work_after_its_last_checkpoint_is_lost() -> None:
    """Checkpoint L1 ended at 10 s, the run ended at 30 s: 20 s and 200 J (its compute
    record 10-30 s: 10 W x 20 s) lost, labelled with the earlier report."""
    loss = previous_loss(_restarted(), _earlier(), source="previous run X", report="X")
    assert loss is not None
    assert loss.seconds == pytest.approx(20.0)
    assert [loss.from_s, loss.to_s] == pytest.approx([10.0, 30.0])
    assert loss.energy_j == pytest.approx(200.0)
    assert loss.energy_source == "estimated"
    assert loss.energy_basis == "the earlier run's phase records over the span"
    assert loss.source == "previous run X" and loss.ended == "failed"
    assert (loss.restart_level, loss.checkpoint_level, loss.read_previous) == (1, 1, True)
    assert loss.to_dict()["source"] == "previous run X"


def test_the_level_the_restart_read_decides_which_checkpoint() -> None:
    """Checkpoints L1 (8-10 s) then L2 (10-12 s): a level-1 restart loses from 10 s, a
    level-2 one from 12 s; a level-4 one read nothing the earlier run wrote: from its start."""
    earlier = _earlier(levels=(1, 2))
    l1 = previous_loss(_restarted(1), earlier, source="s", report="r")
    l2 = previous_loss(_restarted(2), earlier, source="s", report="r")
    l4 = previous_loss(_restarted(4), earlier, source="s", report="r")
    assert l1 is not None and l2 is not None and l4 is not None
    assert [l1.seconds, l2.seconds, l4.seconds] == pytest.approx([20.0, 18.0, 30.0])
    assert l4.read_previous is False and l4.checkpoint_level is None
    assert "committed no level-4 checkpoint" in l4.note
    assert l4.energy_j == pytest.approx(80.0 + 20.0 + 20.0 + 180.0)


def test_a_restart_without_a_level_takes_the_newest_checkpoint_and_says_so() -> None:
    loss = previous_loss(_restarted(None), _earlier(levels=(1, 2)), source="s", report="r")
    assert loss is not None and loss.seconds == pytest.approx(18.0)
    assert loss.read_previous is None and "did not name the level" in loss.note


def test_an_earlier_run_without_a_checkpoint_loses_everything_from_its_start() -> None:
    earlier = replace(
        RunReport.from_records([rec(0, "compute", 0.0, 30.0, 300.0)]), exit_status=137
    )
    loss = previous_loss(_restarted(), earlier, source="s", report="r")
    assert loss is not None
    assert (loss.from_s, loss.seconds) == (0.0, 30.0) and loss.energy_j == pytest.approx(300.0)


def test_a_completed_earlier_run_lost_nothing() -> None:
    loss = previous_loss(_restarted(), _earlier(0), source="s", report="r")
    assert loss is not None and loss.seconds == 0.0 and loss.energy_j == 0.0
    assert loss.ended == "completed"
    cancelled = replace(_earlier(0), signal="SIGTERM")  # status 0 after a signal: cancelled
    assert ended_of(cancelled) == "cancelled" and ended_of(_earlier(None)) == "unknown"


def test_no_loss_without_a_restart_or_when_the_restart_read_this_runs_checkpoint() -> None:
    assert previous_loss(_restarted()[:1], _earlier(), source="s", report="r") is None
    own = _restarted(own_checkpoint=True)
    assert previous_loss(own, _earlier(), source="s", report="r") is None


def test_energy_from_the_trace_else_estimated_from_the_mean_power_and_labelled() -> None:
    """Records without energy: the trace (20 W over the span: 400 J), else the run's mean
    power (1500 J / 30 s = 50 W: 1000 J, labelled estimated)."""
    bare = [replace(r, node_energy_j=None, power_source=None) for r in _earlier().records]
    trace = PowerTrace(tuple(float(t) for t in range(31)), (20.0,) * 31, "measured", "node")
    with_trace = RunReport(tuple(bare), 30.0, 600.0, "measured", trace=trace, exit_status=1)
    loss = previous_loss(_restarted(), with_trace, source="s", report="r")
    assert loss is not None and loss.energy_j == pytest.approx(400.0)
    assert loss.energy_source == "measured" and "power trace" in loss.energy_basis
    no_trace = replace(with_trace, trace=None, total_energy_j=1500.0)
    loss = previous_loss(_restarted(), no_trace, source="s", report="r")
    assert loss is not None and loss.energy_j == pytest.approx(1000.0)
    assert loss.energy_source == "estimated" and loss.energy_basis.startswith("estimated:")
    nothing = replace(no_trace, total_energy_j=None)
    loss = previous_loss(_restarted(), nothing, source="s", report="r")
    assert loss is not None and loss.energy_j is None and loss.energy_basis.startswith("none")


def test_the_report_keeps_it_through_json_and_says_it_in_text(tmp_path: Path) -> None:
    loss = previous_loss(_restarted(), _earlier(), source="previous run /x/report.json", report="x")
    report = replace(
        RunReport.from_records(_restarted()), previous_lost=loss, exit_status=0, signal=None
    )
    again = load_report(report.write_json(tmp_path / "report.json"))
    assert again.previous_lost == loss and again.exit_status == 0
    doc = json.loads((tmp_path / "report.json").read_text())
    assert doc["previous_lost"]["source"] == "previous run /x/report.json"
    assert doc["lost_s"] == 0.0  # this run's own figures are not changed
    text = render_run_text(again)
    assert "lost in the previous run 20.000 s, 200.0 J (estimated" in text
    assert "source: previous run /x/report.json (not in this run's totals)" in text


def test_earlier_run_finds_the_folders_report_and_refuses_a_bad_previous(tmp_path: Path) -> None:
    assert earlier_run(None, tmp_path) is None
    _earlier().write_json(tmp_path / "report.json")
    found = earlier_run(None, tmp_path)
    assert found is not None and not found.explicit and found.report is not None
    (tmp_path / "other.json").write_text('{"format": "something else"}')
    with pytest.raises(InvalidValueError, match=r"^--previous: .* is not a greenckpt run report"):
        earlier_run(str(tmp_path / "other.json"), tmp_path)
    (tmp_path / "report.json").write_text("not json")  # found, broken: a note, not an error
    broken = earlier_run(None, tmp_path)
    assert broken is not None and broken.report is None
    noted = broken.account(RunReport.from_records(_restarted()))
    assert any("could not be read as an earlier run's report" in n for n in noted.notes)


def test_the_text_has_a_bytes_column_with_unknown_sizes() -> None:
    """I/O rows show their bytes (1 GiB per record here), 'unknown' when no size is known
    (0: the notifier could not tell) and a lower bound when only some are."""
    records = [
        rec(0, "compute", 0.0, 1.0, 10.0),
        rec(1, "checkpoint", 1.0, 2.0, 10.0, level=1),
        rec(2, "compute", 2.0, 3.0, 10.0),
        replace(rec(3, "checkpoint", 3.0, 4.0, 10.0, level=2), size=0),
        replace(rec(4, "restart", 4.0, 5.0, 10.0, level=2), size=0),
    ]
    text = render_run_text(RunReport.from_records(records))
    header = next(line for line in text.splitlines() if line.startswith("phase"))
    assert header.split()[:4] == ["phase", "count", "bytes", "seconds"]
    rows = {
        line.split()[0]: line for line in text.splitlines() if line.startswith(("  L", "c", "r"))
    }
    assert ">= 1 GiB (1 unknown)" in rows["checkpoint"]
    assert "unknown" in rows["restart"]
    assert "GiB" not in rows["compute"] and "unknown" not in rows["compute"]
    assert bytes_cell(3 << 20, 0) == "3 MiB" and bytes_cell(0, 2) == "unknown"

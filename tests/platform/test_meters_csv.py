"""External meter logs (``timestamp,watts``): the join afterwards and the live tail.

Every log here is SYNTHETIC.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from greenckpt.platform.meters import ExternalCsvMeter, MeterOptions, MeterUnavailable, PowerLog
from greenckpt.platform.root import PlatformError, SysRoot
from tests.platform import fake_power as fp

ROOT = SysRoot()
LOG = """# SYNTHETIC wall-plug log
timestamp,watts
1000.0,100
1001.0,200
1003.0,200
1004.0,100
"""


def test_join_integrates_trapezoids_with_interpolated_ends() -> None:
    log = PowerLog.parse(LOG.splitlines())
    assert log.source == "measured"
    assert log.span == (1000.0, 1004.0)
    # 150 + 400 + 150 J over the whole log
    assert log.energy_between(1000.0, 1004.0) == pytest.approx(700.0)
    # half a second at each end: 100->150 W ramp (62.5 J) ... 200 W flat
    assert log.energy_between(1000.5, 1001.0) == pytest.approx(87.5)
    assert log.energy_between(1001.5, 1002.5) == pytest.approx(200.0)
    assert log.mean_power(1001.0, 1003.0) == pytest.approx(200.0)
    assert log.mean_power(1000.5, 1000.5) == pytest.approx(150.0)


def test_join_refuses_spans_outside_the_log() -> None:
    log = PowerLog.parse(LOG.splitlines())
    with pytest.raises(PlatformError, match="covers"):
        log.energy_between(999.0, 1002.0)
    with pytest.raises(PlatformError, match="before start"):
        log.energy_between(1002.0, 1001.0)


def test_bad_rows_are_named_by_line() -> None:
    with pytest.raises(PlatformError, match=":4: timestamp"):
        PowerLog.parse(["1,1", "2,1", "", "2,1"])
    with pytest.raises(PlatformError, match=":2:"):
        PowerLog.parse(["1,1", "2;3"])
    with pytest.raises(PlatformError, match="fewer than two"):
        PowerLog.parse(["1,1"])


def test_load_from_file(tmp_path: Path) -> None:
    p = tmp_path / "wall.csv"
    p.write_text(LOG)
    assert PowerLog.load(p).energy_between(1000.0, 1004.0) == pytest.approx(700.0)
    with pytest.raises(PlatformError, match="cannot read"):
        PowerLog.load(tmp_path / "missing.csv")


@given(
    watts=st.lists(st.floats(0, 1000), min_size=2, max_size=50),
    a=st.floats(0, 1),
    b=st.floats(0, 1),
)
def test_join_is_additive(watts: list[float], a: float, b: float) -> None:
    times = np.arange(len(watts), dtype=float)
    log = PowerLog(times, np.asarray(watts))
    end = float(times[-1])
    lo, hi = sorted((a * end, b * end))
    mid = (lo + hi) / 2
    whole = log.energy_between(lo, hi)
    assert whole == pytest.approx(
        log.energy_between(lo, mid) + log.energy_between(mid, hi), abs=1e-6
    )


def test_live_tail_follows_a_growing_file(tmp_path: Path) -> None:
    p = tmp_path / "wall.csv"
    p.write_text("timestamp,watts\n1000.0,100.0\n")
    wall = fp.ManualClock(1000.0)
    opts = MeterOptions(csv_path=p, wall_clock=wall)
    with ExternalCsvMeter.probe(ROOT, opts) as m:
        assert m.domains == ("node",)
        assert m.source == "measured"
        assert m.read() == {"node": 0.0}
        wall.advance(1.0)
        assert m.read()["node"] == pytest.approx(100.0)  # 100 W held for 1 s
        with p.open("a") as fh:
            fh.write("1001.0,300.5\n1002.0,3")  # second row not complete yet
        wall.advance(1.0)
        assert m.read()["node"] == pytest.approx(100.0 + 300.5)
        assert m.resolution.value == pytest.approx(0.1)
        with p.open("a") as fh:
            fh.write("00\nnot,a,row\n")
        wall.advance(0.5)
        assert m.read()["node"] == pytest.approx(100.0 + 300.5 + 150.0)
        assert m.skipped_lines == 1
        assert m.rows == 3


def test_live_value_never_decreases_when_a_late_row_revises_it(tmp_path: Path) -> None:
    p = tmp_path / "wall.csv"
    p.write_text("1000.0,500\n")
    wall = fp.ManualClock(1000.0)
    with ExternalCsvMeter.probe(ROOT, MeterOptions(csv_path=p, wall_clock=wall)) as m:
        wall.advance(2.0)
        assert m.read()["node"] == pytest.approx(1000.0)  # 500 W extrapolated
        with p.open("a") as fh:
            fh.write("1000.5,0\n")  # late row: power fell to 0 at 1000.5
        assert m.read()["node"] == pytest.approx(1000.0)  # clamped, not 250


def test_probe_without_a_log_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(MeterUnavailable, match="no log file"):
        ExternalCsvMeter.probe(ROOT, MeterOptions())
    with pytest.raises(MeterUnavailable, match="does not exist"):
        ExternalCsvMeter.probe(ROOT, MeterOptions(csv_path=tmp_path / "nope.csv"))


def test_a_log_that_stops_is_held_briefly_then_refused_and_the_gap_not_charged(
    tmp_path: Path,
) -> None:
    p = tmp_path / "wall.csv"
    p.write_text("1000.0,100\n1001.0,100\n1002.0,100\n")  # one row a second: hold 3 s
    wall = fp.ManualClock(1002.0)
    with ExternalCsvMeter.probe(ROOT, MeterOptions(csv_path=p, wall_clock=wall)) as m:
        wall.advance(2.0)
        assert m.read()["node"] == pytest.approx(200.0)  # logger a little late: held
        wall.advance(60.0)  # the logger stopped
        with pytest.raises(PlatformError, match="hold limit"):
            m.read()
        assert m.hold_s == pytest.approx(3.0)
        assert m.stale_reads == 1
        with p.open("a") as fh:  # ... and starts again
            fh.write("1070.0,300\n")
        wall.t = 1071.0
        # 200 J handed out before the stop; the silent minute is not charged; 1 s at 300 W.
        assert m.read()["node"] == pytest.approx(200.0 + 300.0)


def test_an_empty_log_is_not_read_as_zero_watts(tmp_path: Path) -> None:
    p = tmp_path / "wall.csv"
    p.write_text("timestamp,watts\n")
    wall = fp.ManualClock(1000.0)
    with ExternalCsvMeter.probe(ROOT, MeterOptions(csv_path=p, wall_clock=wall)) as m:
        with pytest.raises(PlatformError, match="no reading"):
            m.read()
        p.write_text("timestamp,watts\n1000.0,50\n")
        wall.advance(2.0)
        assert m.read()["node"] == pytest.approx(100.0)


def test_hold_limit_can_be_given(tmp_path: Path) -> None:
    p = tmp_path / "wall.csv"
    p.write_text("1000.0,100\n")
    wall = fp.ManualClock(1000.0)
    opts = MeterOptions(csv_path=p, wall_clock=wall, csv_max_hold_s=0.5)
    with ExternalCsvMeter.probe(ROOT, opts) as m:
        wall.advance(1.0)
        with pytest.raises(PlatformError, match=r"0\.5 s hold limit"):
            m.read()
    with pytest.raises(MeterUnavailable, match="positive"):
        ExternalCsvMeter.probe(ROOT, MeterOptions(csv_path=p, csv_max_hold_s=0.0))

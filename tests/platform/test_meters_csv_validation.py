"""External meter logs: rows are validated, dropped rows named (issue 18, item 22).

Every log here is SYNTHETIC.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

from greenckpt.platform.meters import ExternalCsvMeter, MeterOptions, MeterUnavailable, PowerLog
from greenckpt.platform.root import PlatformError, SysRoot
from tests.platform import fake_power as fp

ROOT = SysRoot()
NOW = 1_718_000_000.0  # a plausible Unix time for the fake wall clock


def live(path: Path, wall: fp.ManualClock, **options: object) -> ExternalCsvMeter:
    return ExternalCsvMeter.probe(
        ROOT,
        MeterOptions(csv_path=path, wall_clock=wall, **options),  # type: ignore[arg-type]
    )


# ------------------------------------------------------------------------ join afterwards


def test_decimal_comma_is_refused_not_read_as_the_integer_part() -> None:
    """`100,200,5` used to read 200 W; three fields where two are expected is refused."""
    with pytest.raises(PlatformError, match=r":3: 3 fields where 2 are expected.*decimal comma"):
        PowerLog.parse(["timestamp,watts", "100,200", "101,200,5"], clock=lambda: 100.0)


def test_decimal_comma_refused_against_a_wider_header_too() -> None:
    lines = ["time_s,watts,volts", "100,200,230", "101,200,5,230"]
    with pytest.raises(PlatformError, match=":3: 4 fields where 3 are expected"):
        PowerLog.parse(lines)
    assert PowerLog.parse([*lines[:2], "101,201,230"]).energy_between(100, 101) == 200.5


def test_semicolon_separated_log_is_refused_with_the_right_format() -> None:
    with pytest.raises(PlatformError, match=r":1: .*';'.*timestamp,watts"):
        PowerLog.parse(["100;200,5", "101;200,5"])


@pytest.mark.parametrize("watts", ["1e308", "2e6", "-5", "nan", "inf"])
def test_implausible_power_is_refused_naming_the_line(watts: str) -> None:
    with pytest.raises(PlatformError, match=r":2: .*(not plausible|finite)"):
        PowerLog.parse(["100,200", f"101,{watts}", "102,200"])


def test_lenient_join_drops_bad_rows_and_names_them() -> None:
    log = PowerLog.parse(["100,200", "101,1e308", "102,200", "101.5,300", "103,200"], strict=False)
    assert log.energy_between(100, 103) == pytest.approx(600.0)  # finite, bad rows left out
    assert [(d.line, d.reason.split(" ")[0]) for d in log.dropped] == [
        (2, "power"),
        (4, "timestamp"),
    ]
    assert any("dropped 2 row" in n and "line 2" in n and "line 4" in n for n in log.notes)


@pytest.mark.parametrize(
    ("header", "scale"),
    [("time_ms,watts", 1e3), ("timestamp_us,watts", 1e6), ("time (ns),power", 1e9)],
)
def test_timestamp_unit_from_the_header(header: str, scale: float) -> None:
    lines = [header, f"{100 * scale:.0f},100", f"{101 * scale:.0f},100"]
    log = PowerLog.parse(lines, clock=lambda: 1e12)  # the clock does not decide: the header does
    assert log.span == (100.0, 101.0)
    assert log.energy_between(100.0, 101.0) == pytest.approx(100.0)


def test_millisecond_timestamps_are_detected_from_the_clock_and_said() -> None:
    """Before: 1000x the energy (1 s between rows read as 1000 s)."""
    t = NOW * 1e3
    log = PowerLog.parse([f"{t:.0f},100", f"{t + 1000:.0f},100"], clock=lambda: NOW)
    assert log.energy_between(NOW, NOW + 1.0) == pytest.approx(100.0)
    assert any("milliseconds" in n and "detected" in n for n in log.notes)


def test_stated_unit_wins_and_conflicting_header_is_refused() -> None:
    lines = ["time_ms,watts", "100000,100", "101000,100"]
    assert PowerLog.parse(lines, time_unit="ms").span == (100.0, 101.0)
    with pytest.raises(PlatformError, match="header says ms"):
        PowerLog.parse(lines, time_unit="s")
    with pytest.raises(ValueError, match="time unit"):
        PowerLog.parse(lines, time_unit="minutes")


def test_unknown_power_unit_in_the_header_is_refused() -> None:
    with pytest.raises(PlatformError, match=r":1: .*watts"):
        PowerLog.parse(["timestamp,power_kw", "100,0.2", "101,0.2"])


def test_utf8_bom_header_is_accepted(tmp_path: Path) -> None:
    p = tmp_path / "wall.csv"
    p.write_bytes("\ufefftimestamp,watts\n100,100\n101,100\n".encode())
    assert PowerLog.load(p).energy_between(100, 101) == pytest.approx(100.0)
    assert PowerLog.parse(["\ufefftimestamp,watts", "100,1", "101,1"]).span == (100.0, 101.0)


def test_a_fifo_is_refused(tmp_path: Path, alarm: None) -> None:
    fifo = tmp_path / "wall.csv"
    os.mkfifo(fifo)
    with pytest.raises(PlatformError, match="not a regular file"):
        PowerLog.load(fifo)
    with pytest.raises(MeterUnavailable, match="not a regular file"):
        live(fifo, fp.ManualClock(NOW))


# ------------------------------------------------------------------------ live


def test_live_future_dated_row_is_dropped_and_later_rows_still_count(tmp_path: Path) -> None:
    """Before: one row dated a day ahead made every later row 'not after' it: 0 J forever."""
    p = tmp_path / "wall.csv"
    p.write_text(f"{NOW},100\n")
    wall = fp.ManualClock(NOW)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with live(p, wall) as m:
            with p.open("a") as fh:
                fh.write(f"{NOW + 86400},100\n{NOW + 1},100\n{NOW + 2},100\n")
            wall.advance(2.0)
            assert m.read()["node"] == pytest.approx(200.0)
            assert [d.line for d in m.dropped] == [2]
            assert "ahead of this host's clock" in m.dropped[0].reason
            assert m.gaps == {"node": 1}  # the figure rests on a log with a hole
            assert any("line 2" in n for n in m.notes)
    assert any("line 2" in str(w.message) for w in caught)


def test_live_implausible_power_is_dropped_not_integrated_to_inf(tmp_path: Path) -> None:
    p = tmp_path / "wall.csv"
    p.write_text(f"{NOW},100\n{NOW + 1},1e308\n{NOW + 2},100\n")
    wall = fp.ManualClock(NOW + 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with live(p, wall) as m:
            wall.advance(1.0)
            assert m.read()["node"] == pytest.approx(100.0)
            assert [d.line for d in m.dropped] == [2] and "not plausible" in m.dropped[0].reason


def test_live_decimal_comma_row_is_dropped(tmp_path: Path) -> None:
    p = tmp_path / "wall.csv"
    p.write_text(f"timestamp,watts\n{NOW},100\n")
    wall = fp.ManualClock(NOW)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with live(p, wall) as m:
            with p.open("a") as fh:
                fh.write(f"{NOW + 1},200,5\n")
            wall.advance(1.0)
            assert m.read()["node"] == pytest.approx(100.0)  # 100 W held, 200 W never read
            assert [d.line for d in m.dropped] == [3] and "decimal comma" in m.dropped[0].reason


def test_live_millisecond_log_is_detected(tmp_path: Path) -> None:
    p = tmp_path / "wall.csv"
    p.write_text(f"{NOW * 1e3:.0f},100\n{(NOW + 1) * 1e3:.0f},100\n")
    wall = fp.ManualClock(NOW + 1)
    with live(p, wall) as m:
        wall.advance(1.0)
        assert m.read()["node"] == pytest.approx(100.0)
        assert any("milliseconds" in n for n in m.notes)
        assert "ms" in m.describe()


def test_live_unit_can_be_stated(tmp_path: Path) -> None:
    p = tmp_path / "wall.csv"
    p.write_text(f"{NOW * 1e3:.0f},100\n")
    wall = fp.ManualClock(NOW)
    with live(p, wall, csv_time_unit="ms") as m:
        wall.advance(1.0)
        assert m.read()["node"] == pytest.approx(100.0)
    with pytest.raises(MeterUnavailable, match="time unit"):
        live(p, wall, csv_time_unit="hours")


def test_live_bom_header_is_accepted(tmp_path: Path) -> None:
    p = tmp_path / "wall.csv"
    p.write_bytes(f"\ufefftimestamp,watts\n{NOW},100\n".encode())
    wall = fp.ManualClock(NOW)
    with live(p, wall) as m:
        wall.advance(1.0)
        assert m.read()["node"] == pytest.approx(100.0)
        assert m.dropped == []


def test_live_warnings_are_capped(tmp_path: Path) -> None:
    p = tmp_path / "wall.csv"
    p.write_text(f"{NOW},100\n" + "".join(f"{NOW},-1\n" for _ in range(50)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with live(p, fp.ManualClock(NOW)) as m:
            assert len(m.dropped) == 50
    assert 1 < len(caught) <= 12
    assert "further" in str(caught[-1].message)

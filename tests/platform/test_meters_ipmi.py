"""IPMI DCMI through the SYNTHETIC ``tests/platform/bin/ipmitool`` put first on PATH."""

from __future__ import annotations

from pathlib import Path

import pytest

from greenckpt.platform.meters import IpmiMeter, MeterOptions, MeterUnavailable, parse_dcmi_power
from greenckpt.platform.root import PlatformError, SysRoot
from tests.platform import fake_power as fp

ROOT = SysRoot()

REAL_OUTPUT = """
    Instantaneous power reading:                   471 Watts
    Minimum during sampling period:                 68 Watts
    Maximum during sampling period:                548 Watts
    Average power reading over sample period:      455 Watts
    IPMI timestamp:                           Tue Jun 11 09:28:31 2019
    Sampling period:                          00000001 Seconds.
    Power reading state is:                   activated
"""


def test_parse_real_output() -> None:
    assert parse_dcmi_power(REAL_OUTPUT) == 471.0


def test_parse_refuses_output_without_a_reading() -> None:
    with pytest.raises(PlatformError, match="Instantaneous power reading"):
        parse_dcmi_power("DCMI request failed because: Invalid command (c1)\n")
    with pytest.raises(PlatformError, match="deactivated"):
        parse_dcmi_power(REAL_OUTPUT.replace("activated", "deactivated"))


def test_reads_and_integrates_node_power(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    watts = fp.install_ipmitool(monkeypatch, tmp_path, watts=200)
    clock = fp.ManualClock()
    with IpmiMeter.probe(ROOT, MeterOptions(clock=clock, ipmi_period_s=1.0)) as m:
        assert m.domains == ("node",)
        assert m.source == "measured"
        assert m.queries == 1  # the probe's reading
        assert m.read() == {"node": 0.0}
        clock.advance(0.5)
        assert m.read()["node"] == pytest.approx(100.0)  # held, not queried
        assert m.queries == 1
        watts.write_text("300\n")
        clock.advance(0.5)
        assert m.read()["node"] == pytest.approx(200.0)  # queried now: 300 W from here
        assert m.queries == 2
        clock.advance(2.0)
        assert m.read()["node"] == pytest.approx(800.0)
        assert m.failures == 0


def test_missing_binary_is_unavailable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fp.hide_ipmitool(monkeypatch, tmp_path)
    with pytest.raises(MeterUnavailable, match="not found on PATH"):
        IpmiMeter.probe(ROOT, MeterOptions())


def test_no_bmc_is_unavailable_with_its_message(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fp.install_ipmitool(monkeypatch, tmp_path, mode="nobmc")
    with pytest.raises(MeterUnavailable) as info:
        IpmiMeter.probe(ROOT, MeterOptions())
    assert "exited 1" in info.value.reason
    assert "/dev/ipmi0" in info.value.reason
    assert "ipmi_devintf" in info.value.reason


@pytest.mark.parametrize("mode", ["garbage", "deactivated"])
def test_unusable_output_is_unavailable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, mode: str
) -> None:
    fp.install_ipmitool(monkeypatch, tmp_path, mode=mode)
    with pytest.raises(MeterUnavailable):
        IpmiMeter.probe(ROOT, MeterOptions())


def test_timeout_is_unavailable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fp.install_ipmitool(monkeypatch, tmp_path, mode="sleep")
    with pytest.raises(MeterUnavailable, match="did not answer"):
        IpmiMeter.probe(ROOT, MeterOptions(ipmi_timeout_s=0.3))


def test_failure_after_probe_holds_last_power(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fp.install_ipmitool(monkeypatch, tmp_path, watts=100)
    clock = fp.ManualClock()
    with IpmiMeter.probe(ROOT, MeterOptions(clock=clock)) as m:
        monkeypatch.setenv("FAKE_IPMI_MODE", "nobmc")
        clock.advance(2.0)
        assert m.read()["node"] == pytest.approx(200.0)
        assert m.failures == 1
        assert m.last_error is not None and "exited 1" in m.last_error


def test_a_silent_bmc_is_held_for_a_few_queries_then_refused_and_not_charged(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    watts = fp.install_ipmitool(monkeypatch, tmp_path, watts=100)
    clock = fp.ManualClock()
    with IpmiMeter.probe(ROOT, MeterOptions(clock=clock, ipmi_period_s=1.0)) as m:
        monkeypatch.setenv("FAKE_IPMI_MODE", "nobmc")
        clock.advance(1.0)
        assert m.read()["node"] == pytest.approx(100.0)  # 1st failure: 100 W held
        clock.advance(1.0)
        assert m.read()["node"] == pytest.approx(200.0)  # 2nd failure: still held
        clock.advance(1.0)
        with pytest.raises(PlatformError, match="not extrapolating"):
            m.read()  # 3rd failure in a row: no more extrapolation
        assert m.gaps == {"node": 2}  # the two held figures are marked as such
        clock.advance(10.0)
        with pytest.raises(PlatformError, match="exited 1"):
            m.read()
        assert m.failures == 4
        monkeypatch.setenv("FAKE_IPMI_MODE", "ok")
        watts.write_text("300\n")
        clock.advance(1.0)
        # The BMC answers again: the 12 s it was silent are not charged at the held 100 W.
        assert m.read()["node"] == pytest.approx(200.0)
        clock.advance(1.0)
        assert m.read()["node"] == pytest.approx(500.0)
        assert m.consecutive_failures == 0


def test_read_nowait_never_runs_ipmitool(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fp.install_ipmitool(monkeypatch, tmp_path, watts=100)
    clock = fp.ManualClock()
    with IpmiMeter.probe(ROOT, MeterOptions(clock=clock, ipmi_period_s=1.0)) as m:
        clock.advance(5.0)
        assert m.read_nowait()["node"] == pytest.approx(500.0)  # held power, to now
        assert m.queries == 1  # only the probe's
        m.poll()
        assert m.queries == 2


def test_output_that_is_not_utf8_is_a_platform_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fp.install_ipmitool_script(monkeypatch, tmp_path, r"printf '\377\376\375 BMC says hello\n'")
    with pytest.raises(MeterUnavailable, match="Instantaneous power reading"):
        IpmiMeter.probe(ROOT, MeterOptions())
    fp.install_ipmitool_script(monkeypatch, tmp_path, r"printf '\377\376\n' >&2; exit 1")
    with pytest.raises(MeterUnavailable, match="exited 1"):
        IpmiMeter.probe(ROOT, MeterOptions())


def test_a_reading_among_bytes_that_are_not_utf8_is_still_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fp.install_ipmitool_script(
        monkeypatch,
        tmp_path,
        r"printf 'vendor \377 banner\n    Instantaneous power reading:   231 Watts\n'",
    )
    clock = fp.ManualClock()
    with IpmiMeter.probe(ROOT, MeterOptions(clock=clock)) as m:
        clock.advance(1.0)
        assert m.read_nowait()["node"] == pytest.approx(231.0)

"""Every shipped meter passes ``greenckpt.testing.meter_contract.MeterContract`` on SYNTHETIC fakes.

The per-meter files test what is particular to each meter; these subclasses only say how to open
one, how to let energy flow, and where it cannot run, and inherit the common contract: RAPL and
perf on fake sysfs trees, the estimator on a fake /proc, NVML on a fake ``pynvml`` (energy
counters and power readings), IPMI through a fake ``ipmitool``, the CSV meter on a growing log.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from greenckpt.platform.meters import (
    METERS,
    ExternalCsvMeter,
    IpmiMeter,
    MeterOptions,
    NvmlMeter,
    PerfPowerMeter,
    RaplMeter,
    UtilisationEstimator,
)
from greenckpt.platform.meters import perf as perf_mod
from greenckpt.platform.meters.base import Meter
from greenckpt.platform.root import SysRoot
from greenckpt.testing import power as fp
from greenckpt.testing.meter_contract import MeterContract


class TestRaplMeterContract(MeterContract):
    """RAPL through an Intel powercap tree; each advance adds 1 J to every zone's counter."""

    @pytest.fixture
    def meter(self, tmp_path: Path) -> Iterator[Meter]:
        self.zones = fp.intel_tree(tmp_path)
        with RaplMeter.probe(SysRoot(tmp_path), MeterOptions()) as m:
            yield m

    @pytest.fixture
    def advance(self, tmp_path: Path) -> Callable[[], None]:
        def step() -> None:
            for zone in self.zones:
                zone.energy_uj += 1_000_000
                fp.set_energy(tmp_path, zone.zone, zone.energy_uj)

        return step

    @pytest.fixture
    def unavailable(self, tmp_path: Path) -> Callable[[], object]:
        return lambda: RaplMeter.probe(SysRoot(tmp_path), MeterOptions())  # no powercap at all


class TestEstimatorMeterContract(MeterContract):
    """The utilisation estimator on a fake /proc and a hand-driven clock; half busy each second."""

    @pytest.fixture
    def clock(self) -> fp.ManualClock:
        return fp.ManualClock()

    @pytest.fixture
    def meter(self, tmp_path: Path, clock: fp.ManualClock) -> Iterator[Meter]:
        fp.proc_tree(tmp_path, busy=0, idle=0)
        self.jiffies = 0
        with UtilisationEstimator.probe(SysRoot(tmp_path), MeterOptions(clock=clock)) as m:
            yield m

    @pytest.fixture
    def advance(self, tmp_path: Path, clock: fp.ManualClock) -> Callable[[], None]:
        def step() -> None:
            self.jiffies += 500
            fp.set_stat(tmp_path, busy=self.jiffies, idle=self.jiffies)
            clock.advance(1.0)

        return step

    @pytest.fixture
    def unavailable(self, tmp_path: Path) -> Callable[[], object]:
        return lambda: UtilisationEstimator.probe(SysRoot(tmp_path), MeterOptions())  # no /proc


class TestPerfMeterContract(MeterContract):
    """The perf power PMU on a fake tree, through a fake ``perf_event_open`` whose counters
    advance by 1 J per read (the kernel's scale)."""

    @pytest.fixture
    def meter(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Meter]:
        fp.power_pmu_tree(tmp_path, paranoid=0)
        _fake_perf(monkeypatch, fp.FakePerfOpener())
        with PerfPowerMeter.probe(SysRoot(tmp_path), MeterOptions()) as m:
            yield m

    @pytest.fixture
    def advance(self) -> Callable[[], None]:
        return lambda: None  # every read of the fake counters advances them

    @pytest.fixture
    def unavailable(self, tmp_path: Path) -> Callable[[], object]:
        return lambda: PerfPowerMeter.probe(SysRoot(tmp_path), MeterOptions())  # no PMU


def _fake_perf(monkeypatch: pytest.MonkeyPatch, opener: fp.FakePerfOpener) -> None:
    """Open the fake tree's PMU through ``opener``, as root on a real root would."""
    monkeypatch.setattr(SysRoot, "is_real", property(lambda self: True))
    monkeypatch.setattr(perf_mod, "SyscallOpener", lambda: opener)
    monkeypatch.setattr("os.geteuid", lambda: 0)


class TestNvmlEnergyMeterContract(MeterContract):
    """NVML on a fake ``pynvml`` whose GPUs have energy counters."""

    @pytest.fixture
    def meter(self, monkeypatch: pytest.MonkeyPatch) -> Iterator[Meter]:
        self.nvml = fp.fake_pynvml(gpus=2, energy_supported=True)
        fp.install_pynvml(monkeypatch, self.nvml)
        with NvmlMeter.probe(SysRoot(), MeterOptions()) as m:
            yield m

    @pytest.fixture
    def advance(self) -> Callable[[], None]:
        def step() -> None:
            for gpu in range(len(self.nvml.energy_mj)):
                self.nvml.energy_mj[gpu] += 1000

        return step

    @pytest.fixture
    def unavailable(self, monkeypatch: pytest.MonkeyPatch) -> Callable[[], object]:
        fp.install_pynvml(monkeypatch, fp.fake_pynvml(init_fails=True))
        return lambda: NvmlMeter.probe(SysRoot(), MeterOptions())


class TestNvmlPowerMeterContract(MeterContract):
    """NVML on a fake ``pynvml`` without energy counters: power integrated on a fake clock."""

    @pytest.fixture
    def clock(self) -> fp.ManualClock:
        return fp.ManualClock()

    @pytest.fixture
    def meter(self, monkeypatch: pytest.MonkeyPatch, clock: fp.ManualClock) -> Iterator[Meter]:
        fp.install_pynvml(monkeypatch, fp.fake_pynvml(gpus=1, energy_supported=False))
        with NvmlMeter.probe(SysRoot(), MeterOptions(clock=clock)) as m:
            yield m

    @pytest.fixture
    def advance(self, clock: fp.ManualClock) -> Callable[[], None]:
        return lambda: clock.advance(1.0)

    @pytest.fixture
    def unavailable(self, monkeypatch: pytest.MonkeyPatch) -> Callable[[], object]:
        fp.install_pynvml(monkeypatch, None)  # no pynvml at all
        return lambda: NvmlMeter.probe(SysRoot(), MeterOptions())


class TestIpmiMeterContract(MeterContract):
    """The BMC through a fake ``ipmitool`` reporting 200 W, on a fake clock."""

    @pytest.fixture
    def clock(self) -> fp.ManualClock:
        return fp.ManualClock()

    @pytest.fixture
    def meter(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, clock: fp.ManualClock
    ) -> Iterator[Meter]:
        fp.install_ipmitool(monkeypatch, tmp_path, watts=200)
        with IpmiMeter.probe(SysRoot(), MeterOptions(clock=clock)) as m:
            yield m

    @pytest.fixture
    def advance(self, clock: fp.ManualClock) -> Callable[[], None]:
        return lambda: clock.advance(1.5)

    @pytest.fixture
    def unavailable(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[[], object]:
        fp.hide_ipmitool(monkeypatch, tmp_path)
        return lambda: IpmiMeter.probe(SysRoot(), MeterOptions())


class TestCsvMeterContract(MeterContract):
    """A wall-plug meter's log that grows by one 150 W row per second of a fake wall clock."""

    @pytest.fixture
    def wall(self) -> fp.ManualClock:
        return fp.ManualClock(1000.0)

    @pytest.fixture
    def meter(self, tmp_path: Path, wall: fp.ManualClock) -> Iterator[Meter]:
        self.log = tmp_path / "wall.csv"
        self.log.write_text("timestamp,watts\n1000.0,150.0\n")
        with ExternalCsvMeter.probe(
            SysRoot(), MeterOptions(csv_path=self.log, wall_clock=wall)
        ) as m:
            yield m

    @pytest.fixture
    def advance(self, wall: fp.ManualClock) -> Callable[[], None]:
        def step() -> None:
            wall.advance(1.0)
            with self.log.open("a") as fh:
                fh.write(f"{wall():.1f},150.0\n")

        return step

    @pytest.fixture
    def unavailable(self, tmp_path: Path) -> Callable[[], object]:
        return lambda: ExternalCsvMeter.probe(
            SysRoot(), MeterOptions(csv_path=tmp_path / "no-such-log.csv")
        )


def test_every_registered_meter_has_a_contract_class() -> None:
    tested = {
        cls.__name__.removeprefix("Test").removesuffix("MeterContract").lower()
        for cls in MeterContract.__subclasses__()
    }
    expected = {"rapl", "estimator", "perf", "nvmlenergy", "nvmlpower", "ipmi", "csv"}
    assert tested >= expected
    covered = {n for n in METERS if any(t.startswith(n) for t in tested)}
    assert covered == set(METERS)

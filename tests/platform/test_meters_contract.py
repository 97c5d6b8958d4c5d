"""The shipped meters pass ``greenckpt.testing.meters.MeterContract`` on SYNTHETIC trees.

The per-meter files test what is particular to each meter; these subclasses only say how to open
one, how to let energy flow, and where it cannot run, and inherit the common contract.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from greenckpt.platform.meters import MeterOptions, RaplMeter, UtilisationEstimator
from greenckpt.platform.meters.base import Meter
from greenckpt.platform.root import SysRoot
from greenckpt.testing import power as fp
from greenckpt.testing.meters import MeterContract


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

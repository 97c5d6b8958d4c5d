"""``MeterContract``: the pytest suite every :class:`~greenckpt.platform.meters.Meter` passes.

Why: the sampler, the profiler and the runtime trust every meter to keep the contract written in
:mod:`greenckpt.platform.meters.base` (cumulative joules per domain, never decreasing, labelled
measured or estimated, ``MeterUnavailable`` with a reason rather than a guess). A new meter gets
those checks by subclassing, without copying them::

    class TestMyMeter(MeterContract):
        @pytest.fixture
        def meter(self, tmp_path): ...          # an opened meter (yield it; it is closed after)

        @pytest.fixture
        def advance(self, tmp_path): ...        # a callable: let energy flow between two reads

        @pytest.fixture
        def unavailable(self, tmp_path): ...    # a callable that probes where it cannot run
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from typing import ClassVar

import pytest

from greenckpt.platform.meters.base import Meter, MeterUnavailable

__all__ = ["MeterContract"]

READS = 5
"""Reads per monotonicity check (with an ``advance`` between each two)."""


class MeterContract:
    """Contract tests for one meter; subclass it as ``Test...`` and give the three fixtures.

    ``grows``: whether ``advance`` makes at least one domain's energy grow (set it to False
    for a meter whose energy may stand still, such as an estimator on an idle fake node).
    """

    grows: ClassVar[bool] = True

    @pytest.fixture
    def meter(self) -> Iterator[Meter]:
        """The meter under test, opened (a subclass yields it and closes it afterwards)."""
        pytest.fail(f"{type(self).__name__} must define the 'meter' fixture")
        yield  # pragma: no cover - a generator, like the fixtures that override it

    @pytest.fixture
    def advance(self) -> Callable[[], None]:
        """Makes energy flow between two reads (default: let a little real time pass)."""
        return lambda: time.sleep(0.01)

    @pytest.fixture
    def unavailable(self) -> Callable[[], object]:
        """A callable probing the meter where it cannot run (it must raise MeterUnavailable)."""
        pytest.fail(f"{type(self).__name__} must define the 'unavailable' fixture")

    def test_figures_are_labelled_measured_or_estimated(self, meter: Meter) -> None:
        assert meter.source in ("measured", "estimated")
        assert type(meter).source == meter.source  # one label for every figure of the class
        assert meter.source in meter.describe()

    def test_name_domains_and_resolution_are_well_formed(self, meter: Meter) -> None:
        assert isinstance(meter.name, str) and meter.name and meter.name in meter.describe()
        assert meter.domains and len(set(meter.domains)) == len(meter.domains)
        assert all(isinstance(d, str) and d for d in meter.domains)
        assert meter.resolution.unit in ("J", "W")
        assert math.isfinite(meter.resolution.value) and meter.resolution.value > 0
        assert meter.max_period_s > 0 and meter.min_period_s >= 0

    def test_read_gives_cumulative_joules_for_every_domain(self, meter: Meter) -> None:
        energy = meter.read()
        assert set(energy) == set(meter.domains)
        for domain, joules in energy.items():
            assert isinstance(joules, float), f"{domain}: {joules!r} is not a float"
            assert math.isfinite(joules) and joules >= 0.0, f"{domain}: {joules} J"

    def test_energy_never_decreases(self, meter: Meter, advance: Callable[[], None]) -> None:
        last = meter.read()
        for _ in range(READS - 1):
            advance()
            meter.poll()
            now = meter.read()
            assert all(now[d] >= last[d] for d in meter.domains), (last, now)
            last = now

    def test_energy_grows_while_power_flows(
        self, meter: Meter, advance: Callable[[], None]
    ) -> None:
        if not self.grows:
            pytest.skip(f"{type(self).__name__}.grows is False")
        first = meter.read()
        advance()
        meter.poll()
        last = meter.read()
        assert any(last[d] > first[d] for d in meter.domains), (first, last)

    def test_read_nowait_keeps_the_contract(
        self, meter: Meter, advance: Callable[[], None]
    ) -> None:
        before = meter.read()
        advance()
        meter.poll()
        after = meter.read_nowait()
        assert set(after) == set(meter.domains)
        assert all(after[d] >= before[d] for d in meter.domains), (before, after)

    def test_gaps_count_degraded_readings_per_known_domain(self, meter: Meter) -> None:
        meter.read()
        gaps = dict(meter.gaps)
        assert set(gaps) <= set(meter.domains)
        assert all(isinstance(n, int) and n >= 0 for n in gaps.values()), gaps

    def test_close_is_idempotent(self, meter: Meter) -> None:
        meter.close()
        meter.close()

    def test_unavailable_raises_meter_unavailable_with_a_reason(
        self, unavailable: Callable[[], object]
    ) -> None:
        with pytest.raises(MeterUnavailable) as info:
            opened = unavailable()
            if isinstance(opened, Meter):  # it should not have opened: release it anyway
                opened.close()
        assert info.value.meter and info.value.reason.strip()
        assert str(info.value) == f"{info.value.meter}: {info.value.reason}"

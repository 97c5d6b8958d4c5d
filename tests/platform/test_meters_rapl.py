"""RAPL through powercap on SYNTHETIC trees: Intel, AMD, root-only counters, wraparound."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from greenckpt.platform.meters import MeterOptions, MeterUnavailable, RaplMeter, WrappingCounter
from greenckpt.platform.meters.rapl import find_zones
from greenckpt.platform.root import SysRoot
from greenckpt.platform.sampler import Sampler
from tests.platform import fake_power as fp

OPTS = MeterOptions()


def test_intel_package_core_uncore_dram(tmp_path: Path) -> None:
    fp.intel_tree(tmp_path)
    with RaplMeter.probe(SysRoot(tmp_path), OPTS) as m:
        assert m.domains == ("package-0", "core-0", "uncore-0", "dram-0")
        assert m.source == "measured"
        assert m.resolution.unit == "J"
        assert m.read() == dict.fromkeys(m.domains, 0.0)
        fp.set_energy(tmp_path, "intel-rapl:0", 1_000_000 + 2_500_000)  # +2.5 J
        fp.set_energy(tmp_path, "intel-rapl:0:2", 300_000 + 400_000)  # +0.4 J
        r = m.read()
        assert r["package-0"] == pytest.approx(2.5)
        assert r["dram-0"] == pytest.approx(0.4)
        assert r["core-0"] == 0.0
        assert "measured" in m.describe()


def test_two_sockets_and_psys_get_distinct_domains(tmp_path: Path) -> None:
    fp.intel_tree(tmp_path, sockets=2, psys=True)
    with RaplMeter.probe(SysRoot(tmp_path), OPTS) as m:
        assert m.domains == (
            "package-0",
            "core-0",
            "uncore-0",
            "dram-0",
            "package-1",
            "core-1",
            "uncore-1",
            "dram-1",
            "psys",
        )


def test_amd_package_and_core(tmp_path: Path) -> None:
    fp.amd_tree(tmp_path)
    with RaplMeter.probe(SysRoot(tmp_path), OPTS) as m:
        assert m.domains == ("package-0", "core-0")
        fp.set_energy(tmp_path, "intel-rapl:0", 7_000_000 + 90_000_000)
        assert m.read()["package-0"] == pytest.approx(90.0)
        # No power limit files: the wrap bound assumes the fallback maximum power.
        wrap = fp.AMD_RANGE_UJ * 1e-6 / 500.0
        assert m.max_period_s == pytest.approx(wrap / 4)


def test_counter_wrap_between_reads(tmp_path: Path) -> None:
    zones = [fp.Zone("intel-rapl:0", "package-0", energy_uj=1000, max_range_uj=10_000_000)]
    fp.write_zones(tmp_path, zones)
    with RaplMeter.probe(SysRoot(tmp_path), OPTS) as m:
        fp.set_energy(tmp_path, "intel-rapl:0", 9_999_000)
        assert m.read()["package-0"] == pytest.approx(9.998)
        fp.set_energy(tmp_path, "intel-rapl:0", 500_000)  # wrapped: +1000 µJ then +500000
        assert m.read()["package-0"] == pytest.approx(9.998 + 0.501)
        assert m.wraps == {"package-0": 1}
        fp.set_energy(tmp_path, "intel-rapl:0", 600_000)
        assert m.read()["package-0"] == pytest.approx(10.599)


@given(
    start=st.integers(0, 10**6 - 1),
    steps=st.lists(st.integers(0, 10**6 - 1), min_size=1, max_size=30),
)
def test_wrapping_counter_recovers_every_delta_below_the_range(
    start: int, steps: list[int]
) -> None:
    max_value = 10**6
    c = WrappingCounter(start, max_value)
    raw = start
    for s in steps:
        raw = (raw + s) % max_value
        c.update(raw)
    assert c.total == sum(steps)


def test_wrap_time_is_documented_and_bounds_the_period(tmp_path: Path) -> None:
    fp.intel_tree(tmp_path)
    zones = {z.domain: z for z in find_zones(SysRoot(tmp_path))}
    # Highest limit of the package is PL2 = 180 W: 262,143 J / 180 W ≈ 1456 s.
    assert zones["package-0"].wrap_s == pytest.approx(fp.INTEL_RANGE_UJ * 1e-6 / 180.0)
    # Sub-zones without limits inherit their package's.
    assert zones["dram-0"].max_power_w == pytest.approx(180.0)
    with RaplMeter.probe(SysRoot(tmp_path), OPTS) as m:
        assert m.max_period_s == pytest.approx(min(z.wrap_s for z in zones.values()) / 4)
        assert m.max_period_s > 60  # far above any sampling period
        assert "wrap" in m.describe()


def test_root_only_energy_uj_is_unavailable_with_how_to_grant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fp.intel_tree(tmp_path)
    for f in (tmp_path / "sys/class/powercap").glob("intel-rapl:*/energy_uj"):
        f.chmod(0o000)
    fp.simulate_non_root(monkeypatch)
    with pytest.raises(MeterUnavailable) as info:
        RaplMeter.probe(SysRoot(tmp_path), OPTS)
    reason = info.value.reason
    assert "root only" in reason
    assert "CVE-2020-8694" in reason
    assert "sudo chmod a+r /sys/class/powercap/intel-rapl:*/energy_uj" in reason
    assert info.value.meter == "rapl"


def test_root_only_simulation_still_reads_readable_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fp.intel_tree(tmp_path)
    fp.simulate_non_root(monkeypatch)
    with RaplMeter.probe(SysRoot(tmp_path), OPTS) as m:
        assert len(m.domains) == 4


def test_no_powercap_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(MeterUnavailable, match="no intel-rapl zone"):
        RaplMeter.probe(SysRoot(tmp_path), OPTS)


def test_missing_max_range_is_unavailable(tmp_path: Path) -> None:
    fp.write_zones(tmp_path, [fp.Zone("intel-rapl:0", "package-0", max_range_uj=None)])
    with pytest.raises(MeterUnavailable, match="max_energy_range_uj"):
        RaplMeter.probe(SysRoot(tmp_path), OPTS)


def test_unparsable_counter_is_unavailable(tmp_path: Path) -> None:
    fp.write_zones(tmp_path, [fp.Zone("intel-rapl:0", "package-0")])
    (tmp_path / "sys/class/powercap/intel-rapl:0/energy_uj").write_text("n/a\n")
    with pytest.raises(MeterUnavailable, match="energy_uj unreadable"):
        RaplMeter.probe(SysRoot(tmp_path), OPTS)


def test_mmio_duplicate_is_ignored(tmp_path: Path) -> None:
    fp.intel_tree(tmp_path)
    mmio = tmp_path / "sys/class/powercap/intel-rapl-mmio:0"
    mmio.mkdir()
    (mmio / "name").write_text("package-0\n")
    (mmio / "energy_uj").write_text("5\n")
    (mmio / "max_energy_range_uj").write_text("100\n")
    assert [z.zone for z in find_zones(SysRoot(tmp_path))] == [
        "intel-rapl:0",
        "intel-rapl:0:0",
        "intel-rapl:0:1",
        "intel-rapl:0:2",
    ]


def test_close_is_idempotent(tmp_path: Path) -> None:
    fp.intel_tree(tmp_path)
    m = RaplMeter.probe(SysRoot(tmp_path), OPTS)
    m.close()
    m.close()
    assert math.isfinite(m.max_period_s)


def test_a_read_later_than_the_wrap_safe_period_is_marked(tmp_path: Path) -> None:
    fp.intel_tree(tmp_path)
    clock = fp.ManualClock()
    with RaplMeter.probe(SysRoot(tmp_path), MeterOptions(clock=clock)) as m:
        zones = {z.domain: z for z in m.zones}
        dram_safe = zones["dram-0"].wrap_s / 4  # ≈ 91 s: the shortest
        pkg_safe = zones["package-0"].wrap_s / 4  # ≈ 364 s
        clock.advance(dram_safe / 2)
        m.read()
        assert m.gaps == dict.fromkeys(m.domains, 0)
        clock.advance(dram_safe + 1)  # late for dram only
        fp.set_energy(tmp_path, "intel-rapl:0", 1_000_000 + 5_000_000)
        r = m.read()
        assert r["package-0"] == pytest.approx(5.0)  # the figure is still returned...
        assert m.gaps == {"package-0": 0, "core-0": 0, "uncore-0": 0, "dram-0": 1}  # ...marked
        assert m.late_reads == 1
        clock.advance(pkg_safe + 1)  # late for every zone
        m.read()
        assert m.gaps == {"package-0": 1, "core-0": 1, "uncore-0": 1, "dram-0": 2}
        assert m.longest_interval_s == pytest.approx(pkg_safe + 1)


def test_a_late_rapl_read_makes_the_phase_unreliable(tmp_path: Path) -> None:
    fp.intel_tree(tmp_path)
    clock = fp.ManualClock()
    with (
        RaplMeter.probe(SysRoot(tmp_path), MeterOptions(clock=clock)) as m,
        Sampler([m], rate_hz=20) as s,
    ):
        with s.phase("compute") as clean:
            pass
        with s.phase("checkpoint") as late:
            clock.advance(m.max_period_s * 2)  # as if the sampler had been starved
            time.sleep(0.1)
    assert clean.result is not None and clean.result.reliable
    assert late.result is not None and not late.result.reliable
    assert late.result.gaps["rapl/dram-0"] == 1
    assert late.result.to_dict()["energy"]["rapl/dram-0"]["gaps"] == 1


def test_disabled_power_limits_do_not_bound_the_wrap_time(tmp_path: Path) -> None:
    limits = {
        "constraint_0_power_limit_uw": 100_000_000,
        "constraint_1_power_limit_uw": 120_000_000,
    }
    fp.write_zones(
        tmp_path,
        [
            fp.Zone("intel-rapl:0", "package-0", limits_uw=limits),
            fp.Zone("intel-rapl:1", "package-1", limits_uw=limits, enabled=False),
            fp.Zone("intel-rapl:2", "package-2", limits_uw={**limits, "constraint_1_enabled": 0}),
        ],
    )
    zones = {z.domain: z for z in find_zones(SysRoot(tmp_path))}
    assert zones["package-0"].max_power_w == pytest.approx(120.0)  # both limits in force
    assert zones["package-1"].max_power_w == pytest.approx(500.0)  # none in force: fallback
    assert zones["package-2"].max_power_w == pytest.approx(100.0)  # PL2 switched off

"""RAPL power limits on SYNTHETIC powercap trees: detection by name, refusals, restore."""

from __future__ import annotations

from pathlib import Path

import pytest

from greenckpt.errors import InvalidValueError
from greenckpt.platform.powercap import detect_power_zones, plan_power_limit
from greenckpt.platform.powercap import power_limit_absent_reason as absent
from greenckpt.platform.restore import NodeSettings
from greenckpt.platform.root import PlatformError, SysRoot
from greenckpt.testing.cpu import build_tree, diff, snapshot
from tests.platform.fake_levers import CAP, FakeLeverRoot, build_powercap


def test_zones_and_long_term_constraint_by_name(tmp_path: Path) -> None:
    build_powercap(tmp_path)
    z0 = tmp_path / CAP / "intel-rapl:0"
    # constraint numbers swapped: the long-term one is found by its name, not as constraint_0
    (z0 / "constraint_0_name").write_text("short_term\n")
    (z0 / "constraint_1_name").write_text("long_term\n")
    zones = {z.entry: z for z in detect_power_zones(SysRoot(tmp_path))}
    assert zones["intel-rapl:0"].constraint == 1 and zones["intel-rapl:1"].constraint == 0
    assert zones["intel-rapl:0:0"].domain == "dram" and zones["intel-rapl:1"].domain == "package"
    plan = plan_power_limit(SysRoot(tmp_path), 150, "package")
    assert [(w.path, w.value) for w in plan.writes] == [
        (f"{CAP}/intel-rapl:0/constraint_1_power_limit_uw", "150000000"),
        (f"{CAP}/intel-rapl:1/constraint_0_power_limit_uw", "150000000"),
    ]


def test_dram_limit_enables_the_zone_and_restore_disables_it(tmp_path: Path) -> None:
    tree = build_tree("intel-acpi-cpufreq", tmp_path / "tree")
    build_powercap(tree)
    root = FakeLeverRoot(tree)
    before = snapshot(tree)
    with NodeSettings(root, state_file=tmp_path / "s.json", signals=()) as node:
        result = node.set_power_limit(40, "dram")
        assert result.value == "dram 40 W" and result.notes == ()
        assert [p for p, _ in root.log][-2:] == [
            f"{CAP}/intel-rapl:0:0/enabled",
            f"{CAP}/intel-rapl:1:0/enabled",
        ]  # limits first, then enabled
        assert (tree / CAP / "intel-rapl:0:0/enabled").read_text() == "1\n"
    assert diff(before, snapshot(tree)) == []


@pytest.mark.parametrize("watts", [0, -1, 251, 1e9])
def test_out_of_range_refused_in_one_line(tmp_path: Path, watts: float) -> None:
    tree = build_powercap(tmp_path / "t")
    root = FakeLeverRoot(tree)
    with pytest.raises(InvalidValueError) as err:
        plan_power_limit(root, watts)
    msg = str(err.value)
    assert "\n" not in msg and f"{watts:g} W" in msg and "250 W" in msg and "intel-rapl:0" in msg


def test_no_maximum_refuses_every_value(tmp_path: Path) -> None:
    root = SysRoot(build_powercap(tmp_path, max_uw=None))
    with pytest.raises(
        PlatformError, match=r"^intel-rapl:0 reports no maximum power: cannot check 100 W"
    ):
        plan_power_limit(root, 100)
    assert "no maximum power" in (absent(root) or "")


def test_refusals_of_domain_and_absence(tmp_path: Path) -> None:
    with pytest.raises(InvalidValueError, match="use package or dram"):
        plan_power_limit(SysRoot(tmp_path), 10, "core")
    assert "no intel-rapl zone" in (absent(SysRoot(tmp_path)) or "")
    with pytest.raises(PlatformError, match=r"^no power limit control: no intel-rapl zone"):
        plan_power_limit(SysRoot(tmp_path), 10)

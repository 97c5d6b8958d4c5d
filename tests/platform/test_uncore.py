"""Uncore frequency on SYNTHETIC trees: both sysfs layouts, the safe write order, refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from greenckpt.errors import InvalidValueError
from greenckpt.platform.restore import NodeSettings
from greenckpt.platform.root import PlatformError, SysRoot
from greenckpt.platform.uncore import detect_uncore, plan_uncore, uncore_absent_reason
from greenckpt.testing.cpu import build_tree, diff, snapshot
from tests.platform.fake_levers import UNC, FakeLeverRoot, build_uncore


@pytest.mark.parametrize("layout", ["legacy", "new"])
def test_both_layouts_are_found(tmp_path: Path, layout: str) -> None:
    root = SysRoot(build_uncore(tmp_path, layout=layout))
    domains = detect_uncore(root)
    assert [d.package for d in domains] == [0, 1]
    assert {(d.initial_min_khz, d.initial_max_khz) for d in domains} == {(800000, 2400000)}


def test_new_layout_wins_over_legacy(tmp_path: Path) -> None:
    build_uncore(tmp_path, layout="legacy")
    build_uncore(tmp_path, layout="new", packages=1)
    assert [d.name for d in detect_uncore(SysRoot(tmp_path))] == ["uncore00"]


def test_absent_with_reason(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    assert "intel_uncore_frequency" in (uncore_absent_reason(SysRoot(tmp_path)) or "")
    (tmp_path / "proc/cpuinfo").write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\n")
    assert "AMD" in (uncore_absent_reason(SysRoot(tmp_path)) or "")
    with pytest.raises(PlatformError, match=r"^no uncore frequency control: AMD"):
        detect_uncore(SysRoot(tmp_path))


def test_safe_order_up_and_down(tmp_path: Path) -> None:
    root = SysRoot(build_uncore(tmp_path, packages=1))
    d = f"{UNC}/package_00_die_00"
    down = plan_uncore(root, 1000000).writes  # below the current min: min first
    assert [(w.path, w.value) for w in down] == [
        (f"{d}/min_freq_khz", "1000000"),
        (f"{d}/max_freq_khz", "1000000"),
    ]
    (tmp_path / d / "max_freq_khz").write_text("1500000\n")
    up = plan_uncore(root, 2000000).writes  # above the current max: max first
    assert [w.path.rsplit("/", 1)[1] for w in up] == ["max_freq_khz", "min_freq_khz"]


@pytest.mark.parametrize("bad", [700000, 2500000, 0, -5])
def test_out_of_range_refused_in_one_line_nothing_written(tmp_path: Path, bad: int) -> None:
    tree = build_tree("intel-acpi-cpufreq", tmp_path / "tree")
    build_uncore(tree)
    root = FakeLeverRoot(tree)
    before = snapshot(tree)
    state = tmp_path / "state.json"
    with NodeSettings(root, state_file=state, signals=()) as node:
        with pytest.raises(InvalidValueError) as err:
            node.set_uncore(bad)
        assert "\n" not in str(err.value) and str(bad) in str(err.value)
        assert not state.exists()
    assert root.log == [] and diff(before, snapshot(tree)) == []


def test_set_read_back_restore(tmp_path: Path) -> None:
    tree = build_tree("intel-acpi-cpufreq", tmp_path / "tree")
    build_uncore(tree, layout="new")
    root = FakeLeverRoot(tree)
    before = snapshot(tree)
    with NodeSettings(root, state_file=tmp_path / "s.json", signals=()) as node:
        result = node.set_uncore(1600000)
        assert result.lever == "uncore frequency" and result.notes == ()
        assert {d.min_khz for d in detect_uncore(root)} == {1600000}
        node.restore()
        assert diff(before, snapshot(tree)) == []
        node.set_uncore(2400000)
    assert diff(before, snapshot(tree)) == []

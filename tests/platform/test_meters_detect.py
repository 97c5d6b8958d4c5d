"""Auto-detection and explicit selection of meters on SYNTHETIC trees."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from greenckpt.platform.meters import (
    METERS,
    MeterOptions,
    MeterUnavailable,
    Probe,
    probe_meter,
    select_meters,
)
from greenckpt.platform.root import ENV_VAR, PlatformError, SysRoot
from greenckpt.platform.sampler import Sampler
from tests.platform import fake_power as fp


@pytest.fixture(autouse=True)
def _no_host_tools(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No real ipmitool or pynvml leaks in from the host unless a test installs a fake."""
    fp.hide_ipmitool(monkeypatch, tmp_path)
    fp.install_pynvml(monkeypatch, None)


def _status(sel_probes: Sequence[Probe]) -> dict[str, str]:
    return {p.name: p.status for p in sel_probes}


def test_nothing_but_proc_falls_back_to_the_estimator_with_reasons(tmp_path: Path) -> None:
    fp.proc_tree(tmp_path)
    with select_meters(root=SysRoot(tmp_path)) as sel:
        assert [m.name for m in sel.meters] == ["estimator"]
        assert sel.estimated
        st = _status(sel.probes)
        assert st == {
            "rapl": "unavailable",
            "perf": "unavailable",
            "estimator": "selected",
            "nvml": "unavailable",
            "ipmi": "unavailable",
            "csv": "not needed",
        }
        report = sel.report()
        assert "no intel-rapl zone" in report
        assert "no perf power PMU" in report
        assert "nvidia-ml-py" in report
        assert "not found on PATH" in report
        assert "estimated" in report


def test_an_empty_tree_has_no_meter_and_the_sampler_says_why(tmp_path: Path) -> None:
    sel = select_meters(root=SysRoot(tmp_path))
    assert sel.meters == []
    assert all(p.status != "selected" for p in sel.probes)
    with pytest.raises(PlatformError, match="no meter to sample") as info:
        Sampler(sel)
    assert "cpuinfo" in str(info.value)


def test_rapl_wins_and_makes_perf_and_estimator_unneeded(tmp_path: Path) -> None:
    fp.intel_tree(tmp_path)
    fp.power_pmu_tree(tmp_path)
    fp.proc_tree(tmp_path)
    with select_meters(root=SysRoot(tmp_path)) as sel:
        assert [m.name for m in sel.meters] == ["rapl"]
        assert not sel.estimated
        st = _status(sel.probes)
        assert st["perf"] == "not needed"
        assert st["estimator"] == "not needed"


def test_root_only_rapl_falls_back_with_the_grant_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fp.intel_tree(tmp_path)
    fp.proc_tree(tmp_path)
    for f in (tmp_path / "sys/class/powercap").glob("intel-rapl:*/energy_uj"):
        f.chmod(0o000)  # as root-only as it gets; see fake_power.simulate_non_root
    fp.simulate_non_root(monkeypatch)
    with select_meters(root=SysRoot(tmp_path)) as sel:
        assert [m.name for m in sel.meters] == ["estimator"]
        rapl = next(p for p in sel.probes if p.name == "rapl")
        assert rapl.status == "unavailable"
        assert "chmod a+r" in rapl.reason


def test_gpu_and_bmc_are_added_when_present(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fp.intel_tree(tmp_path)
    fp.install_pynvml(monkeypatch, fp.fake_pynvml(gpus=1))
    fp.install_ipmitool(monkeypatch, tmp_path, watts=350)
    with select_meters(root=SysRoot(tmp_path)) as sel:
        assert [m.name for m in sel.meters] == ["rapl", "nvml", "ipmi"]


def test_csv_is_added_when_a_log_is_given(tmp_path: Path) -> None:
    fp.proc_tree(tmp_path)
    log = tmp_path / "wall.csv"
    log.write_text("1.0,10\n")
    with select_meters(root=SysRoot(tmp_path), options=MeterOptions(csv_path=log)) as sel:
        assert [m.name for m in sel.meters] == ["estimator", "csv"]


def test_explicit_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fp.intel_tree(tmp_path)
    fp.proc_tree(tmp_path)
    fp.install_ipmitool(monkeypatch, tmp_path)
    with select_meters(["rapl", "ipmi"], root=SysRoot(tmp_path)) as sel:
        assert [m.name for m in sel.meters] == ["rapl", "ipmi"]
        assert [p.status for p in sel.probes] == ["selected", "selected"]
    with select_meters("estimator, rapl", root=SysRoot(tmp_path)) as sel:
        assert [m.name for m in sel.meters] == ["estimator", "rapl"]


def test_explicit_plus_auto_does_not_double_the_cpu(tmp_path: Path) -> None:
    fp.intel_tree(tmp_path)
    fp.proc_tree(tmp_path)
    with select_meters(["estimator", "auto"], root=SysRoot(tmp_path)) as sel:
        assert [m.name for m in sel.meters] == ["estimator"]
        assert _status(sel.probes)["rapl"] == "not needed"


def test_an_unavailable_named_meter_raises(tmp_path: Path) -> None:
    fp.proc_tree(tmp_path)
    with pytest.raises(MeterUnavailable, match="rapl: no intel-rapl zone"):
        select_meters(["estimator", "rapl"], root=SysRoot(tmp_path))


def test_unknown_name_is_one_line_listing_the_valid_ones(tmp_path: Path) -> None:
    with pytest.raises(PlatformError) as info:
        select_meters(["rapl", "wattmeter"], root=SysRoot(tmp_path))
    msg = str(info.value)
    assert "\n" not in msg
    assert "'wattmeter'" in msg
    for name in METERS:
        assert name in msg
    with pytest.raises(PlatformError, match="unknown meter"):
        probe_meter("nope", SysRoot(tmp_path))


@pytest.mark.parametrize(
    ("typo", "suggestion"),
    [("rapll", "'rapl'"), ("ipmitool", "'ipmi'"), ("estimater", "'estimator'")],
)
def test_unknown_name_suggests_the_nearest_valid_one(
    tmp_path: Path, typo: str, suggestion: str
) -> None:
    with pytest.raises(PlatformError) as info:
        select_meters([typo], root=SysRoot(tmp_path))
    msg = str(info.value)
    assert "\n" not in msg
    assert f"did you mean {suggestion}" in msg
    assert "valid meters: rapl, perf" in msg


def test_probing_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fp.intel_tree(tmp_path, sockets=2, psys=True)
    fp.power_pmu_tree(tmp_path)
    fp.proc_tree(tmp_path)
    before = fp.snapshot(tmp_path)
    for names in (None, ["estimator"], ["rapl"]):
        select_meters(names, root=SysRoot(tmp_path)).close()
    assert fp.snapshot(tmp_path) == before


def test_root_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fp.amd_tree(tmp_path)
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    with select_meters() as sel:
        assert [m.name for m in sel.meters] == ["rapl"]
        assert sel.meters[0].domains == ("package-0", "core-0")

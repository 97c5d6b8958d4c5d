"""The perf power PMU: detection on SYNTHETIC trees, reading through a fake opener, and the
real ``perf_event_open`` wrapper exercised with a software counter where the kernel allows it.
"""

from __future__ import annotations

import errno
import time
from pathlib import Path

import pytest

from greenckpt.platform.meters import MeterOptions, MeterUnavailable, PerfPowerMeter
from greenckpt.platform.meters import perf as perf_mod
from greenckpt.platform.meters.perf import (
    PERF_COUNT_SW_TASK_CLOCK,
    PERF_TYPE_SOFTWARE,
    SyscallOpener,
    detect_power_pmu,
    paranoid_reason,
)
from greenckpt.platform.root import SysRoot
from tests.platform import fake_power as fp

SCALE = 2.3283064365386962890625e-10


def test_detects_events_scale_unit_type_and_paranoid(tmp_path: Path) -> None:
    fp.power_pmu_tree(tmp_path, events=("pkg", "ram", "cores", "gpu", "psys"), paranoid=2)
    pmu = detect_power_pmu(SysRoot(tmp_path))
    assert pmu.pmu_type == 23
    assert pmu.paranoid == 2
    assert pmu.cpus == (0,)
    by = {e.event: e for e in pmu.events}
    assert by["energy-pkg"].config == 0x02
    assert by["energy-ram"].config == 0x03
    assert by["energy-pkg"].stem == "package"
    assert by["energy-ram"].stem == "dram"
    assert by["energy-cores"].stem == "core"
    assert by["energy-gpu"].stem == "uncore"
    assert by["energy-pkg"].scale == SCALE
    assert by["energy-pkg"].unit == "Joules"


def test_no_pmu_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(MeterUnavailable, match="no perf power PMU"):
        detect_power_pmu(SysRoot(tmp_path))


def test_pmu_without_energy_events_is_unavailable(tmp_path: Path) -> None:
    fp.power_pmu_tree(tmp_path, events=())
    with pytest.raises(MeterUnavailable, match="no energy"):
        detect_power_pmu(SysRoot(tmp_path))


def test_wrong_unit_is_unavailable(tmp_path: Path) -> None:
    fp.power_pmu_tree(tmp_path, unit="Watts")
    with pytest.raises(MeterUnavailable, match="Joules"):
        detect_power_pmu(SysRoot(tmp_path))


def _as_real_root_non_root_user(monkeypatch: pytest.MonkeyPatch, opener: fp.FakePerfOpener) -> None:
    """Let the probe open the fake tree's PMU through ``opener``, as a user who is not root."""
    monkeypatch.setattr(SysRoot, "is_real", property(lambda self: True))
    monkeypatch.setattr(perf_mod, "SyscallOpener", lambda: opener)
    monkeypatch.setattr(perf_mod.os, "geteuid", lambda: 1000)


def test_a_capable_non_root_user_is_not_refused_for_the_paranoid_level(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CAP_PERFMON lets a non-root user open system-wide counters at any paranoid level: the
    probe must try, not judge by the level (which its own hint says CAP_PERFMON overrides)."""
    fp.power_pmu_tree(tmp_path, paranoid=2)
    opener = fp.FakePerfOpener()  # the kernel says yes: this process holds CAP_PERFMON
    _as_real_root_non_root_user(monkeypatch, opener)
    with PerfPowerMeter.probe(SysRoot(tmp_path), MeterOptions()) as m:
        assert m.domains == ("package-0", "dram-0")
        assert len(opener.opened) == 2


def test_a_refused_open_is_explained_by_the_paranoid_level(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fp.power_pmu_tree(tmp_path, paranoid=2)
    _as_real_root_non_root_user(monkeypatch, fp.FakePerfOpener(fail_errno=errno.EACCES))
    with pytest.raises(MeterUnavailable) as info:
        PerfPowerMeter.probe(SysRoot(tmp_path), MeterOptions())
    reason = info.value.reason
    assert "perf_event_open failed" in reason
    assert "perf_event_paranoid=2" in reason
    assert "sysctl kernel.perf_event_paranoid=0" in reason
    assert "CAP_PERFMON" in reason


def test_paranoid_reason_explains_levels_above_zero_only(tmp_path: Path) -> None:
    fp.power_pmu_tree(tmp_path, paranoid=2)
    reason = paranoid_reason(detect_power_pmu(SysRoot(tmp_path)))
    assert reason is not None and "perf_event_paranoid=2" in reason
    fp.power_pmu_tree(tmp_path, paranoid=0)
    assert paranoid_reason(detect_power_pmu(SysRoot(tmp_path))) is None


def test_fake_root_is_detected_but_never_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fp.power_pmu_tree(tmp_path, paranoid=-1)
    with pytest.raises(MeterUnavailable, match="machine's own root"):
        PerfPowerMeter.probe(SysRoot(tmp_path), MeterOptions())


def test_reads_scaled_counts_per_package(tmp_path: Path) -> None:
    fp.power_pmu_tree(tmp_path, events=("pkg", "ram", "psys"), cpumask="0,18")
    pmu = detect_power_pmu(SysRoot(tmp_path))
    opener = fp.FakePerfOpener(step=2**32)  # one joule per read at the 2^-32 scale
    with PerfPowerMeter.open(pmu, opener) as m:
        assert m.domains == ("package-0", "package-1", "dram-0", "dram-1", "psys")
        assert opener.opened == [(23, 2, 0), (23, 2, 18), (23, 3, 0), (23, 3, 18), (23, 5, 0)]
        assert m.source == "measured"
        first = m.read()
        second = m.read()
        for d in m.domains:
            assert second[d] - first[d] == pytest.approx(1.0)
    assert len(opener.closed) == 5


def test_open_failure_says_why_and_closes_what_was_opened(tmp_path: Path) -> None:
    fp.power_pmu_tree(tmp_path, paranoid=2)
    pmu = detect_power_pmu(SysRoot(tmp_path))
    with pytest.raises(MeterUnavailable, match="CAP_PERFMON"):
        PerfPowerMeter.open(pmu, fp.FakePerfOpener(fail_errno=errno.EACCES))


def test_cpumask_ranges_name_one_cpu_per_package(tmp_path: Path) -> None:
    fp.power_pmu_tree(tmp_path, cpumask="0-1,18")
    assert detect_power_pmu(SysRoot(tmp_path)).cpus == (0, 1, 18)


@pytest.mark.parametrize("cpumask", [b"zero", b"0,x", b"-1", b"0-99999999", b"\xff\xfe0"])
def test_garbage_cpumask_is_unavailable(tmp_path: Path, cpumask: bytes) -> None:
    fp.power_pmu_tree(tmp_path)
    (tmp_path / perf_mod.PMU_DIR / "cpumask").write_bytes(cpumask + b"\n")
    with pytest.raises(MeterUnavailable, match="cpumask"):
        detect_power_pmu(SysRoot(tmp_path))


def test_syscall_wrapper_counts_a_software_event() -> None:
    """The ctypes perf_event_open itself, on a counter any process may open on itself."""
    try:
        opener = SyscallOpener()
        fd = opener.open(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK, cpu=-1, pid=0)
    except OSError as exc:
        pytest.skip(f"perf_event_open not allowed here: {exc}")
    try:
        a = opener.read(fd)
        end = time.thread_time() + 0.02
        while time.thread_time() < end:
            pass
        b = opener.read(fd)
        assert b - a >= 5_000_000  # task clock in ns: at least 5 ms of the 20 ms spun
    finally:
        opener.close(fd)


def test_real_power_pmu_reads_if_present() -> None:
    root = SysRoot(Path("/"))
    if not (root / perf_mod.PMU_DIR).is_dir():
        pytest.skip("this machine has no perf power PMU (no RAPL: a VM or a non-x86 CPU)")
    try:
        m = PerfPowerMeter.probe(root, MeterOptions())
    except MeterUnavailable as exc:
        pytest.skip(f"power PMU present but not readable here: {exc.reason}")
    with m:
        a = m.read()
        time.sleep(0.1)
        b = m.read()
        assert all(b[d] >= a[d] for d in m.domains)

"""cpuidle listing and control, and the /dev/cpu_dma_latency request, on SYNTHETIC trees."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from greenckpt.platform.cpuidle import CpuDmaLatency, CpuidleController
from greenckpt.platform.root import PlatformError, SysRoot
from tests.platform.fake_cpu import FakeSysfsRoot, build_tree, load_spec, snapshot

CPU = "sys/devices/system/cpu"


def make(tmp_path: Path, name: str, **kw: object) -> tuple[FakeSysfsRoot, CpuidleController]:
    build_tree(name, tmp_path / name)
    root = FakeSysfsRoot(tmp_path / name, **kw)  # type: ignore[arg-type]
    return root, CpuidleController(root)


def test_list_states(tmp_path: Path) -> None:
    _, ctl = make(tmp_path, "intel-acpi-cpufreq")
    assert ctl.available()
    info = ctl.detect()
    assert info.driver == "intel_idle"
    assert info.governor == "menu"
    assert info.cpus == (0, 1, 2, 3)
    assert info.names() == ("POLL", "C1", "C1E", "C6")
    c6 = info.for_cpu(3)[3]
    assert (c6.cpu, c6.index, c6.name, c6.desc) == (3, 3, "C6", "MWAIT 0x20")
    assert c6.latency_s == pytest.approx(133e-6)
    assert c6.residency_s == pytest.approx(600e-6)
    assert not c6.disabled
    assert c6.disable_path == f"{CPU}/cpu3/cpuidle/state3/disable"


def test_disable_deeper_than_latency_on_every_cpu(tmp_path: Path) -> None:
    root, ctl = make(tmp_path, "intel-acpi-cpufreq")
    res = ctl.disable(deeper_than_s=10e-6)  # C1E is exactly 10 µs: stays enabled
    assert root.log == [(f"{CPU}/cpu{c}/cpuidle/state3/disable", "1") for c in range(4)]
    assert {s.name for s in res.states} == {"C6"}
    assert all(s.disabled for s in res.states)
    after = ctl.detect()
    assert [s.name for s in after.states if s.disabled] == ["C6"] * 4
    root.log.clear()
    res = ctl.disable(deeper_than_s=1e-6)  # C1 (2 µs) and C1E join; C6 already disabled
    assert sorted(w.path for w in res.written) == sorted(
        f"{CPU}/cpu{c}/cpuidle/state{i}/disable" for c in range(4) for i in (1, 2)
    )


def test_disable_by_name_on_some_cpus_then_enable_all(tmp_path: Path) -> None:
    root, ctl = make(tmp_path, "intel-acpi-cpufreq")
    ctl.disable(names=["C1E", "C6"], cpus=[1])
    assert root.log == [
        (f"{CPU}/cpu1/cpuidle/state2/disable", "1"),
        (f"{CPU}/cpu1/cpuidle/state3/disable", "1"),
    ]
    root.log.clear()
    res = ctl.enable()
    assert root.log == [
        (f"{CPU}/cpu1/cpuidle/state2/disable", "0"),
        (f"{CPU}/cpu1/cpuidle/state3/disable", "0"),
    ]
    assert not any(s.disabled for s in res.states)
    assert len(res.states) == 16


def test_names_with_spaces(tmp_path: Path) -> None:
    root, ctl = make(tmp_path, "vm-no-cpufreq")
    ctl.disable(names=["haltpoll idle"])
    assert root.log == [(f"{CPU}/cpu{c}/cpuidle/state1/disable", "1") for c in range(2)]


def test_invalid_requests_write_nothing(tmp_path: Path) -> None:
    root, ctl = make(tmp_path, "intel-acpi-cpufreq")
    before = snapshot(root.path)
    with pytest.raises(PlatformError) as err:
        ctl.disable(names=["C6", "C7"])
    assert str(err.value) == "no C-state named 'C7': available POLL, C1, C1E, C6"
    with pytest.raises(PlatformError, match="say which C-states"):
        ctl.disable()
    with pytest.raises(PlatformError, match="non-negative number of seconds"):
        ctl.disable(deeper_than_s=-1.0)
    with pytest.raises(
        PlatformError, match=r"CPU 7 has no idle states.*CPUs with idle states are 0-3"
    ):
        ctl.disable(names=["C6"], cpus=[0, 7])
    assert root.log == [] and snapshot(root.path) == before


def test_unknown_cstate_among_many_names_the_nearest(tmp_path: Path) -> None:
    """A node with many states (here 9): the message names the closest, not all of them."""
    spec = load_spec("intel-acpi-cpufreq")
    extra = ["C3", "C6S", "C7", "C7S", "C8"]
    spec["cpuidle"]["states"] += [
        {"name": n, "desc": "MWAIT", "latency_us": 200 + 10 * i, "residency_us": 800}
        for i, n in enumerate(extra)
    ]
    root = FakeSysfsRoot(build_tree(spec, tmp_path / "t"))
    ctl = CpuidleController(root)
    with pytest.raises(PlatformError) as err:
        ctl.disable(names=["C10"])
    assert str(err.value) == "no C-state named 'C10': nearest C1, C1E (of 9)"
    with pytest.raises(PlatformError) as err:
        ctl.disable(names=["C9", "POL"])
    msg = str(err.value)
    assert msg.startswith("no C-state named 'C9': nearest ")
    assert msg.endswith("; 'POL': nearest POLL (of 9)")
    assert root.log == []


def test_nothing_matches_is_noted(tmp_path: Path) -> None:
    _, ctl = make(tmp_path, "intel-acpi-cpufreq")
    plan = ctl.plan_disable(deeper_than_s=1.0)
    assert plan.writes == () and plan.states == ()
    assert "nothing to disable" in plan.notes[0]


def test_permission_denied(tmp_path: Path) -> None:
    _, ctl = make(tmp_path, "intel-acpi-cpufreq", deny_writes=True)
    with pytest.raises(PlatformError, match=r"root \(or write access to the cpuidle files\)"):
        ctl.disable(names=["C6"])


def test_no_cpuidle(tmp_path: Path) -> None:
    spec_root = tmp_path / "bare"
    build_tree({"cpus": 2, "cpufreq": None, "cpuidle": None}, spec_root)
    ctl = CpuidleController(SysRoot(spec_root))
    assert not ctl.available()
    with pytest.raises(PlatformError) as err:
        ctl.detect()
    assert str(err.value) == (
        f"cpuidle not available: no idle states under {spec_root}/sys/devices/system/cpu/"
        "cpu*/cpuidle (driver: none)"
    )


def test_this_machine_lists_states_read_only() -> None:
    ctl = CpuidleController(SysRoot(Path("/")))
    if not ctl.available():
        pytest.skip("no cpuidle on this machine")
    info = ctl.detect()
    assert info.states and all(s.latency_s >= 0 for s in info.states)


# --------------------------------------------------------------------------------------------
# /dev/cpu_dma_latency
# --------------------------------------------------------------------------------------------


def test_dma_latency_holds_while_open(tmp_path: Path) -> None:
    root, _ = make(tmp_path, "intel-acpi-cpufreq")
    dev = root.path / "dev/cpu_dma_latency"
    with CpuDmaLatency(20e-6, root) as req:
        assert req.active and req.latency_us == 20
        assert struct.unpack("=i", dev.read_bytes()[:4]) == (20,)
        fd = req._fd
        assert fd is not None
        os.fstat(fd)  # still open inside the block
    assert not req.active
    req.close()  # idempotent


def test_dma_latency_errors(tmp_path: Path) -> None:
    with pytest.raises(PlatformError, match="non-negative"):
        CpuDmaLatency(-1.0, SysRoot(tmp_path))
    with pytest.raises(PlatformError, match="32-bit"):
        CpuDmaLatency(1e6, SysRoot(tmp_path))
    with pytest.raises(PlatformError, match=r"cpu_dma_latency not available"):
        CpuDmaLatency(0.0, SysRoot(tmp_path)).open()

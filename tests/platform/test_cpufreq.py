"""cpufreq detection and control on SYNTHETIC trees (acpi-cpufreq, intel_pstate HWP,
amd-pstate passive, a VM without cpufreq): what is detected, which files are written in which
order, what is read back, and that invalid requests write nothing."""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from greenckpt.platform.cpufreq import (
    CpufreqController,
    CpufreqResult,
    Method,
    SysfsWrite,
    format_hz,
    limit_writes,
    name_choices,
    parse_cpu_list,
)
from greenckpt.platform.root import PlatformError, SysRoot
from tests.platform.fake_cpu import FakeSysfsRoot, build_tree, load_spec, snapshot

P0 = "sys/devices/system/cpu/cpufreq/policy0"
P2 = "sys/devices/system/cpu/cpufreq/policy2"


def make(tmp_path: Path, name: str, **kw: object) -> tuple[FakeSysfsRoot, CpufreqController]:
    build_tree(name, tmp_path / name)
    root = FakeSysfsRoot(tmp_path / name, **kw)  # type: ignore[arg-type]
    return root, CpufreqController(root)


def set_frequency(
    ctl: CpufreqController, hz: float, cpus: Iterable[int] | None = None, method: Method = "auto"
) -> CpufreqResult:
    """Plan and apply with no state file: the bare writes under test (a session that must be
    restored goes through NodeSettings, which records first)."""
    return ctl.apply(ctl.plan_frequency(hz, cpus, method))


def set_governor(
    ctl: CpufreqController, governor: str, cpus: Iterable[int] | None = None
) -> CpufreqResult:
    """Plan and apply a governor switch with no state file (see :func:`set_frequency`)."""
    return ctl.apply(ctl.plan_governor(governor, cpus))


# --------------------------------------------------------------------------------------------
# Detection
# --------------------------------------------------------------------------------------------


def test_detect_acpi_cpufreq_table_and_shared_policies(tmp_path: Path) -> None:
    _, ctl = make(tmp_path, "intel-acpi-cpufreq")
    info = ctl.detect()
    assert info.driver.name == "acpi-cpufreq"
    assert info.driver.family == "acpi-cpufreq"
    assert not info.driver.hwp_active
    assert info.driver.override_note is None
    assert [p.name for p in info.policies] == ["policy0", "policy2"]
    p0 = info.policy("policy0")
    assert p0.cpus == (0, 1) and p0.related_cpus == (0, 1)
    assert info.policy("policy2").cpus == (2, 3)
    assert info.cpus == (0, 1, 2, 3)
    assert p0.governor == "schedutil"
    assert "userspace" in p0.available_governors and p0.offers_userspace
    assert p0.frequencies_hz is not None
    assert p0.frequencies_hz[0] == 1_200_000_000  # kHz converted to Hz, ascending
    assert p0.frequencies_hz[-1] == 2_601_000_000
    assert (p0.min_hz, p0.max_hz) == (1_200_000_000, 2_601_000_000)
    assert p0.setspeed_hz is None  # "<unsupported>" under schedutil
    assert p0.cur_hz == 1_200_000_000
    assert p0.epp is None


def test_detect_intel_pstate_active_hwp(tmp_path: Path) -> None:
    _, ctl = make(tmp_path, "intel-pstate-hwp")
    info = ctl.detect()
    d = info.driver
    assert (d.name, d.family, d.mode, d.hwp_active) == (
        "intel_pstate",
        "intel_pstate",
        "active",
        True,
    )
    assert d.override_note is not None and "HWP" in d.override_note
    assert "may override" in d.override_note
    p = info.policies[0]
    assert p.frequencies_hz is None
    assert (p.cpuinfo_min_hz, p.cpuinfo_max_hz) == (800_000_000, 4_700_000_000)
    assert p.available_governors == ("performance", "powersave")
    assert not p.offers_userspace
    assert p.epp == "balance_performance"
    assert len(info.policies) == 4


def test_detect_amd_pstate_passive(tmp_path: Path) -> None:
    _, ctl = make(tmp_path, "amd-pstate-passive")
    info = ctl.detect()
    d = info.driver
    assert (d.name, d.family, d.mode, d.hwp_active) == (
        "amd-pstate",
        "amd-pstate",
        "passive",
        False,
    )
    assert d.override_note is None
    p = info.policies[0]
    assert p.frequencies_hz is None and p.offers_userspace
    assert (p.cpuinfo_min_hz, p.cpuinfo_max_hz) == (400_000_000, 4_350_000_000)


@pytest.mark.parametrize(
    ("driver", "status", "family", "hwp", "noted"),
    [
        ("intel_cpufreq", "passive", "intel_pstate", False, False),
        ("intel_pstate", "active", "intel_pstate", False, True),  # active, no HWP (no EPP)
        ("amd-pstate-epp", "active", "amd-pstate", True, True),
        ("amd-pstate", "guided", "amd-pstate", False, True),
        ("cppc_cpufreq", None, "cppc_cpufreq", False, False),
        ("some-soc-cpufreq", None, "other", False, False),
    ],
)
def test_detect_driver_variants(
    tmp_path: Path, driver: str, status: str | None, family: str, hwp: bool, noted: bool
) -> None:
    spec = load_spec("amd-pstate-passive")
    spec["cpufreq"]["driver"] = driver
    spec["cpufreq"].pop("amd_pstate_status")
    if driver.startswith("intel"):
        spec["cpufreq"]["intel_pstate_status"] = status
    elif driver.startswith("amd"):
        spec["cpufreq"]["amd_pstate_status"] = status
    if driver == "amd-pstate-epp":
        spec["cpufreq"]["epp"] = "balance_performance"
        spec["cpufreq"]["epp_available"] = ["performance", "balance_performance", "power"]
    build_tree(spec, tmp_path)
    d = CpufreqController(SysRoot(tmp_path)).detect().driver
    assert d.family == family
    assert d.mode == status
    assert d.hwp_active is hwp
    assert (d.override_note is not None) is noted


def test_no_cpufreq_is_a_clear_error(tmp_path: Path) -> None:
    root, ctl = make(tmp_path, "vm-no-cpufreq")
    assert not ctl.available()
    with pytest.raises(PlatformError) as err:
        ctl.detect()
    msg = str(err.value)
    assert msg == (
        f"cpufreq not available: no cpufreq policies under {root.path}/sys/devices/system/cpu/"
        "cpufreq (virtual machine or driver not loaded)"
    )
    with pytest.raises(PlatformError, match="not available"):
        set_frequency(ctl, 2e9)


def test_this_machine_without_cpufreq_says_so() -> None:
    """On a node without cpufreq (like the VM this was developed on) the message is clear."""
    ctl = CpufreqController(SysRoot(Path("/")))
    if ctl.available():
        pytest.skip("this machine has cpufreq policies")
    with pytest.raises(PlatformError, match=r"^cpufreq not available: no cpufreq policies under"):
        ctl.detect()


def test_inactive_policy_is_skipped(tmp_path: Path) -> None:
    _, ctl = make(tmp_path, "intel-acpi-cpufreq")
    # A policy whose CPUs are all offline cannot be read (the kernel answers EBUSY).
    (tmp_path / "intel-acpi-cpufreq" / P2 / "scaling_governor").unlink()
    info = ctl.detect()
    assert [p.name for p in info.policies] == ["policy0"]
    assert info.inactive_policies == ("policy2",)
    with pytest.raises(PlatformError, match=r"CPU 2 has no active cpufreq policy.*CPUs 0-1"):
        ctl.plan_frequency(2e9, cpus=[2])


# --------------------------------------------------------------------------------------------
# Setting a frequency
# --------------------------------------------------------------------------------------------


def test_acpi_userspace_writes_governor_then_setspeed(tmp_path: Path) -> None:
    root, ctl = make(tmp_path, "intel-acpi-cpufreq")
    res = set_frequency(ctl, 2.0e9)
    assert res.plan.method == "userspace"
    assert root.log == [
        (f"{P0}/scaling_governor", "userspace"),
        (f"{P0}/scaling_setspeed", "2000000"),  # kHz on the wire
        (f"{P2}/scaling_governor", "userspace"),
        (f"{P2}/scaling_setspeed", "2000000"),
    ]
    assert [s.cur_hz for s in res.applied] == [2_000_000_000, 2_000_000_000]
    assert all(s.governor == "userspace" and s.setspeed_hz == 2_000_000_000 for s in res.applied)
    assert res.holds
    assert "policy0: governor schedutil -> userspace" in res.notes
    # Already under userspace: only setspeed is written the second time.
    root.log.clear()
    set_frequency(ctl, 1.5e9)
    assert root.log == [
        (f"{P0}/scaling_setspeed", "1500000"),
        (f"{P2}/scaling_setspeed", "1500000"),
    ]


def test_userspace_widens_limits_that_exclude_the_frequency(tmp_path: Path) -> None:
    root, ctl = make(tmp_path, "intel-acpi-cpufreq")
    set_frequency(ctl, 1.4e9, method="clamp")
    root.log.clear()
    res = set_frequency(ctl, 2.4e9, cpus=[0])
    assert root.log == [
        (f"{P0}/scaling_governor", "userspace"),
        (f"{P0}/scaling_max_freq", "2400000"),  # max first: the new range lies above
        (f"{P0}/scaling_setspeed", "2400000"),
    ]
    assert res.applied[0].cur_hz == 2_400_000_000


def test_clamp_order_raising_and_lowering(tmp_path: Path) -> None:
    """The fake refuses min > max (EINVAL): the writes must come in the safe order."""
    root, ctl = make(tmp_path, "intel-acpi-cpufreq")
    set_frequency(ctl, 1.2e9, cpus=[0], method="clamp")
    assert root.log == [(f"{P0}/scaling_max_freq", "1200000")]  # min already 1.2 GHz
    root.log.clear()
    set_frequency(ctl, 2.6e9, cpus=[0], method="clamp")  # raising: max before min
    assert root.log == [
        (f"{P0}/scaling_max_freq", "2600000"),
        (f"{P0}/scaling_min_freq", "2600000"),
    ]
    root.log.clear()
    res = set_frequency(ctl, 1.5e9, cpus=[0], method="clamp")  # lowering: min before max
    assert root.log == [
        (f"{P0}/scaling_min_freq", "1500000"),
        (f"{P0}/scaling_max_freq", "1500000"),
    ]
    assert (res.applied[0].min_hz, res.applied[0].max_hz) == (1_500_000_000, 1_500_000_000)
    assert res.applied[0].cur_hz == 1_500_000_000


def test_naive_order_would_fail_on_the_fake(tmp_path: Path) -> None:
    """Sanity check of the fake itself: raising min above max is refused, as old kernels do."""
    root, _ = make(tmp_path, "intel-acpi-cpufreq")
    root.write(f"{P0}/scaling_max_freq", "1500000\n")
    with pytest.raises(OSError, match="Invalid argument"):
        root.write(f"{P0}/scaling_min_freq", "2000000\n")


def test_intel_pstate_hwp_clamps_and_notes_override(tmp_path: Path) -> None:
    root, ctl = make(tmp_path, "intel-pstate-hwp")
    res = set_frequency(ctl, 2.05e9, cpus=[1])  # no table: any kHz in the range
    assert res.plan.method == "clamp"
    pol1 = "sys/devices/system/cpu/cpufreq/policy1"
    assert root.log == [
        (f"{pol1}/scaling_min_freq", "2050000"),
        (f"{pol1}/scaling_max_freq", "2050000"),
    ]
    assert any("HWP" in n and "may override" in n for n in res.notes)
    assert res.applied[0].governor == "powersave"  # governor untouched
    with pytest.raises(PlatformError, match=r"policy0 offers no userspace governor.*performance"):
        ctl.plan_frequency(2e9, method="userspace")


def test_driver_rounding_is_reported(tmp_path: Path) -> None:
    """intel_pstate turns kHz into P-state ratios: the read-back says what really applies."""
    _, ctl = make(tmp_path, "intel-pstate-hwp", limit_step_khz=100_000)
    res = set_frequency(ctl, 2.05e9, cpus=[0])
    s = res.applied[0]
    assert (s.min_hz, s.max_hz, s.cur_hz) == (2_000_000_000,) * 3
    assert not res.holds
    assert "policy0: the limits read 2.00 GHz to 2.00 GHz, not 2.05 GHz" in " ".join(res.notes)
    assert "policy0: scaling_cur_freq reads 2.00 GHz, not the requested 2.05 GHz" in res.notes


def test_amd_pstate_passive_userspace_with_range(tmp_path: Path) -> None:
    root, ctl = make(tmp_path, "amd-pstate-passive")
    res = set_frequency(ctl, 2.05e9, cpus=[3])
    pol3 = "sys/devices/system/cpu/cpufreq/policy3"
    assert root.log == [
        (f"{pol3}/scaling_governor", "userspace"),
        (f"{pol3}/scaling_setspeed", "2050000"),
    ]
    assert res.applied[0].cur_hz == 2_050_000_000
    assert res.notes == ("policy3: governor schedutil -> userspace",)


def test_partial_policy_is_noted(tmp_path: Path) -> None:
    _, ctl = make(tmp_path, "intel-acpi-cpufreq")
    plan = ctl.plan_frequency(2e9, cpus=[2])
    assert [p.name for p in plan.policies] == ["policy2"]
    assert "policy2 also covers CPUs 3, which change too" in plan.notes


def test_set_governor(tmp_path: Path) -> None:
    root, ctl = make(tmp_path, "intel-acpi-cpufreq")
    res = set_governor(ctl, "performance", cpus=(0, 1))
    assert root.log == [(f"{P0}/scaling_governor", "performance")]
    assert res.applied[0].governor == "performance"
    assert res.applied[0].cur_hz == 2_601_000_000
    root.log.clear()
    assert set_governor(ctl, "performance", cpus=[0]).written == ()
    assert root.log == []


# --------------------------------------------------------------------------------------------
# Invalid requests change nothing
# --------------------------------------------------------------------------------------------


def test_frequency_not_in_table_names_nearest_and_writes_nothing(tmp_path: Path) -> None:
    root, ctl = make(tmp_path, "intel-acpi-cpufreq")
    before = snapshot(root.path)
    with pytest.raises(PlatformError) as err:
        set_frequency(ctl, 2.05e9)
    assert str(err.value) == "2.05 GHz is not offered by policy0: nearest 2.00 GHz, 2.10 GHz"
    with pytest.raises(
        PlatformError, match=r"^0.50 GHz is not offered by policy0: nearest 1.20 GHz$"
    ):
        set_frequency(ctl, 0.5e9)
    assert root.log == []
    assert snapshot(root.path) == before


def test_frequency_out_of_range_names_range(tmp_path: Path) -> None:
    root, ctl = make(tmp_path, "amd-pstate-passive")
    before = snapshot(root.path)
    with pytest.raises(PlatformError) as err:
        set_frequency(ctl, 5e9)
    assert str(err.value) == (
        "5.00 GHz is not offered by policy0: its range is 0.40 GHz to 4.35 GHz"
    )
    for bad in (0.0, -1e9, float("nan"), float("inf")):
        with pytest.raises(PlatformError, match="positive number of hertz"):
            set_frequency(ctl, bad)
    assert snapshot(root.path) == before


def test_one_invalid_policy_blocks_all_writes(tmp_path: Path) -> None:
    """Hybrid-like node: policy2 has a shorter table; validation covers every policy first."""
    root, ctl = make(tmp_path, "intel-acpi-cpufreq")
    (root.path / P2 / "scaling_available_frequencies").write_text("1800000 1600000 1200000\n")
    before = snapshot(root.path)
    with pytest.raises(PlatformError, match=r"^2.00 GHz is not offered by policy2"):
        set_frequency(ctl, 2e9)
    assert root.log == [] and snapshot(root.path) == before


def test_unknown_governor_names_available_and_writes_nothing(tmp_path: Path) -> None:
    root, ctl = make(tmp_path, "intel-pstate-hwp")
    before = snapshot(root.path)
    with pytest.raises(PlatformError) as err:
        set_governor(ctl, "userspace")
    assert str(err.value) == (
        "governor 'userspace' is not available on policy0 (driver intel_pstate): "
        "available performance, powersave"
    )
    with pytest.raises(PlatformError, match="not a governor name"):
        set_governor(ctl, "../../etc")
    assert snapshot(root.path) == before


def test_unknown_governor_among_many_names_the_nearest(tmp_path: Path) -> None:
    """Beyond six governors the message names the closest ones, not the whole list."""
    spec = load_spec("intel-acpi-cpufreq")
    spec["cpufreq"]["governors"] += ["interactive", "sched_ext", "walt", "ondemand_plus"]
    root = FakeSysfsRoot(build_tree(spec, tmp_path / "t"))
    with pytest.raises(PlatformError) as err:
        set_governor(CpufreqController(root), "performence")
    assert str(err.value) == (
        "governor 'performence' is not available on policy0 (driver acpi-cpufreq): "
        "nearest performance (of 10)"
    )
    with pytest.raises(PlatformError, match=r"nearest ondemand, ondemand_plus \(of 10\)$"):
        set_governor(CpufreqController(root), "ondemnd")
    assert root.log == []


def test_name_choices() -> None:
    few = ["performance", "powersave"]
    assert name_choices("perf", few) == "available performance, powersave"
    assert name_choices("x", []) == "available none"
    many = [f"C{i}" for i in range(10)]
    assert name_choices("C7s", many).startswith("nearest C7")
    assert name_choices("zzzzzz", many) == "none close; 10 available: C0, C1, C2, C3, C4, C5, ..."


@pytest.mark.parametrize(
    ("attr", "text"),
    [
        ("affected_cpus", "0 x"),
        ("affected_cpus", "-1"),
        ("related_cpus", "3-1"),
        ("related_cpus", "0,,1\x00"),
    ],
)
def test_garbage_cpu_list_is_a_one_line_platform_error(
    tmp_path: Path, attr: str, text: str
) -> None:
    root, ctl = make(tmp_path, "intel-acpi-cpufreq")
    (root.path / P2 / attr).write_text(text + "\n")
    with pytest.raises(PlatformError) as err:
        ctl.detect()
    msg = str(err.value)
    assert msg.startswith(f"unexpected content in {root.path / P2 / attr}: ")
    assert "\n" not in msg


def test_parse_cpu_list_refuses_garbage() -> None:
    for bad in ("a", "1-", "-3", "3-1", "0 1.5"):
        with pytest.raises(ValueError, match="CPU"):
            parse_cpu_list(bad)


def test_unknown_cpu_and_method(tmp_path: Path) -> None:
    root, ctl = make(tmp_path, "intel-acpi-cpufreq")
    with pytest.raises(PlatformError, match=r"CPU 9 has no active cpufreq policy.*0-3"):
        set_frequency(ctl, 2e9, cpus=[0, 9])
    with pytest.raises(PlatformError, match="unknown method"):
        set_frequency(ctl, 2e9, method="fast")  # type: ignore[arg-type]
    with pytest.raises(PlatformError, match="no CPUs given"):
        set_frequency(ctl, 2e9, cpus=[])
    assert root.log == []


def test_permission_denied_says_root_is_needed(tmp_path: Path) -> None:
    _, ctl = make(tmp_path, "intel-acpi-cpufreq", deny_writes=True)
    with pytest.raises(PlatformError) as err:
        set_frequency(ctl, 2e9)
    msg = str(err.value)
    assert "\n" not in msg
    assert "permission denied" in msg and "root (or write access to the cpufreq files)" in msg
    assert msg.endswith("(nothing was written)")


def test_os_error_mid_sequence_is_one_line(tmp_path: Path) -> None:
    _, ctl = make(tmp_path, "intel-acpi-cpufreq", fail_on="policy2/scaling_governor")
    with pytest.raises(PlatformError) as err:
        set_frequency(ctl, 2e9)
    assert "Input/output error" in str(err.value)
    assert "after 2 earlier write(s)" in str(err.value)


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def test_format_hz_and_cpu_lists() -> None:
    assert format_hz(2.05e9) == "2.05 GHz"
    assert format_hz(2.1e9) == "2.10 GHz"
    assert format_hz(2_050_500_000) == "2.0505 GHz"
    assert format_hz(800e6) == "0.80 GHz"
    assert parse_cpu_list("0 1 2 3") == (0, 1, 2, 3)
    assert parse_cpu_list("0-2,8\n") == (0, 1, 2, 8)
    assert parse_cpu_list("") == ()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    start=st.tuples(st.integers(800, 4700), st.integers(800, 4700)).map(sorted),
    target=st.tuples(st.integers(800, 4700), st.integers(800, 4700)).map(sorted),
)
def test_limit_writes_never_show_min_above_max(start: list[int], target: list[int]) -> None:
    """From any valid [min, max] to any valid target, the fake kernel accepts every write."""
    spec = load_spec("intel-pstate-hwp")
    spec["cpus"] = 1
    spec["cpufreq"]["scaling_min_khz"], spec["cpufreq"]["scaling_max_khz"] = (
        start[0] * 1000,
        start[1] * 1000,
    )
    with tempfile.TemporaryDirectory() as tmp:
        root = FakeSysfsRoot(build_tree(spec, Path(tmp)))
        writes = limit_writes(
            P0, start[0] * 1000, start[1] * 1000, target[0] * 1000, target[1] * 1000
        )
        for w in writes:
            root.write(w.path, w.value + "\n")
        assert root.read(f"{P0}/scaling_min_freq") == str(target[0] * 1000)
        assert root.read(f"{P0}/scaling_max_freq") == str(target[1] * 1000)
        assert all(isinstance(w, SysfsWrite) for w in writes)


def test_limit_writes_refuses_inverted_target() -> None:
    with pytest.raises(PlatformError, match="above maximum"):
        limit_writes(P0, 1000, 2000, 3000, 2500)

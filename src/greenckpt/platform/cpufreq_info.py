"""What a node's cpufreq offers: its scaling driver, its policies and their limits and tables.

Why: every frequency request is checked against what the kernel shows (the table or range of
each policy, the governors offered, whether HWP or the platform may override a request), and
every driver has its quirks (acpi-cpufreq's ``userspace`` governor, intel_pstate and amd-pstate
active modes without one). Reading is kept apart from writing (:mod:`~greenckpt.platform.cpufreq`)
so probes and reports read without any way to change the node. Hertz inside, kHz on the wire:
values are converted here. Driver by driver: docs/design/restore.md.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from greenckpt.platform.cpunotation import format_hz, name_choices, parse_cpu_list
from greenckpt.platform.root import PlatformError, SysRoot

__all__ = [
    "AMD_PSTATE_STATUS",
    "CPUFREQ_DIR",
    "CPU_DIR",
    "INTEL_PSTATE_STATUS",
    "USERSPACE",
    "CpufreqDriver",
    "CpufreqInfo",
    "CpufreqPolicy",
    "PolicyState",
    "detect_cpufreq",
    "policy_names",
    "read_policy_state",
]

CPU_DIR = "sys/devices/system/cpu"
"""Where the kernel lists CPUs (relative to the root)."""
CPUFREQ_DIR = f"{CPU_DIR}/cpufreq"
"""Where cpufreq policies live (``policy0``, ``policy1``, ...)."""
INTEL_PSTATE_STATUS = f"{CPU_DIR}/intel_pstate/status"
AMD_PSTATE_STATUS = f"{CPU_DIR}/amd_pstate/status"

USERSPACE = "userspace"

_POLICY_RE = re.compile(r"policy(\d+)")


def _khz_to_hz(khz: int) -> int:
    return khz * 1000


def _read(root: SysRoot, rel: str) -> str:
    try:
        return root.read(rel)
    except FileNotFoundError as exc:
        raise PlatformError(f"missing cpufreq attribute {root / rel}") from exc
    except PermissionError as exc:
        raise PlatformError(
            f"cannot read {root / rel}: permission denied; root (or read access) is needed"
        ) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise PlatformError(f"cannot read {root / rel}: {exc}") from exc


def _read_khz(root: SysRoot, rel: str) -> int:
    text = _read(root, rel)
    try:
        value = int(text)
    except ValueError as exc:
        raise PlatformError(f"unexpected content in {root / rel}: {text[:40]!r}") from exc
    return value


def _read_optional_khz(root: SysRoot, rel: str) -> int | None:
    text = root.read_or_none(rel)
    if text is None or not text.isdigit():
        return None
    return int(text)


@dataclass(frozen=True)
class CpufreqDriver:
    """The scaling driver and what it means for frequency requests.

    ``hwp_active`` is True when hardware-managed P-states are in charge (intel_pstate active with
    HWP, amd-pstate-epp active): the hardware picks the frequency inside [min, max].
    ``override_note`` is set whenever a requested frequency may not be held exactly (HWP, the
    intel_pstate internal governor, amd-pstate guided mode) and is copied into every result.
    """

    name: str
    family: str
    """``acpi-cpufreq``, ``intel_pstate``, ``amd-pstate``, ``cppc_cpufreq`` or ``other``."""
    mode: str | None
    """intel_pstate / amd_pstate ``status`` (active, passive, guided) where the driver has one."""
    hwp_active: bool
    override_note: str | None


@dataclass(frozen=True)
class CpufreqPolicy:
    """One cpufreq policy as read from sysfs (all frequencies in hertz)."""

    name: str
    """``policy0``: the kernel names a policy after its first CPU."""
    path: str
    """Directory relative to the root."""
    cpus: tuple[int, ...]
    """``affected_cpus``: the online CPUs this policy controls."""
    related_cpus: tuple[int, ...]
    """``related_cpus``: every CPU of the policy, online or not."""
    driver: str
    governor: str
    available_governors: tuple[str, ...]
    frequencies_hz: tuple[int, ...] | None
    """``scaling_available_frequencies`` ascending, or None when the driver has no table."""
    cpuinfo_min_hz: int
    cpuinfo_max_hz: int
    min_hz: int
    max_hz: int
    cur_hz: int | None
    setspeed_hz: int | None
    """The ``userspace`` governor's target; None under any other governor."""
    has_setspeed: bool
    epp: str | None
    """``energy_performance_preference`` where the driver exposes it (HWP / amd-pstate-epp)."""

    @property
    def offers_userspace(self) -> bool:
        """True when a frequency can be requested through ``userspace`` + ``scaling_setspeed``."""
        return USERSPACE in self.available_governors and self.has_setspeed

    def check_offered(self, hz: float) -> int:
        """The request in kHz when this policy offers ``hz``; else a one-line PlatformError."""
        if not math.isfinite(hz) or hz <= 0:
            raise PlatformError(f"a frequency must be a positive number of hertz, got {hz!r}")
        khz = round(hz / 1000)
        if self.frequencies_hz:
            table_khz = [f // 1000 for f in self.frequencies_hz]
            if khz in table_khz:
                return khz
            below = [f for f in self.frequencies_hz if f < khz * 1000]
            above = [f for f in self.frequencies_hz if f > khz * 1000]
            nearest = ([below[-1]] if below else []) + ([above[0]] if above else [])
            raise PlatformError(
                f"{format_hz(hz)} is not offered by {self.name}: nearest "
                + ", ".join(format_hz(f) for f in nearest)
            )
        lo, hi = self.cpuinfo_min_hz, self.cpuinfo_max_hz
        if not lo <= khz * 1000 <= hi:
            raise PlatformError(
                f"{format_hz(hz)} is not offered by {self.name}: its range is "
                f"{format_hz(lo)} to {format_hz(hi)}"
            )
        return khz


@dataclass(frozen=True)
class CpufreqInfo:
    """Everything detected about the node's cpufreq setup."""

    root: str
    driver: CpufreqDriver
    policies: tuple[CpufreqPolicy, ...]
    """Active policies (at least one CPU online), in policy-number order."""
    inactive_policies: tuple[str, ...]
    """Policies whose CPUs are all offline: their attributes cannot be read or written."""

    def policy(self, name: str) -> CpufreqPolicy:
        """The active policy called ``name``; PlatformError naming the others if none."""
        for p in self.policies:
            if p.name == name:
                return p
        choices = name_choices(name, [p.name for p in self.policies])
        raise PlatformError(f"no active cpufreq policy {name!r}: {choices}")

    @property
    def cpus(self) -> tuple[int, ...]:
        """Every CPU controlled by an active policy."""
        return tuple(sorted({c for p in self.policies for c in p.cpus}))


def _detect_driver(root: SysRoot, driver: str, policy_path: str) -> CpufreqDriver:
    """Classify ``scaling_driver`` and read the pstate drivers' ``status`` files."""
    has_epp = root.read_or_none(f"{policy_path}/energy_performance_preference") is not None
    if driver in ("intel_pstate", "intel_cpufreq"):
        return _intel_driver(root, driver, has_epp)
    if driver.startswith("amd-pstate"):
        return _amd_driver(root, driver)
    if driver in ("acpi-cpufreq", "cppc_cpufreq"):
        return CpufreqDriver(driver, driver, None, False, None)
    return CpufreqDriver(driver, "other", None, False, None)


def _intel_driver(root: SysRoot, driver: str, has_epp: bool) -> CpufreqDriver:
    """intel_pstate active (the driver's or HWP's own choice) or passive (``intel_cpufreq``)."""
    mode = root.read_or_none(INTEL_PSTATE_STATUS) or (
        "active" if driver == "intel_pstate" else "passive"
    )
    if driver == "intel_pstate":  # active mode: the driver's own P-state selection
        hwp = has_epp
        who = "HWP (hardware P-states)" if hwp else "the intel_pstate internal governor"
        note = (
            f"intel_pstate is in active mode: {who} chooses the frequency within "
            "[scaling_min_freq, scaling_max_freq] and may override the requested frequency"
        )
        return CpufreqDriver(driver, "intel_pstate", mode, hwp, note)
    return CpufreqDriver(driver, "intel_pstate", mode, False, None)


def _amd_driver(root: SysRoot, driver: str) -> CpufreqDriver:
    """amd-pstate active (EPP: the processor chooses), guided, or passive."""
    mode = root.read_or_none(AMD_PSTATE_STATUS) or (
        "active" if driver == "amd-pstate-epp" else "passive"
    )
    if driver == "amd-pstate-epp" or mode == "active":
        note = (
            "amd-pstate is in active (EPP) mode: the processor's autonomous selection "
            "chooses the frequency within [scaling_min_freq, scaling_max_freq] and may "
            "override the requested frequency"
        )
        return CpufreqDriver(driver, "amd-pstate", mode, True, note)
    if mode == "guided":
        note = (
            "amd-pstate is in guided mode: the platform may run above the requested "
            "frequency, up to scaling_max_freq"
        )
        return CpufreqDriver(driver, "amd-pstate", mode, False, note)
    return CpufreqDriver(driver, "amd-pstate", mode, False, None)


def _read_policy(root: SysRoot, name: str) -> CpufreqPolicy | None:
    """One policy, or None when it is inactive (all its CPUs offline: reads fail with EBUSY)."""
    path = f"{CPUFREQ_DIR}/{name}"
    governor = root.read_or_none(f"{path}/scaling_governor")
    if governor is None:
        return None
    cpus = _read_cpu_list(root, f"{path}/affected_cpus", _read(root, f"{path}/affected_cpus"))
    related_text = root.read_or_none(f"{path}/related_cpus") or ""
    related = _read_cpu_list(root, f"{path}/related_cpus", related_text) or cpus
    table_text = root.read_or_none(f"{path}/scaling_available_frequencies")
    table: tuple[int, ...] | None = None
    if table_text:
        try:
            table = tuple(sorted({_khz_to_hz(int(t)) for t in table_text.split()}))
        except ValueError as exc:
            raise PlatformError(
                f"unexpected content in {root / path}/scaling_available_frequencies: "
                f"{table_text[:60]!r}"
            ) from exc
    setspeed_text = root.read_or_none(f"{path}/scaling_setspeed")
    return CpufreqPolicy(
        name=name,
        path=path,
        cpus=cpus,
        related_cpus=related,
        driver=_read(root, f"{path}/scaling_driver"),
        governor=governor,
        available_governors=tuple(
            (root.read_or_none(f"{path}/scaling_available_governors") or governor).split()
        ),
        frequencies_hz=table or None,
        cpuinfo_min_hz=_khz_to_hz(_read_khz(root, f"{path}/cpuinfo_min_freq")),
        cpuinfo_max_hz=_khz_to_hz(_read_khz(root, f"{path}/cpuinfo_max_freq")),
        min_hz=_khz_to_hz(_read_khz(root, f"{path}/scaling_min_freq")),
        max_hz=_khz_to_hz(_read_khz(root, f"{path}/scaling_max_freq")),
        cur_hz=_opt_hz(_read_optional_khz(root, f"{path}/scaling_cur_freq")),
        setspeed_hz=_opt_hz(_read_optional_khz(root, f"{path}/scaling_setspeed")),
        has_setspeed=setspeed_text is not None,
        epp=root.read_or_none(f"{path}/energy_performance_preference"),
    )


def _read_cpu_list(root: SysRoot, rel: str, text: str) -> tuple[int, ...]:
    try:
        return parse_cpu_list(text)
    except ValueError as exc:
        raise PlatformError(f"unexpected content in {root / rel}: {text[:40]!r}") from exc


def _opt_hz(khz: int | None) -> int | None:
    return None if khz is None else _khz_to_hz(khz)


def policy_names(root: SysRoot) -> list[str]:
    """``policyN`` directory names under the root, in numeric order (empty when none)."""
    base = root / CPUFREQ_DIR
    try:
        entries = [e.name for e in base.iterdir()]
    except OSError:
        return []
    found = [(int(m.group(1)), n) for n in entries if (m := _POLICY_RE.fullmatch(n))]
    return [n for _, n in sorted(found)]


@dataclass(frozen=True)
class PolicyState:
    """What the kernel shows for one policy after a change (read back, in hertz)."""

    policy: str
    cpus: tuple[int, ...]
    governor: str
    min_hz: int
    max_hz: int
    setspeed_hz: int | None
    cur_hz: int | None


def detect_cpufreq(root: SysRoot) -> CpufreqInfo:
    """Read every policy under ``root``; PlatformError when there is no cpufreq at all."""
    names = policy_names(root)
    if not names:
        raise PlatformError(
            f"cpufreq not available: no cpufreq policies under {root / CPUFREQ_DIR} "
            "(virtual machine or driver not loaded)"
        )
    policies: list[CpufreqPolicy] = []
    inactive: list[str] = []
    for name in names:
        policy = _read_policy(root, name)
        if policy is None:
            inactive.append(name)
        else:
            policies.append(policy)
    if not policies:
        raise PlatformError(
            f"cpufreq not available: every policy under {root / CPUFREQ_DIR} is "
            "inactive (all its CPUs offline)"
        )
    driver = _detect_driver(root, policies[0].driver, policies[0].path)
    return CpufreqInfo(str(root.path), driver, tuple(policies), tuple(inactive))


def read_policy_state(root: SysRoot, policy: CpufreqPolicy) -> PolicyState:
    """Read back governor, limits, setspeed and current frequency of one policy."""
    path = policy.path
    return PolicyState(
        policy=policy.name,
        cpus=policy.cpus,
        governor=_read(root, f"{path}/scaling_governor"),
        min_hz=_khz_to_hz(_read_khz(root, f"{path}/scaling_min_freq")),
        max_hz=_khz_to_hz(_read_khz(root, f"{path}/scaling_max_freq")),
        setspeed_hz=_opt_hz(_read_optional_khz(root, f"{path}/scaling_setspeed")),
        cur_hz=_opt_hz(_read_optional_khz(root, f"{path}/scaling_cur_freq")),
    )

"""CPU frequency control through the kernel's cpufreq sysfs interface: plans and their writes.

Why: greenckpt lowers (or raises) the CPU frequency while a checkpoint is written or read,
because I/O-bound phases often cost less energy at a lower frequency; doing that safely on real
nodes means one place for every driver's quirks. :class:`CpufreqController` validates a request
against every targeted policy before planning a single write (so nothing is written when one
refuses, and the restore session can save exactly what a plan touches), writes limits in an
order the kernel always accepts (:func:`limit_writes`), and reads back what applies. What the
node offers is read by :mod:`~greenckpt.platform.cpufreq_info`; writes go through
:mod:`~greenckpt.platform.sysfs_writes`. This module also keeps naming those modules' public
names. Driver by driver, and the rules: docs/design/restore.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from greenckpt.platform.cpufreq_info import (
    AMD_PSTATE_STATUS,
    CPU_DIR,
    CPUFREQ_DIR,
    INTEL_PSTATE_STATUS,
    USERSPACE,
    CpufreqDriver,
    CpufreqInfo,
    CpufreqPolicy,
    PolicyState,
    detect_cpufreq,
    policy_names,
    read_policy_state,
)
from greenckpt.platform.cpunotation import format_cpus, format_hz, name_choices, parse_cpu_list
from greenckpt.platform.root import PlatformError, SysRoot
from greenckpt.platform.sysfs_writes import SysfsWrite, WriteGuard, write_attributes

__all__ = [
    "AMD_PSTATE_STATUS",
    "CPUFREQ_DIR",
    "CPU_DIR",
    "INTEL_PSTATE_STATUS",
    "USERSPACE",
    "CpufreqController",
    "CpufreqDriver",
    "CpufreqInfo",
    "CpufreqPlan",
    "CpufreqPolicy",
    "CpufreqResult",
    "Method",
    "PolicyState",
    "SysfsWrite",
    "WriteGuard",
    "format_cpus",
    "format_hz",
    "limit_writes",
    "name_choices",
    "parse_cpu_list",
    "policy_names",
    "write_attributes",
]

Method = Literal["auto", "userspace", "clamp"]
"""How to request a frequency: ``userspace`` (governor + ``scaling_setspeed``), ``clamp``
(``scaling_min_freq`` = ``scaling_max_freq``), or ``auto`` (userspace where offered)."""

_GOVERNOR_RE = re.compile(r"[A-Za-z0-9_\-]+")


@dataclass(frozen=True)
class CpufreqPlan:
    """A validated request: the writes to make, in order, and the policies they touch."""

    action: str
    policies: tuple[CpufreqPolicy, ...]
    """The targeted policies as they were before any write."""
    writes: tuple[SysfsWrite, ...]
    requested_hz: int | None = None
    method: Literal["userspace", "clamp"] | None = None
    governor: str | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class CpufreqResult:
    """The outcome of a plan: what was written and what now applies."""

    plan: CpufreqPlan
    written: tuple[SysfsWrite, ...]
    applied: tuple[PolicyState, ...]
    notes: tuple[str, ...]
    """Plan notes plus read-back observations (e.g. the current frequency differs)."""

    @property
    def holds(self) -> bool:
        """True when every policy's current frequency equals the requested one (if any)."""
        want = self.plan.requested_hz
        return want is None or all(s.cur_hz == want for s in self.applied)


def limit_writes(
    path: str, cur_min_khz: int, cur_max_khz: int, new_min_khz: int, new_max_khz: int
) -> list[SysfsWrite]:
    """Writes that move [min, max] to the new limits without ever showing min > max.

    If the new minimum is above the current maximum, the maximum goes first (new max ≥ new min >
    current max ≥ current min, so the write is valid), then the minimum. Otherwise the minimum
    goes first (new min ≤ current max), then the maximum (new max ≥ new min, now the minimum).
    Unchanged limits are not written. Used for requests and for restoration alike.
    """
    if new_min_khz > new_max_khz:
        raise PlatformError(
            f"{path}: minimum {format_hz(new_min_khz * 1000)} above maximum "
            f"{format_hz(new_max_khz * 1000)}"
        )
    wmin = SysfsWrite(f"{path}/scaling_min_freq", str(new_min_khz))
    wmax = SysfsWrite(f"{path}/scaling_max_freq", str(new_max_khz))
    order = [wmax, wmin] if new_min_khz > cur_max_khz else [wmin, wmax]
    current = {wmin.path: cur_min_khz, wmax.path: cur_max_khz}
    return [w for w in order if int(w.value) != current[w.path]]


# --------------------------------------------------------------------------------------------
# Controller
# --------------------------------------------------------------------------------------------


class CpufreqController:
    """Detects the cpufreq setup under a root and plans/applies frequency and governor changes.

    The controller holds no state besides the root: every call reads the tree afresh, so plans
    reflect the current settings (another tool may have changed them in between). It records
    nothing for restoring the node, so it offers no one-call "set": a session changes settings
    through :class:`greenckpt.platform.restore.NodeSettings`, which saves every attribute to its
    state file before :meth:`apply` writes it.
    """

    def __init__(self, root: SysRoot | None = None) -> None:
        self.root = root if root is not None else SysRoot.default()

    # detection -------------------------------------------------------------------------------

    def available(self) -> bool:
        """True when at least one cpufreq policy directory exists under the root."""
        return bool(policy_names(self.root))

    def detect(self) -> CpufreqInfo:
        """Read every policy; PlatformError when there is no cpufreq at all."""
        return detect_cpufreq(self.root)

    def select(self, info: CpufreqInfo, cpus: Iterable[int] | None) -> list[CpufreqPolicy]:
        """Policies covering ``cpus`` (all active policies when None); refuse unknown CPUs.

        A frequency is set per policy, not per CPU: asking for CPU 2 of a policy that also
        covers CPU 3 changes both (the plan's notes say so).
        """
        if cpus is None:
            return list(info.policies)
        wanted = sorted(set(cpus))
        if not wanted:
            raise PlatformError("no CPUs given")
        chosen: list[CpufreqPolicy] = []
        for cpu in wanted:
            owner = next((p for p in info.policies if cpu in p.cpus), None)
            if owner is None:
                raise PlatformError(
                    f"CPU {cpu} has no active cpufreq policy (offline or nonexistent): "
                    f"policies cover CPUs {format_cpus(info.cpus)}"
                )
            if owner not in chosen:
                chosen.append(owner)
        return sorted(chosen, key=lambda p: int(p.name.removeprefix("policy")))

    # planning --------------------------------------------------------------------------------

    def plan_frequency(
        self, hz: float, cpus: Iterable[int] | None = None, method: Method = "auto"
    ) -> CpufreqPlan:
        """Validate a frequency request on every targeted policy and return its writes.

        ``userspace``: switch to the userspace governor (if needed), widen [min, max] to include
        the frequency if it lies outside (so the kernel does not clamp it), write
        ``scaling_setspeed``. ``clamp``: write min = max = frequency in the safe order. ``auto``
        picks userspace where every targeted policy offers it and HWP is not in charge.
        Raises PlatformError, having written nothing, when any policy refuses.
        """
        if method not in ("auto", "userspace", "clamp"):
            raise PlatformError(f"unknown method {method!r}: use auto, userspace or clamp")
        wanted = None if cpus is None else list(cpus)
        info = self.detect()
        policies = self.select(info, wanted)
        for p in policies:  # every policy validated before the first write is planned
            p.check_offered(hz)
        khz = policies[0].check_offered(hz)
        chosen = _choose_method(method, info, policies)

        writes: list[SysfsWrite] = []
        notes: list[str] = []
        for p in policies:
            cur_min, cur_max = p.min_hz // 1000, p.max_hz // 1000
            if chosen == "userspace":
                if p.governor != USERSPACE:
                    writes.append(SysfsWrite(f"{p.path}/scaling_governor", USERSPACE))
                    notes.append(f"{p.name}: governor {p.governor} -> userspace")
                new_min, new_max = min(cur_min, khz), max(cur_max, khz)
                writes.extend(limit_writes(p.path, cur_min, cur_max, new_min, new_max))
                writes.append(SysfsWrite(f"{p.path}/scaling_setspeed", str(khz)))
            else:
                writes.extend(limit_writes(p.path, cur_min, cur_max, khz, khz))
            if wanted is not None:
                extra = sorted(set(p.cpus) - set(wanted))
                if extra:
                    notes.append(
                        f"{p.name} also covers CPUs {format_cpus(extra)}, which change too"
                    )
        # Guided mode only lets the platform go above a userspace target; min = max holds.
        if info.driver.override_note and not (info.driver.mode == "guided" and chosen == "clamp"):
            notes.append(info.driver.override_note)
        return CpufreqPlan(
            action=f"set frequency {format_hz(khz * 1000)} via {chosen}",
            policies=tuple(policies),
            writes=tuple(writes),
            requested_hz=khz * 1000,
            method=chosen,
            notes=tuple(notes),
        )

    def plan_governor(self, governor: str, cpus: Iterable[int] | None = None) -> CpufreqPlan:
        """Validate a governor switch on every targeted policy and return its writes."""
        if not _GOVERNOR_RE.fullmatch(governor):
            raise PlatformError(f"not a governor name: {governor!r}")
        info = self.detect()
        policies = self.select(info, None if cpus is None else list(cpus))
        for p in policies:  # every policy validated before the first write
            if governor not in p.available_governors:
                raise PlatformError(
                    f"governor {governor!r} is not available on {p.name} (driver {p.driver}): "
                    + name_choices(governor, p.available_governors)
                )
        writes = tuple(
            SysfsWrite(f"{p.path}/scaling_governor", governor)
            for p in policies
            if p.governor != governor
        )
        notes: list[str] = []
        if info.driver.override_note:
            notes.append(info.driver.override_note)
        return CpufreqPlan(
            action=f"set governor {governor}",
            policies=tuple(policies),
            writes=writes,
            governor=governor,
            notes=tuple(notes),
        )

    # applying --------------------------------------------------------------------------------

    def apply(self, plan: CpufreqPlan, *, around_each: WriteGuard | None = None) -> CpufreqResult:
        """Write a plan in order (each write inside ``around_each``, see
        :func:`write_attributes`), then read back what applies and note any difference."""
        written = write_attributes(
            self.root, plan.writes, what="the cpufreq files", around_each=around_each
        )
        applied = tuple(self.read_state(p) for p in plan.policies)
        notes = list(plan.notes)
        want = plan.requested_hz
        for s in applied:
            if want is not None and plan.method == "clamp" and (s.min_hz, s.max_hz) != (want, want):
                notes.append(
                    f"{s.policy}: the limits read {format_hz(s.min_hz)} to {format_hz(s.max_hz)}, "
                    f"not {format_hz(want)} (the driver may round to its own steps)"
                )
            if want is not None and plan.method == "userspace" and s.setspeed_hz != want:
                shown = "unsupported" if s.setspeed_hz is None else format_hz(s.setspeed_hz)
                notes.append(f"{s.policy}: scaling_setspeed reads {shown}, not {format_hz(want)}")
            if want is not None and s.cur_hz is not None and s.cur_hz != want:
                notes.append(
                    f"{s.policy}: scaling_cur_freq reads {format_hz(s.cur_hz)}, not the "
                    f"requested {format_hz(want)}"
                )
            if plan.governor is not None and s.governor != plan.governor:
                notes.append(f"{s.policy}: governor reads {s.governor}, not {plan.governor}")
        return CpufreqResult(plan, tuple(written), applied, tuple(notes))

    def read_state(self, policy: CpufreqPolicy) -> PolicyState:
        """Read back governor, limits, setspeed and current frequency of one policy."""
        return read_policy_state(self.root, policy)


def _choose_method(
    method: Method, info: CpufreqInfo, policies: Iterable[CpufreqPolicy]
) -> Literal["userspace", "clamp"]:
    """``auto``: userspace where every targeted policy offers it and HWP is not in charge;
    ``userspace``: refused (PlatformError) where a policy lacks it; ``clamp`` as asked."""
    if method == "auto":
        use_userspace = not info.driver.hwp_active and all(p.offers_userspace for p in policies)
        return "userspace" if use_userspace else "clamp"
    if method == "userspace":
        lacking = next((p for p in policies if not p.offers_userspace), None)
        if lacking is not None:
            raise PlatformError(
                f"{lacking.name} offers no userspace governor (driver {lacking.driver}): "
                f"available {', '.join(lacking.available_governors)}; use method 'clamp'"
            )
        return "userspace"
    return "clamp"

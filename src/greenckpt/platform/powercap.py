"""RAPL power limits through the Linux powercap interface: detect, plan, apply.

Why: a power limit is an alternative to a fixed frequency (Power-Check capped the cores that
only wait during a checkpoint): the hardware picks the fastest operating point under the cap.
The kernel's ``intel_rapl`` driver (Intel, and AMD Zen) exposes each RAPL domain as a zone
``sys/class/powercap/intel-rapl:N`` (name ``package-N``) with subzones ``intel-rapl:N:M``
(``dram``, ``core``, ``uncore``); each zone has constraints ``constraint_K_*`` named
``long_term`` / ``short_term``, and an ``enabled`` flag. Setting a limit of W watts on a
domain ("package" or "dram") writes the long-term constraint's ``power_limit_uw`` (found by
name, not by number) of every zone of that domain, then ``enabled`` = 1 where it read 0 (the
session restores it). The allowed range is 0 < W·10⁶ ≤ ``constraint_K_max_power_uw``; a zone
that reports no maximum refuses every value (it cannot be checked). Refusals are one line,
name the value, the range and the zone, and nothing is written.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass

from greenckpt.errors import InvalidValueError
from greenckpt.platform.root import PlatformError, SysRoot
from greenckpt.platform.sysfs_writes import SysfsWrite, WriteGuard, write_attributes

__all__ = [
    "DOMAINS",
    "POWERCAP",
    "PowerLimitPlan",
    "PowerLimitResult",
    "PowerZone",
    "apply_power_limit",
    "detect_power_zones",
    "plan_power_limit",
    "power_limit_absent_reason",
    "touched_paths",
]

POWERCAP = "sys/class/powercap"
DOMAINS = ("package", "dram")
"""The domains a power limit may be set on."""
LONG_TERM = "long_term"
_ZONE = re.compile(r"intel-rapl:(\d{1,3})(?::(\d{1,3}))?")
_CONSTRAINT = re.compile(r"constraint_(\d{1,2})_name")
_NO_CONTROL = "no power limit control"


@dataclass(frozen=True)
class PowerZone:
    """One RAPL zone and its long-term constraint, as read (microwatts)."""

    entry: str
    """``intel-rapl:0`` or ``intel-rapl:0:1``."""
    path: str
    """Directory relative to the root."""
    name: str
    """The zone's ``name``: ``package-0``, ``dram``, ``core``, ``uncore``, ``psys``."""
    domain: str
    """``package`` for ``package-N``, else the name."""
    enabled: str | None
    """The zone's ``enabled`` text (``"0"``/``"1"``), None when it has none."""
    constraint: int | None
    """Index K of the ``long_term`` constraint, None when the zone has none."""
    limit_uw: int | None
    max_power_uw: int | None
    """``constraint_K_max_power_uw``; None (or 0) when the zone reports no maximum."""

    @property
    def limit_path(self) -> str:
        """``constraint_K_power_limit_uw`` of the long-term constraint."""
        return f"{self.path}/constraint_{self.constraint}_power_limit_uw"

    def check(self, watts: float) -> int:
        """The limit in µW when this zone accepts ``watts``; else one line, nothing written."""
        if self.constraint is None:
            raise PlatformError(
                f"{self.entry} ({self.name}) has no {LONG_TERM} constraint: cannot set {watts:g} W"
            )
        if not self.max_power_uw:
            raise PlatformError(
                f"{self.entry} reports no maximum power: cannot check {watts:g} W "
                f"(constraint_{self.constraint}_max_power_uw missing or 0); nothing was changed"
            )
        uw = round(watts * 1e6)
        if not 0 < uw <= self.max_power_uw:
            raise InvalidValueError(
                f"power limit {watts:g} W is outside the range {self.entry} ({self.name}) "
                f"reports: above 0 up to {self.max_power_uw / 1e6:g} W "
                f"(constraint_{self.constraint}_max_power_uw); nothing was changed"
            )
        return uw


@dataclass(frozen=True)
class PowerLimitPlan:
    """A validated request: the zones of the domain and the writes in order."""

    watts: float
    domain: str
    zones: tuple[PowerZone, ...]
    writes: tuple[SysfsWrite, ...]


@dataclass(frozen=True)
class PowerLimitResult:
    """What was written and what the zones read afterwards."""

    plan: PowerLimitPlan
    written: tuple[SysfsWrite, ...]
    applied: tuple[PowerZone, ...]
    notes: tuple[str, ...]


def _zone_entries(root: SysRoot) -> list[tuple[int, int | None, str]]:
    try:
        names = os.listdir(root / POWERCAP)
    except OSError:
        return []
    found = []
    for name in names:
        if m := _ZONE.fullmatch(name):
            found.append((int(m.group(1)), None if m.group(2) is None else int(m.group(2)), name))
    return sorted(found, key=lambda e: (e[0], -1 if e[1] is None else e[1]))


def _read_zone(root: SysRoot, entry: str) -> PowerZone:
    path = f"{POWERCAP}/{entry}"
    name = root.read_or_none(f"{path}/name") or entry
    domain = "package" if re.fullmatch(r"package-\d+", name) else name
    constraint = None
    try:
        files = sorted(os.listdir(root / path))
    except OSError:
        files = []
    for f in files:
        m = _CONSTRAINT.fullmatch(f)
        if m and root.read_or_none(f"{path}/{f}") == LONG_TERM:
            constraint = int(m.group(1))
            break
    limit = maximum = None
    if constraint is not None:
        limit = root.read_int_or_none(f"{path}/constraint_{constraint}_power_limit_uw")
        maximum = root.read_int_or_none(f"{path}/constraint_{constraint}_max_power_uw")
    enabled = root.read_or_none(f"{path}/enabled")
    return PowerZone(entry, path, name, domain, enabled, constraint, limit, maximum)


def detect_power_zones(root: SysRoot) -> tuple[PowerZone, ...]:
    """Every ``intel-rapl`` zone under the root (reads only; empty when there is none)."""
    return tuple(_read_zone(root, entry) for _, _, entry in _zone_entries(root))


def _check_domain(domain: str) -> None:
    if domain not in DOMAINS:
        raise InvalidValueError(
            f"unknown power-limit domain {domain!r}: use {' or '.join(DOMAINS)}"
        )


def power_limit_absent_reason(root: SysRoot, domain: str = "package") -> str | None:
    """Why a power limit cannot be set on ``domain`` here (None: it can)."""
    _check_domain(domain)
    zones = [z for z in detect_power_zones(root) if z.domain == domain]
    if not zones:
        if not _zone_entries(root):
            return (
                f"no intel-rapl zone under {root / POWERCAP} (no RAPL driver loaded — try "
                "`modprobe intel_rapl_msr` — or a CPU/VM without RAPL)"
            )
        return f"no RAPL zone of domain {domain!r} under {root / POWERCAP}"
    for z in zones:
        if z.constraint is None:
            return f"{z.entry} ({z.name}) has no {LONG_TERM} constraint"
        if not z.max_power_uw:
            return f"{z.entry} reports no maximum power: a limit cannot be checked"
        if not os.access(root / z.limit_path, os.W_OK):
            return f"{root / z.limit_path} is not writable: root is needed"
    return None


def plan_power_limit(root: SysRoot, watts: float, domain: str = "package") -> PowerLimitPlan:
    """Validate ``watts`` on every zone of ``domain`` (nothing planned when one refuses), then
    plan the long-term limit of each, followed by ``enabled`` = 1 where it read 0 (so the new
    limit, not the old one, is what starts being enforced)."""
    _check_domain(domain)
    if isinstance(watts, bool) or not isinstance(watts, int | float) or not math.isfinite(watts):
        raise InvalidValueError(f"a power limit must be a number of watts, got {watts!r}")
    zones = tuple(z for z in detect_power_zones(root) if z.domain == domain)
    if not zones:
        why = power_limit_absent_reason(root, domain)
        raise PlatformError(f"{_NO_CONTROL}: {why}")
    values = [z.check(watts) for z in zones]
    writes = [SysfsWrite(z.limit_path, str(uw)) for z, uw in zip(zones, values, strict=True)]
    writes += [SysfsWrite(f"{z.path}/enabled", "1") for z in zones if z.enabled == "0"]
    return PowerLimitPlan(float(watts), domain, zones, tuple(writes))


def touched_paths(plan: PowerLimitPlan) -> list[str]:
    """The files whose originals a session saves before applying ``plan``."""
    out = [z.limit_path for z in plan.zones]
    return out + [f"{z.path}/enabled" for z in plan.zones if z.enabled is not None]


def apply_power_limit(
    root: SysRoot, plan: PowerLimitPlan, *, around_each: WriteGuard | None = None
) -> PowerLimitResult:
    """Write ``plan`` (each write inside ``around_each``), read back, note any difference."""
    written = write_attributes(
        root, plan.writes, what="the powercap (RAPL) files", around_each=around_each
    )
    applied = tuple(_read_zone(root, z.entry) for z in plan.zones)
    want = round(plan.watts * 1e6)
    notes = [
        f"{z.entry}: power limit reads {z.limit_uw} uW, not {want} uW"
        for z in applied
        if z.limit_uw != want
    ]
    notes += [f"{z.entry}: enabled reads {z.enabled}, not 1" for z in applied if z.enabled == "0"]
    return PowerLimitResult(plan, tuple(written), applied, tuple(notes))

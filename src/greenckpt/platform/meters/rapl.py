"""RAPL energy counters through the Linux powercap interface (Intel, and AMD on recent kernels).

Why powercap rather than the MSRs: the kernel's ``intel_rapl`` drivers expose each RAPL domain
as a zone under ``/sys/class/powercap`` with a cumulative ``energy_uj`` counter in microjoules —
no ``msr`` module, no root for the read itself (once access is granted), the same files on
Intel and on AMD Zen (kernel ≥ 5.8 exposes AMD's package/core RAPL through the same
``intel-rapl`` control type).

The details are in docs/design/measurement.md ("Meters: RAPL through powercap").
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Self

from greenckpt.platform.meters.base import (
    Clock,
    Meter,
    MeterOptions,
    MeterRole,
    MeterUnavailable,
    Resolution,
    Source,
    WrappingCounter,
    open_counter,
    read_counter,
)
from greenckpt.platform.root import PlatformError, SysRoot

POWERCAP = "sys/class/powercap"
_ZONE_RE = re.compile(r"^intel-rapl:(\d+)(?::(\d+))?$")
FALLBACK_MAX_POWER_W = 500.0
"""Assumed highest power of a zone that states no limit, for the wrap-time bound."""
WRAP_SAFETY = 4.0
"""The sampler must read at least this many times per wrap period."""

GRANT_ACCESS = (
    "energy_uj is readable by root only (mode 0400 since Linux 5.10, CVE-2020-8694 "
    "'Platypus'); run as root, or grant read access until reboot with "
    "`sudo chmod a+r /sys/class/powercap/intel-rapl:*/energy_uj`, or at every boot with a "
    "systemd-tmpfiles line `z /sys/class/powercap/intel-rapl:*/energy_uj 0444 - - -` "
    "(or a udev rule / a group with g+r) — this re-exposes the side channel to local users"
)


@dataclass(frozen=True)
class RaplZone:
    """One powercap zone found under the root (nothing opened yet)."""

    zone: str  # e.g. "intel-rapl:0:1"
    domain: str  # e.g. "dram-0"
    path: Path
    max_range_uj: int
    max_power_w: float

    @property
    def wrap_s(self) -> float:
        """Seconds for the counter to wrap at the zone's highest power."""
        return self.max_range_uj * 1e-6 / self.max_power_w


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text(encoding="ascii").strip())
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def _highest_limit_w(path: Path) -> float | None:
    """The highest power limit in force (``constraint_*_power_limit_uw``) or stated maximum
    (``constraint_*_max_power_uw``) of a zone, in W; None when no limit is in force.

    A zone whose ``enabled`` reads 0, or a constraint whose ``constraint_N_enabled`` reads 0,
    has its ``power_limit_uw`` ignored: a limit that is not enforced bounds nothing.
    """
    zone_enabled = _read_int(path / "enabled") != 0
    limits: list[float] = []
    maxima: list[float] = []
    for f in sorted(path.glob("constraint_*_*_uw")):
        number, _, what = f.name.removeprefix("constraint_").partition("_")
        if what not in ("power_limit_uw", "max_power_uw"):
            continue
        value = _read_int(f)
        if value is None or value <= 0:
            continue
        if what == "max_power_uw":
            maxima.append(value * 1e-6)
        elif zone_enabled and _read_int(path / f"constraint_{number}_enabled") != 0:
            limits.append(value * 1e-6)
    if not limits:
        return None
    return max(limits + maxima)


def _unbounded_w(path: Path) -> float:
    """Assumed highest power of a zone with no limit in force: the fallback or its max_power."""
    maxima = [
        v * 1e-6 for f in sorted(path.glob("constraint_*_max_power_uw")) if (v := _read_int(f))
    ]
    return max([FALLBACK_MAX_POWER_W, *maxima])


def find_zones(root: SysRoot) -> list[RaplZone]:
    """The RAPL zones under ``root`` with their domain names and wrap bounds (reads only)."""
    base = root / POWERCAP
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        return []
    parsed: list[tuple[int, int | None, str]] = []
    for entry in entries:
        m = _ZONE_RE.match(entry)
        if m:
            parsed.append((int(m.group(1)), None if m.group(2) is None else int(m.group(2)), entry))
    parsed.sort(key=lambda p: (p[0], -1 if p[1] is None else p[1]))
    names: dict[str, str] = {}
    limits: dict[int, float] = {}
    zones: list[RaplZone] = []
    used: set[str] = set()
    for pkg, sub, entry in parsed:
        rel = f"{POWERCAP}/{entry}"
        name = root.read_or_none(f"{rel}/name") or entry
        names[entry] = name
        if sub is None:
            domain = name
        else:
            parent = names.get(f"intel-rapl:{pkg}", "")
            m = re.match(r"^package-(\d+)$", parent)
            domain = f"{name}-{m.group(1) if m else pkg}"
        if domain in used:
            domain = f"{domain}@{entry}"
        rng = root.read_or_none(f"{rel}/max_energy_range_uj")
        try:
            max_range = int(rng) if rng is not None else 0
        except ValueError:
            max_range = 0
        limit = _highest_limit_w(root / rel)
        if sub is None and limit is not None:
            limits[pkg] = limit
        max_power = limit or limits.get(pkg) or _unbounded_w(root / rel)
        if not (root / f"{rel}/energy_uj").exists():
            continue
        used.add(domain)
        zones.append(RaplZone(entry, domain, root / rel, max_range, max_power))
    return zones


RAPL_LIMIT_FACTOR = 2.0
"""A RAPL zone may exceed its highest limit briefly; twice that limit it may not."""


class RaplMeter(Meter):
    """Cumulative energy of every RAPL zone (package, core, uncore, dram, psys), measured."""

    name = "rapl"
    source: ClassVar[Source] = "measured"
    role: ClassVar[MeterRole] = "cpu"
    label = "RAPL"

    def power_bound(self, domain: str) -> tuple[float, str] | None:
        """Twice the zone's highest power limit (a zone may exceed it briefly)."""
        zone = next((z for z in self.zones if z.domain == domain), None)
        if zone is None:
            return None
        return zone.max_power_w * RAPL_LIMIT_FACTOR, f"{RAPL_LIMIT_FACTOR:g} × zone limit"

    def __init__(
        self, zones: list[RaplZone], fds: list[int], clock: Clock = time.monotonic
    ) -> None:
        self.zones = zones
        self._fds = fds
        self._clock = clock
        self._counters = [
            WrappingCounter(read_counter(fd), z.max_range_uj)
            for z, fd in zip(zones, fds, strict=True)
        ]
        self._t_read = clock()
        self._safe_s = [z.wrap_s / WRAP_SAFETY for z in zones]
        self.max_period_s = min(self._safe_s)
        self._gaps = {z.domain: 0 for z in zones}
        self.late_reads = 0
        self.longest_interval_s = 0.0

    @classmethod
    def probe(cls, root: SysRoot, options: MeterOptions) -> Self:
        zones = find_zones(root)
        if not zones:
            raise MeterUnavailable(
                cls.name,
                f"no intel-rapl zone with energy_uj under {root / POWERCAP} (no RAPL driver "
                "loaded — try `modprobe intel_rapl_msr` — or a CPU/VM without RAPL)",
            )
        bad = [z.zone for z in zones if z.max_range_uj <= 0]
        if bad:
            raise MeterUnavailable(
                cls.name,
                f"max_energy_range_uj missing or unreadable for {', '.join(bad)}: "
                "counter wraparound could not be corrected",
            )
        fds: list[int] = []
        try:
            for z in zones:
                fds.append(open_counter(z.path / "energy_uj"))
            return cls(zones, fds, options.clock)
        except PermissionError:
            _close_all(fds)
            raise MeterUnavailable(cls.name, GRANT_ACCESS) from None
        except (OSError, ValueError) as exc:
            _close_all(fds)
            what = os.strerror(exc.errno) if isinstance(exc, OSError) and exc.errno else str(exc)
            if isinstance(exc, OSError) and exc.errno in (errno.ENODATA, errno.EIO):
                what += " (zones present but the counters cannot be read, common in VMs)"
            raise MeterUnavailable(cls.name, f"energy_uj unreadable: {what}") from None

    @property
    def domains(self) -> tuple[str, ...]:
        return tuple(z.domain for z in self.zones)

    @property
    def resolution(self) -> Resolution:
        return Resolution(1e-6, "J")

    @property
    def wraps(self) -> dict[str, int]:
        """How many wraps each domain's counter has made since it was opened."""
        return {z.domain: c.wraps for z, c in zip(self.zones, self._counters, strict=True)}

    @property
    def gaps(self) -> Mapping[str, int]:
        """Reads later than the zone's wrap-safe period (a second wrap could have been missed)."""
        return self._gaps

    def read(self) -> dict[str, float]:
        if not self._fds:
            raise PlatformError("the rapl meter is closed")
        raw = [read_counter(fd) for fd in self._fds]
        t = self._clock()
        interval = t - self._t_read
        self._t_read = t
        if interval > self.max_period_s:
            self.late_reads += 1
            for z, safe in zip(self.zones, self._safe_s, strict=True):
                if interval > safe:
                    self._gaps[z.domain] += 1
        if interval > self.longest_interval_s and math.isfinite(interval):
            self.longest_interval_s = interval
        return {
            z.domain: c.update(value) * 1e-6
            for z, c, value in zip(self.zones, self._counters, raw, strict=True)
        }

    def describe(self) -> str:
        wrap = min(z.wrap_s for z in self.zones)
        return f"{super().describe()}; counters wrap after ≥{wrap:.0f} s"

    def close(self) -> None:
        _close_all(self._fds)
        self._fds = []

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)

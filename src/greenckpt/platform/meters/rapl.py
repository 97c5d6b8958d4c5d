"""RAPL energy counters through the Linux powercap interface (Intel, and AMD on recent kernels).

Why powercap rather than the MSRs: the kernel's ``intel_rapl`` drivers expose each RAPL domain
as a zone under ``/sys/class/powercap`` with a cumulative ``energy_uj`` counter in microjoules —
no ``msr`` module, no root for the read itself (once access is granted), the same files on
Intel and on AMD Zen (kernel ≥ 5.8 exposes AMD's package/core RAPL through the same
``intel-rapl`` control type).

Layout read (all through the :class:`~greenckpt.platform.root.SysRoot`)::

    sys/class/powercap/intel-rapl:0/{name,energy_uj,max_energy_range_uj}       package-0
    sys/class/powercap/intel-rapl:0/constraint_*_{power_limit,max_power}_uw     (optional)
    sys/class/powercap/intel-rapl:0:0/...                                       core
    sys/class/powercap/intel-rapl:0:1/...                                       uncore / dram
    sys/class/powercap/intel-rapl:1/...                                         psys (laptops)

Domains: a top-level zone keeps its ``name`` (``package-0``, ``psys``); a sub-zone gets its
package's number appended (``core-0``, ``uncore-0``, ``dram-0``) so that two sockets never
collide. Domains overlap physically (core ⊂ package ⊂ psys), so they are never summed here.
The ``intel-rapl-mmio`` control type, which duplicates the package counter on recent Intel
parts, is ignored so nothing is counted twice.

Wraparound: ``energy_uj`` is a 32-bit MSR scaled to µJ; it runs over
``0 .. max_energy_range_uj`` and wraps to zero. The usual range is 262,143 J
(``262143328850`` µJ), so at 250 W a package counter wraps every ~1,050 s (17.5 min); at 500 W
every ~8.7 min. A negative delta is one wrap and is corrected by adding
``max_energy_range_uj`` (:class:`~greenckpt.platform.meters.base.WrappingCounter`). Two wraps
between reads cannot be seen, so :attr:`RaplMeter.max_period_s` is a quarter of the shortest
wrap time, computed per zone from the range and the zone's highest power limit (or 500 W when
none is given); the sampler refuses a period above it (its default, 0.1 s, is four orders of
magnitude below).

Root-only counters: since Linux 5.10 (CVE-2020-8694, the "Platypus" side channel) ``energy_uj``
is mode 0400 owned by root. Opening it then raises ``PermissionError``; :meth:`RaplMeter.probe`
turns that into :class:`~greenckpt.platform.meters.base.MeterUnavailable` with the commands
that grant read access, and auto-detection falls back to the next meter.

Resolution: the interface counts in µJ; the hardware step (the RAPL energy-status unit, not
exposed by powercap) is typically 61 µJ for packages and 15.3 µJ for server DRAM.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Self

from greenckpt.platform.meters.base import (
    Meter,
    MeterOptions,
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


def _highest_limit_w(path: Path) -> float | None:
    """The highest ``constraint_*_power_limit_uw`` / ``constraint_*_max_power_uw``, in W."""
    best: float | None = None
    for f in sorted(path.glob("constraint_*_*_uw")):
        if not (f.name.endswith("_power_limit_uw") or f.name.endswith("_max_power_uw")):
            continue
        try:
            value = int(f.read_text(encoding="ascii").strip()) * 1e-6
        except (OSError, ValueError):
            continue
        if value > 0 and (best is None or value > best):
            best = value
    return best


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
        max_power = limit or limits.get(pkg) or FALLBACK_MAX_POWER_W
        if not (root / f"{rel}/energy_uj").exists():
            continue
        used.add(domain)
        zones.append(RaplZone(entry, domain, root / rel, max_range, max_power))
    return zones


class RaplMeter(Meter):
    """Cumulative energy of every RAPL zone (package, core, uncore, dram, psys), measured."""

    name = "rapl"
    source: ClassVar[Source] = "measured"

    def __init__(self, zones: list[RaplZone], fds: list[int]) -> None:
        self.zones = zones
        self._fds = fds
        self._counters = [
            WrappingCounter(read_counter(fd), z.max_range_uj)
            for z, fd in zip(zones, fds, strict=True)
        ]
        self.max_period_s = min(z.wrap_s for z in zones) / WRAP_SAFETY

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
            return cls(zones, fds)
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

    def read(self) -> dict[str, float]:
        if not self._fds:
            raise PlatformError("the rapl meter is closed")
        return {
            z.domain: c.update(read_counter(fd)) * 1e-6
            for z, fd, c in zip(self.zones, self._fds, self._counters, strict=True)
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

"""RAPL through the perf_event ``power`` PMU, read with ``perf_event_open`` via ctypes.

Why a second RAPL path: when powercap's ``energy_uj`` is root-only (or the powercap driver is
not loaded) the same counters are often still readable through perf, gated instead by
``kernel.perf_event_paranoid`` / ``CAP_PERFMON``. The perf counters are 64-bit and the kernel
folds the 32-bit MSR wraps into them, so no wraparound handling is needed here.

The details are in docs/design/measurement.md ("Meters: RAPL through perf").
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol, Self

from greenckpt.errors import DeviceIOError, InvalidValueError
from greenckpt.platform.cpufreq import parse_cpu_list
from greenckpt.platform.meters.base import (
    Meter,
    MeterOptions,
    MeterRole,
    MeterUnavailable,
    Resolution,
    Source,
)
from greenckpt.platform.root import SysRoot

PMU_DIR = "sys/bus/event_source/devices/power"
PARANOID = "proc/sys/kernel/perf_event_paranoid"
EVENT_DOMAINS: dict[str, str] = {
    "pkg": "package",
    "ram": "dram",
    "cores": "core",
    "gpu": "uncore",
    "psys": "psys",
}
"""perf event suffix → domain stem (names shared with the powercap meter)."""

SYSCALL_PERF_EVENT_OPEN: dict[str, int] = {
    "x86_64": 298,
    "amd64": 298,
    "i386": 336,
    "i686": 336,
    "aarch64": 241,
    "arm64": 241,
    "riscv64": 241,
}
PERF_FLAG_FD_CLOEXEC = 8
PERF_ATTR_SIZE_VER0 = 64
PERF_TYPE_SOFTWARE = 1
PERF_COUNT_SW_TASK_CLOCK = 1
MAX_CPUS = 1 << 16
"""A cpumask naming a CPU at or above this is garbage (Linux's NR_CPUS tops out at 8192)."""
_CPUMASK_RE = re.compile(r"[0-9]+(?:-[0-9]+)?(?:,[0-9]+(?:-[0-9]+)?)*")


class PerfEventAttr(ctypes.Structure):
    """``struct perf_event_attr`` up to ``PERF_ATTR_SIZE_VER0`` (the bitfield word as one u64)."""

    _fields_: ClassVar[list[tuple[str, type[ctypes._SimpleCData[int]]]]] = [
        ("type", ctypes.c_uint32),
        ("size", ctypes.c_uint32),
        ("config", ctypes.c_uint64),
        ("sample_period", ctypes.c_uint64),
        ("sample_type", ctypes.c_uint64),
        ("read_format", ctypes.c_uint64),
        ("flags", ctypes.c_uint64),  # disabled=0, inherit=0, ...: counting starts at open
        ("wakeup_events", ctypes.c_uint32),
        ("bp_type", ctypes.c_uint32),
        ("config1", ctypes.c_uint64),
    ]


class PerfOpener(Protocol):
    """Opens and reads perf counters; the real one makes syscalls, tests pass a fake."""

    def open(self, pmu_type: int, config: int, cpu: int, pid: int = -1) -> int: ...

    def read(self, fd: int) -> int: ...

    def close(self, fd: int) -> None: ...


class SyscallOpener:
    """``perf_event_open`` through ctypes; raises ``OSError`` with the kernel's errno."""

    def __init__(self) -> None:
        machine = platform.machine().lower()
        nr = SYSCALL_PERF_EVENT_OPEN.get(machine)
        if nr is None:
            raise DeviceIOError(f"perf_event_open syscall number unknown for {machine!r}")
        self._nr = nr
        libc = ctypes.CDLL(None, use_errno=True)
        self._syscall = libc.syscall
        self._syscall.restype = ctypes.c_long

    def open(self, pmu_type: int, config: int, cpu: int, pid: int = -1) -> int:
        attr = PerfEventAttr()
        attr.type = pmu_type
        attr.size = PERF_ATTR_SIZE_VER0
        attr.config = config
        fd = int(
            self._syscall(
                ctypes.c_long(self._nr),
                ctypes.byref(attr),
                ctypes.c_int(pid),
                ctypes.c_int(cpu),
                ctypes.c_int(-1),
                ctypes.c_ulong(PERF_FLAG_FD_CLOEXEC),
            )
        )
        if fd < 0:
            err = ctypes.get_errno()
            raise DeviceIOError(err, os.strerror(err))
        return fd

    def read(self, fd: int) -> int:
        data = os.read(fd, 8)
        if len(data) != 8:
            raise DeviceIOError(f"short read of a perf counter ({len(data)} bytes)")
        value: int = struct.unpack("=Q", data)[0]
        return value

    def close(self, fd: int) -> None:
        os.close(fd)


@dataclass(frozen=True)
class PerfEvent:
    """One power PMU event: its domain stem, ``attr.config`` and joules per count."""

    event: str  # "energy-pkg"
    stem: str  # "package"
    config: int
    scale: float
    unit: str


@dataclass(frozen=True)
class PowerPmu:
    """What detection found: the PMU type, its events, the CPUs to open on, the paranoid level."""

    pmu_type: int
    events: tuple[PerfEvent, ...]
    cpus: tuple[int, ...]
    paranoid: int | None


def _parse_config(spec: str) -> int:
    """``"event=0x02"`` (the power PMU's format: ``config:0-7``) → ``attr.config``."""
    config = 0
    for item in spec.split(","):
        key, _, value = item.strip().partition("=")
        if key != "event":
            raise InvalidValueError(f"unsupported term {key!r} in {spec!r}")
        config |= int(value or "1", 0) & 0xFF
    return config


def detect_power_pmu(root: SysRoot) -> PowerPmu:
    """Find the power PMU and its energy events under ``root``, or raise MeterUnavailable."""
    name = PerfPowerMeter.name
    if not (root / PMU_DIR).is_dir():
        raise MeterUnavailable(
            name,
            f"no perf power PMU at {root / PMU_DIR} (kernel without the RAPL perf driver, a CPU "
            "without RAPL, or a VM)",
        )
    try:
        pmu_type = int(root.read(f"{PMU_DIR}/type"))
    except (OSError, ValueError) as exc:
        raise MeterUnavailable(name, f"power PMU type unreadable: {exc}") from None
    events: list[PerfEvent] = []
    for suffix, stem in EVENT_DOMAINS.items():
        ev = f"energy-{suffix}"
        spec = root.read_or_none(f"{PMU_DIR}/events/{ev}")
        if spec is None:
            continue
        try:
            config = _parse_config(spec)
            scale = float(root.read_or_none(f"{PMU_DIR}/events/{ev}.scale") or "nan")
        except ValueError as exc:
            raise MeterUnavailable(name, f"cannot parse {ev}: {exc}") from None
        unit = root.read_or_none(f"{PMU_DIR}/events/{ev}.unit") or ""
        if not (scale > 0) or unit.lower() != "joules":
            raise MeterUnavailable(
                name, f"{ev}: scale {scale!r} / unit {unit!r} (expected a positive scale, Joules)"
            )
        events.append(PerfEvent(ev, stem, config, scale, unit))
    if not events:
        raise MeterUnavailable(name, f"power PMU at {root / PMU_DIR} lists no energy-* events")
    try:
        cpumask = root.read(f"{PMU_DIR}/cpumask") or "0"
    except FileNotFoundError:
        cpumask = "0"
    except (OSError, UnicodeDecodeError) as exc:
        raise MeterUnavailable(name, f"cannot read {root / PMU_DIR}/cpumask: {exc}") from None
    try:
        if not _CPUMASK_RE.fullmatch(cpumask) or any(
            int(n) >= MAX_CPUS for n in re.findall(r"\d+", cpumask)
        ):
            raise InvalidValueError(cpumask)
        cpus = parse_cpu_list(cpumask) or (0,)
    except ValueError:
        raise MeterUnavailable(
            name, f"cannot parse {root / PMU_DIR}/cpumask: {cpumask[:60]!r} (expected '0,18')"
        ) from None
    paranoid_text = root.read_or_none(PARANOID)
    try:
        paranoid = int(paranoid_text) if paranoid_text is not None else None
    except ValueError:
        paranoid = None
    return PowerPmu(pmu_type, tuple(events), cpus, paranoid)


def paranoid_reason(pmu: PowerPmu) -> str | None:
    """Why the kernel refused a system-wide counter, going by the paranoid level, or None.

    Only an explanation: whether this process may open the counters is found out by opening
    them (it may hold CAP_PERFMON, which no level reveals).
    """
    if pmu.paranoid is not None and pmu.paranoid > 0:
        return (
            f"kernel.perf_event_paranoid={pmu.paranoid} forbids system-wide counters to "
            "processes without CAP_PERFMON: `sudo sysctl kernel.perf_event_paranoid=0`, or give "
            "the process CAP_PERFMON (`sudo setcap cap_perfmon+ep` on the interpreter), or run "
            "as root"
        )
    return None


class PerfPowerMeter(Meter):
    """Cumulative energy from the perf power PMU (one counter per event and package), measured."""

    name = "perf"
    source: ClassVar[Source] = "measured"
    role: ClassVar[MeterRole] = "cpu"
    label = "perf power PMU"

    def __init__(
        self,
        pmu: PowerPmu,
        opener: PerfOpener,
        fds: Sequence[tuple[str, int, float]],
    ) -> None:
        self.pmu = pmu
        self._opener = opener
        self._fds = list(fds)  # (domain, fd, scale)
        self._base = [opener.read(fd) for _, fd, _ in self._fds]

    @classmethod
    def open(cls, pmu: PowerPmu, opener: PerfOpener) -> Self:
        """Open every event on one CPU per package with ``opener``; MeterUnavailable if not."""
        fds: list[tuple[str, int, float]] = []
        try:
            for ev in pmu.events:
                cpus = pmu.cpus[:1] if ev.stem == "psys" else pmu.cpus
                for i, cpu in enumerate(cpus):
                    domain = "psys" if ev.stem == "psys" else f"{ev.stem}-{i}"
                    fds.append((domain, opener.open(pmu.pmu_type, ev.config, cpu), ev.scale))
            return cls(pmu, opener, fds)
        except OSError as exc:
            for _, fd, _ in fds:
                with contextlib.suppress(OSError):
                    opener.close(fd)
            hint = ""
            if exc.errno in (errno.EPERM, errno.EACCES):
                reason = paranoid_reason(pmu) or (
                    f"kernel.perf_event_paranoid={pmu.paranoid}; system-wide counters need "
                    "paranoid ≤ 0, CAP_PERFMON or root"
                )
                hint = f" ({reason})"
            raise MeterUnavailable(cls.name, f"perf_event_open failed: {exc}{hint}") from None

    @classmethod
    def probe(cls, root: SysRoot, options: MeterOptions) -> Self:
        pmu = detect_power_pmu(root)
        if not root.is_real:
            raise MeterUnavailable(
                cls.name,
                f"power PMU described under {root.path}, but perf counters can only be opened "
                "on the machine's own root (/)",
            )
        try:
            opener = SyscallOpener()
        except OSError as exc:
            raise MeterUnavailable(cls.name, str(exc)) from None
        return cls.open(pmu, opener)

    @property
    def domains(self) -> tuple[str, ...]:
        return tuple(d for d, _, _ in self._fds)

    @property
    def resolution(self) -> Resolution:
        return Resolution(min(s for _, _, s in self._fds), "J")

    def read(self) -> dict[str, float]:
        return {
            d: (self._opener.read(fd) - base) * scale
            for (d, fd, scale), base in zip(self._fds, self._base, strict=True)
        }

    def close(self) -> None:
        for _, fd, _ in self._fds:
            with contextlib.suppress(OSError):
                self._opener.close(fd)
        self._fds = []
        self._base = []

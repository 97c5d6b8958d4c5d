"""Builders of SYNTHETIC power hardware for meter and sampler tests (moved from tests/platform).

Everything here is fake and labelled so: powercap trees, a perf power PMU description,
/proc files, an NVML module, an ipmitool script, and meters driven by arithmetic. None of it
is a measurement of anything.

Root-only counters: the tests run as root here, and root reads a mode-0000 file anyway, so a
``chmod 000`` alone cannot reproduce what a normal user sees on Linux ≥ 5.10 (CVE-2020-8694).
:func:`simulate_non_root` monkeypatches the one function through which the RAPL meter opens
its counters (``greenckpt.platform.meters.rapl.open_counter``) with a version that raises
``PermissionError`` whenever the file's mode grants no read permission — the check the kernel
applies to a non-root user — and otherwise opens the file for real.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import sys
import threading
import time
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Self

import pytest

from greenckpt.errors import GreenckptError
from greenckpt.platform.meters import rapl as rapl_mod
from greenckpt.platform.meters.base import (
    Clock,
    Meter,
    MeterOptions,
    PolledPowerMeter,
    Resolution,
    Source,
    open_counter,
)
from greenckpt.platform.root import PlatformError, SysRoot
from greenckpt.testing.cpu import kernel_error

__all__ = [
    "AMD_RANGE_UJ",
    "FAKE_IPMITOOL",
    "HERE",
    "INTEL_RANGE_UJ",
    "FakeMeter",
    "FakeNVMLError",
    "FakePerfOpener",
    "ManualClock",
    "SlowPolledMeter",
    "Zone",
    "amd_tree",
    "fake_pynvml",
    "hide_ipmitool",
    "install_ipmitool",
    "install_ipmitool_script",
    "install_pynvml",
    "intel_tree",
    "power_pmu_tree",
    "proc_tree",
    "set_energy",
    "set_stat",
    "simulate_non_root",
    "snapshot",
    "write_zones",
]

HERE = Path(__file__).resolve().parent
FAKE_IPMITOOL = HERE / "bin" / "ipmitool"

# Usual ranges: 2^32 counts of the RAPL energy unit, in µJ.
INTEL_RANGE_UJ = 262143328850  # 2^32 × 61.035 µJ
AMD_RANGE_UJ = 65532610987  # 2^32 × 15.259 µJ


# ---------------------------------------------------------------------------- powercap


@dataclass
class Zone:
    """One fake powercap zone."""

    zone: str  # "intel-rapl:0" or "intel-rapl:0:1"
    name: str
    energy_uj: int = 0
    max_range_uj: int | None = INTEL_RANGE_UJ
    limits_uw: dict[str, int] = field(default_factory=dict)  # constraint file -> value
    enabled: bool = True  # the zone's power limiting (its ``enabled`` file)


def write_zones(root: Path, zones: list[Zone], control: str = "powercap") -> None:
    """Create ``sys/class/powercap/<zone>/...`` for each zone (plus the control-type dir)."""
    base = root / "sys/class" / control
    (base / "intel-rapl").mkdir(parents=True, exist_ok=True)
    (base / "intel-rapl" / "enabled").write_text("1\n")
    for z in zones:
        d = base / z.zone
        d.mkdir(parents=True, exist_ok=True)
        (d / "name").write_text(z.name + "\n")
        (d / "energy_uj").write_text(f"{z.energy_uj}\n")
        if z.max_range_uj is not None:
            (d / "max_energy_range_uj").write_text(f"{z.max_range_uj}\n")
        (d / "enabled").write_text("1\n" if z.enabled else "0\n")
        for fname, value in z.limits_uw.items():
            (d / fname).write_text(f"{value}\n")


def intel_tree(root: Path, sockets: int = 1, psys: bool = False) -> list[Zone]:
    """An Intel server: per socket package + core + uncore + dram (and optionally psys)."""
    zones: list[Zone] = []
    for s in range(sockets):
        zones.append(
            Zone(
                f"intel-rapl:{s}",
                f"package-{s}",
                energy_uj=1_000_000 * (s + 1),
                limits_uw={
                    "constraint_0_power_limit_uw": 150_000_000,
                    "constraint_1_power_limit_uw": 180_000_000,
                    "constraint_0_max_power_uw": 150_000_000,
                },
            )
        )
        zones.append(Zone(f"intel-rapl:{s}:0", "core", energy_uj=500_000))
        zones.append(Zone(f"intel-rapl:{s}:1", "uncore", energy_uj=100_000))
        zones.append(Zone(f"intel-rapl:{s}:2", "dram", energy_uj=300_000, max_range_uj=65712999613))
    if psys:
        zones.append(Zone(f"intel-rapl:{sockets}", "psys", energy_uj=42))
    write_zones(root, zones)
    return zones


def amd_tree(root: Path) -> list[Zone]:
    """An AMD Zen node as recent kernels show it: package and core through intel-rapl."""
    zones = [
        Zone("intel-rapl:0", "package-0", energy_uj=7_000_000, max_range_uj=AMD_RANGE_UJ),
        Zone("intel-rapl:0:0", "core", energy_uj=3_000_000, max_range_uj=AMD_RANGE_UJ),
    ]
    write_zones(root, zones)
    return zones


def set_energy(root: Path, zone: str, uj: int) -> None:
    """Rewrite a zone's counter in place (same inode, as sysfs would change it)."""
    (root / "sys/class/powercap" / zone / "energy_uj").write_text(f"{uj}\n")


def simulate_non_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the RAPL meter see files as a non-root user would (see the module docstring)."""

    def open_as_user(path: Path) -> int:
        if os.stat(path).st_mode & (stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH) == 0:
            raise kernel_error(errno.EACCES, path)
        return open_counter(path)

    monkeypatch.setattr(rapl_mod, "open_counter", open_as_user)


# ---------------------------------------------------------------------------- perf PMU


def power_pmu_tree(
    root: Path,
    events: tuple[str, ...] = ("pkg", "ram"),
    pmu_type: int = 23,
    cpumask: str = "0",
    paranoid: int | None = 2,
    unit: str = "Joules",
) -> None:
    """``sys/bus/event_source/devices/power`` as the intel/amd RAPL perf driver exposes it."""
    codes = {"cores": 1, "pkg": 2, "ram": 3, "gpu": 4, "psys": 5}
    base = root / "sys/bus/event_source/devices/power"
    (base / "events").mkdir(parents=True, exist_ok=True)
    (base / "format").mkdir(exist_ok=True)
    (base / "type").write_text(f"{pmu_type}\n")
    (base / "cpumask").write_text(cpumask + "\n")
    (base / "format" / "event").write_text("config:0-7\n")
    for ev in events:
        (base / "events" / f"energy-{ev}").write_text(f"event=0x{codes[ev]:02x}\n")
        (base / "events" / f"energy-{ev}.scale").write_text("2.3283064365386962890625e-10\n")
        (base / "events" / f"energy-{ev}.unit").write_text(unit + "\n")
    if paranoid is not None:
        (root / "proc/sys/kernel").mkdir(parents=True, exist_ok=True)
        (root / "proc/sys/kernel/perf_event_paranoid").write_text(f"{paranoid}\n")


class FakePerfOpener:
    """Stands in for perf_event_open: counters advance by ``step`` counts per read."""

    def __init__(self, step: int = 2**32, fail_errno: int | None = None) -> None:
        self.step = step
        self.fail_errno = fail_errno
        self.opened: list[tuple[int, int, int]] = []  # (type, config, cpu)
        self.counts: dict[int, int] = {}
        self.closed: list[int] = []

    def open(self, pmu_type: int, config: int, cpu: int, pid: int = -1) -> int:
        if self.fail_errno is not None:
            raise kernel_error(self.fail_errno)
        fd = 100 + len(self.opened)
        self.opened.append((pmu_type, config, cpu))
        self.counts[fd] = 1000 * fd
        return fd

    def read(self, fd: int) -> int:
        self.counts[fd] += self.step
        return self.counts[fd]

    def close(self, fd: int) -> None:
        self.closed.append(fd)


# ---------------------------------------------------------------------------- /proc


def proc_tree(
    root: Path,
    model: str = "AMD Opteron(tm) Processor 6172",
    sockets: int = 4,
    cores_per_socket: int = 2,
    busy: int = 1000,
    idle: int = 9000,
) -> None:
    """``proc/cpuinfo`` and ``proc/stat`` for the estimator."""
    (root / "proc").mkdir(parents=True, exist_ok=True)
    blocks = []
    n = 0
    for s in range(sockets):
        for c in range(cores_per_socket):
            blocks.append(
                f"processor\t: {n}\nvendor_id\t: AuthenticAMD\nmodel name\t: {model}\n"
                f"physical id\t: {s}\ncore id\t\t: {c}\n"
            )
            n += 1
    (root / "proc/cpuinfo").write_text("\n".join(blocks) + "\n")
    set_stat(root, busy, idle)


def set_stat(root: Path, busy: int, idle: int) -> None:
    """Aggregate cpu line with ``busy`` jiffies in user and ``idle`` in idle."""
    (root / "proc/stat").write_text(
        f"cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\ncpu0 {busy} 0 0 {idle} 0 0 0 0 0 0\nctxt 1\n"
    )


class ManualClock:
    """A clock the test advances by hand."""

    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        self.t += dt


# ---------------------------------------------------------------------------- NVML


class FakeNVMLError(GreenckptError):
    """The fake module's NVMLError (a greenckpt class like every one the package defines; the
    NVML meter catches the module's own ``NVMLError``, whatever its bases)."""


def fake_pynvml(
    gpus: int = 2,
    energy_supported: bool = True,
    init_fails: bool = False,
) -> types.ModuleType:
    """A module with the subset of the pynvml API the NVML meter uses.

    ``mod.energy_mj[i]`` and ``mod.power_mw[i]`` are the values the next call returns;
    ``mod.calls`` records ``nvmlInit`` / ``nvmlShutdown``; ``mod.fail[name] = message`` makes
    the function ``name`` raise ``NVMLError(message)`` from then on (a GPU lost after init).
    """
    mod = types.ModuleType("pynvml")
    state: dict[str, Any] = {
        "energy_mj": [10_000 * (i + 1) for i in range(gpus)],
        "power_mw": [100_000 + 50_000 * i for i in range(gpus)],
        "calls": [],
        "fail": {},
    }

    def check(name: str) -> None:
        message = state["fail"].get(name)
        if message is not None:
            raise FakeNVMLError(message)

    def nvmlInit() -> None:
        state["calls"].append("init")
        if init_fails:
            raise FakeNVMLError("Driver Not Loaded")

    def nvmlShutdown() -> None:
        state["calls"].append("shutdown")

    def nvmlDeviceGetCount() -> int:
        check("nvmlDeviceGetCount")
        return gpus

    def nvmlDeviceGetHandleByIndex(i: int) -> int:
        check("nvmlDeviceGetHandleByIndex")
        return i

    def nvmlDeviceGetTotalEnergyConsumption(h: int) -> int:
        if not energy_supported:
            raise FakeNVMLError("Not Supported")
        check("nvmlDeviceGetTotalEnergyConsumption")
        value: int = state["energy_mj"][h]
        return value

    def nvmlDeviceGetPowerUsage(h: int) -> int:
        check("nvmlDeviceGetPowerUsage")
        value: int = state["power_mw"][h]
        return value

    for fn in (
        nvmlInit,
        nvmlShutdown,
        nvmlDeviceGetCount,
        nvmlDeviceGetHandleByIndex,
        nvmlDeviceGetTotalEnergyConsumption,
        nvmlDeviceGetPowerUsage,
    ):
        setattr(mod, fn.__name__, fn)
    mod.NVMLError = FakeNVMLError  # type: ignore[attr-defined]
    mod.energy_mj = state["energy_mj"]  # type: ignore[attr-defined]
    mod.power_mw = state["power_mw"]  # type: ignore[attr-defined]
    mod.calls = state["calls"]  # type: ignore[attr-defined]
    mod.fail = state["fail"]  # type: ignore[attr-defined]
    return mod


def install_pynvml(monkeypatch: pytest.MonkeyPatch, module: types.ModuleType | None) -> None:
    """Make ``import pynvml`` give ``module`` (``None``: as if it were not installed)."""
    monkeypatch.setitem(sys.modules, "pynvml", module)


# ---------------------------------------------------------------------------- ipmitool


def install_ipmitool(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, watts: float = 220.0, mode: str = "ok"
) -> Path:
    """Put the fake ``ipmitool`` first on PATH; returns the file holding its watts.

    ``mode``: ``ok``, ``nobmc`` (exit 1 as without /dev/ipmi0), ``garbage``, ``deactivated``,
    ``sleep`` (hangs for 10 s). Change the power by rewriting the returned file.
    """
    bindir = tmp_path / "fakebin"
    bindir.mkdir(exist_ok=True)
    exe = bindir / "ipmitool"
    shutil.copyfile(FAKE_IPMITOOL, exe)
    exe.chmod(0o755)
    watts_file = tmp_path / "ipmi_watts"
    watts_file.write_text(f"{watts:g}\n")
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FAKE_IPMI_WATTS_FILE", str(watts_file))
    monkeypatch.setenv("FAKE_IPMI_MODE", mode)
    return watts_file


def install_ipmitool_script(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, body: str) -> None:
    """Put a SYNTHETIC ``ipmitool`` running the ``sh`` code ``body`` first on PATH (for output
    the standard fake cannot produce, such as bytes that are not UTF-8)."""
    bindir = tmp_path / "scriptbin"
    bindir.mkdir(exist_ok=True)
    exe = bindir / "ipmitool"
    exe.write_text("#!/bin/sh\n# SYNTHETIC ipmitool for one test\n" + body + "\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")


def hide_ipmitool(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A PATH on which no ipmitool can be found."""
    empty = tmp_path / "emptybin"
    empty.mkdir(exist_ok=True)
    monkeypatch.setenv("PATH", str(empty))


# ---------------------------------------------------------------------------- meters


def _read_failure() -> OSError:
    """A failed read as a real meter's file read fails: a plain ``OSError`` (see
    :func:`greenckpt.testing.cpu.kernel_error` for why not a greenckpt error)."""
    return OSError("synthetic read failure")


class FakeMeter(Meter):
    """SYNTHETIC counter meter: each domain draws a constant power on the monotonic clock.

    Every value returned by :meth:`read` is logged in ``log`` (one dict per read), so tests can
    check phase energies against the exact counter deltas at the boundaries. ``fail_in_thread``
    makes reads from the sampler's thread raise, ``failing = True`` every read (to test error
    handling); ``gap_counts`` is what :attr:`gaps` reports (bump it to fake a degraded read).
    """

    name = "fake"
    source: ClassVar[Source] = "measured"

    def __init__(
        self,
        watts: dict[str, float] | None = None,
        max_period_s: float = float("inf"),
        name: str | None = None,
        source: Source | None = None,
        fail_in_thread: bool = False,
    ) -> None:
        self.watts = watts or {"package-0": 100.0, "dram-0": 10.0}
        self.max_period_s = max_period_s
        if name is not None:
            self.name = name  # type: ignore[misc]
        if source is not None:
            self.source = source  # type: ignore[misc]
        self.fail_in_thread = fail_in_thread
        self.failing = False
        self.gap_counts: dict[str, int] = {}
        self.t0 = time.monotonic()
        self.log: list[dict[str, float]] = []
        self.reads = 0
        self.closed = False

    @classmethod
    def probe(cls, root: SysRoot, options: MeterOptions) -> Self:
        return cls()

    @property
    def domains(self) -> tuple[str, ...]:
        return tuple(self.watts)

    @property
    def resolution(self) -> Resolution:
        return Resolution(1e-6, "J")

    @property
    def gaps(self) -> Mapping[str, int]:
        return self.gap_counts

    def read(self) -> dict[str, float]:
        self.reads += 1
        if self.failing or (
            self.fail_in_thread and threading.current_thread().name == "greenckpt-sampler"
        ):
            raise _read_failure()
        dt = time.monotonic() - self.t0
        values = {d: w * dt for d, w in self.watts.items()}
        self.log.append(values)
        return values

    def close(self) -> None:
        self.closed = True


class SlowPolledMeter(PolledPowerMeter):
    """SYNTHETIC power meter with a slow query, like ``ipmitool``: constant ``watts`` on
    domain ``node``. Set ``block`` to make the next queries wait on ``gate`` (at most
    ``block_s``) — ``in_query`` is set while one waits; ``fail`` makes queries fail.
    ``query_threads`` records the thread of every query."""

    name = "slowpoll"
    source: ClassVar[Source] = "measured"

    def __init__(
        self, watts: float = 100.0, period_s: float = 0.0, clock: Clock = time.monotonic
    ) -> None:
        super().__init__(("node",), period_s, clock)
        self.watts = watts
        self.block = False
        self.block_s = 3.0
        self.fail = False
        self.gate = threading.Event()
        self.in_query = threading.Event()
        self.query_threads: list[str] = []
        self._accept(clock(), {"node": watts})  # the "probe's" reading

    @classmethod
    def probe(cls, root: SysRoot, options: MeterOptions) -> Self:
        return cls(clock=options.clock)

    @property
    def resolution(self) -> Resolution:
        return Resolution(1.0, "W")

    def _query(self) -> Mapping[str, float]:
        self.query_threads.append(threading.current_thread().name)
        if self.block:
            self.in_query.set()
            self.gate.wait(self.block_s)
            self.in_query.clear()
        if self.fail:
            raise PlatformError("synthetic BMC failure")
        return {"node": self.watts}


def snapshot(root: Path) -> dict[str, tuple[int, bytes]]:
    """Mode and content of every file under ``root`` (to prove probing changed nothing)."""
    out: dict[str, tuple[int, bytes]] = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            out[str(p.relative_to(root))] = (p.stat().st_mode, p.read_bytes())
    return out

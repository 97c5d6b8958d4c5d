"""CPU power *estimated* from utilisation and TDP, for machines with no meter at all.

Why: a VM, a container or a laptop without RAPL access still needs *some* figure so that the
runtime can account phases and the profiler can run end to end. This meter gives one — and
labels every figure ``estimated`` so it is never mistaken for a measurement.

The details are in docs/design/measurement.md ("Meters: the utilisation estimator").
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import ClassVar, Self

from greenckpt.platform.meters.base import (
    Clock,
    Meter,
    MeterOption,
    MeterOptions,
    MeterRole,
    MeterUnavailable,
    Resolution,
    Source,
)
from greenckpt.platform.root import PlatformError, SysRoot
from greenckpt.units import parse_power

DEFAULT_IDLE_FRACTION = 0.3
"""P_idle as a fraction of P_max (servers idle at roughly 20-40 % of their CPU TDP)."""
FALLBACK_W_PER_CPU = 4.0
"""P_max per logical CPU when the model is not in the table and no TDP was given."""

_BUSY = (0, 1, 2, 5, 6)  # user nice system irq softirq
_IDLE = (3, 4)  # idle iowait


@dataclass(frozen=True)
class TdpEntry:
    """One row of the shipped TDP table."""

    pattern: str
    tdp_w: float
    note: str


@cache
def tdp_table() -> tuple[TdpEntry, ...]:
    """The shipped table (``greenckpt/platform/data/cpu_tdp.toml``), in file order."""
    text = resources.files("greenckpt.platform").joinpath("data/cpu_tdp.toml").read_text("utf-8")
    doc = tomllib.loads(text)
    return tuple(
        TdpEntry(str(e["pattern"]), float(e["tdp_w"]), str(e.get("note", "")))
        for e in doc.get("cpu", [])
    )


def lookup_tdp(model_name: str) -> TdpEntry | None:
    """The first table entry whose pattern is found in ``model_name``, or None."""
    for entry in tdp_table():
        if re.search(entry.pattern, model_name, re.IGNORECASE):
            return entry
    return None


@dataclass(frozen=True)
class CpuInfo:
    """What the estimator needs from ``/proc/cpuinfo``."""

    model_name: str
    sockets: int
    logical_cpus: int

    @classmethod
    def read(cls, root: SysRoot) -> CpuInfo:
        """Parse ``proc/cpuinfo`` under ``root``; ``PlatformError`` if it cannot be read."""
        try:
            text = root.read("proc/cpuinfo")
        except (OSError, UnicodeDecodeError) as exc:
            raise PlatformError(f"cannot read {root / 'proc/cpuinfo'}: {exc}") from None
        model = ""
        sockets: set[str] = set()
        logical = 0
        for line in text.splitlines():
            key, sep, value = line.partition(":")
            if not sep:
                continue
            key, value = key.strip(), value.strip()
            if key == "processor":
                logical += 1
            elif key == "model name" and not model:
                model = value
            elif key == "physical id":
                sockets.add(value)
        return cls(model or "unknown", max(1, len(sockets)), max(1, logical))


_STAT_HEAD_BYTES = 4096


@cache
def _proc_stat(root: SysRoot) -> str:
    """``proc/stat`` under ``root`` (joined once per root: a path join costs as much as the
    read)."""
    return os.fspath(root / "proc/stat")


def read_cpu_times(root: SysRoot) -> tuple[int, int]:
    """``(busy, idle)`` jiffies from the aggregate ``cpu`` line of ``proc/stat``.

    Read with one ``os.read`` of the file's start (the ``cpu`` line is about 100 bytes)
    rather than a text file object: every phase boundary of the runtime reads it (for the
    estimator and the CPU-seconds), and a buffered text open costs several times more."""
    path = _proc_stat(root)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        head = os.read(fd, _STAT_HEAD_BYTES)
    finally:
        os.close(fd)
    line = head.split(b"\n", 1)[0].decode("ascii", "replace")
    fields = line.split()
    if not fields or fields[0] != "cpu" or len(fields) < 8:
        raise PlatformError(f"unexpected first line of {root / 'proc/stat'}: {line.strip()!r}")
    values = [int(v) for v in fields[1:]]
    return sum(values[i] for i in _BUSY), sum(values[i] for i in _IDLE)


def model_power(utilisation: float, p_idle_w: float, p_max_w: float) -> float:
    """``P_idle + (P_max − P_idle)·u``, with ``u`` clamped to [0, 1]."""
    u = min(1.0, max(0.0, utilisation))
    return p_idle_w + (p_max_w - p_idle_w) * u


class UtilisationEstimator(Meter):
    """Estimated CPU power from /proc/stat utilisation and TDP (domain ``cpu``)."""

    name = "estimator"
    source: ClassVar[Source] = "estimated"
    role: ClassVar[MeterRole] = "cpu"
    label = "utilisation × TDP estimate"
    options = (
        MeterOption(
            "tdp_w",
            "per-socket TDP for the utilisation estimator (estimated power), e.g. 125W "
            "(default: looked up by CPU model); used only when the estimator is",
            flag="--tdp",
            metavar="POWER",
            parse=parse_power,
        ),
        MeterOption("idle_fraction", "the estimator's idle power as a fraction of its TDP"),
    )

    def power_bound(self, domain: str) -> tuple[float, str] | None:
        """The estimate never exceeds its TDP."""
        return self.p_max_w * (1 + 1e-9), "the estimator's TDP"

    def __init__(
        self,
        root: SysRoot,
        cpu: CpuInfo,
        p_max_w: float,
        idle_fraction: float,
        tdp_origin: str,
        clock: Clock,
    ) -> None:
        self.root = root
        self.cpu = cpu
        self.p_max_w = p_max_w
        self.p_idle_w = idle_fraction * p_max_w
        self.idle_fraction = idle_fraction
        self.tdp_origin = tdp_origin
        self._clock = clock
        self._t = clock()
        self._jiffies = read_cpu_times(root)
        self._util = 0.0
        self._energy = 0.0

    @classmethod
    def probe(cls, root: SysRoot, options: MeterOptions) -> Self:
        try:
            cpu = CpuInfo.read(root)
        except PlatformError as exc:
            raise MeterUnavailable(cls.name, str(exc)) from None
        idle = DEFAULT_IDLE_FRACTION if options.idle_fraction is None else options.idle_fraction
        if not 0.0 <= idle <= 1.0:
            raise MeterUnavailable(cls.name, f"idle_fraction must be in [0, 1], got {idle}")
        if options.tdp_w is not None:
            if not (math.isfinite(options.tdp_w) and options.tdp_w > 0):
                raise MeterUnavailable(cls.name, f"TDP must be positive, got {options.tdp_w}")
            p_max = options.tdp_w * cpu.sockets
            origin = f"given: {options.tdp_w:g} W × {cpu.sockets} socket(s)"
        elif (entry := lookup_tdp(cpu.model_name)) is not None:
            p_max = entry.tdp_w * cpu.sockets
            origin = f"table: {cpu.model_name!r} {entry.tdp_w:g} W × {cpu.sockets} socket(s)"
        else:
            p_max = FALLBACK_W_PER_CPU * cpu.logical_cpus
            origin = (
                f"fallback: {cpu.model_name!r} not in the TDP table, {FALLBACK_W_PER_CPU:g} W × "
                f"{cpu.logical_cpus} logical CPU(s); give the TDP (--tdp) for a better estimate"
            )
        try:
            return cls(root, cpu, p_max, idle, origin, options.clock)
        except (OSError, ValueError, PlatformError) as exc:
            raise MeterUnavailable(cls.name, f"cannot read {root / 'proc/stat'}: {exc}") from None

    @property
    def domains(self) -> tuple[str, ...]:
        return ("cpu",)

    @property
    def resolution(self) -> Resolution:
        """Power step of one jiffy of one CPU over one second (the model's error dominates)."""
        tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        return Resolution((self.p_max_w - self.p_idle_w) / (self.cpu.logical_cpus * tick), "W")

    @property
    def utilisation(self) -> float:
        """Utilisation over the span before the last read (0..1)."""
        return self._util

    def power_w(self) -> float:
        """The estimated power at the last read's utilisation."""
        return model_power(self._util, self.p_idle_w, self.p_max_w)

    def read(self) -> dict[str, float]:
        t = self._clock()
        busy, idle = read_cpu_times(self.root)
        d_busy, d_idle = busy - self._jiffies[0], idle - self._jiffies[1]
        if d_busy + d_idle > 0 and d_busy >= 0 and d_idle >= 0:
            self._util = d_busy / (d_busy + d_idle)
        self._jiffies = (busy, idle)
        if t > self._t:
            self._energy += self.power_w() * (t - self._t)
            self._t = t
        return {"cpu": self._energy}

    def describe(self) -> str:
        return (
            f"{super().describe()}; P = {self.p_idle_w:.1f} + "
            f"({self.p_max_w:.1f} − {self.p_idle_w:.1f})·u W; TDP {self.tdp_origin}"
        )

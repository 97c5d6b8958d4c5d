"""The one small meter interface and the helpers every meter shares.

Why one interface: greenckpt attributes energy to phases (compute, checkpoint, restart, flush)
and builds profiles from whatever the node can tell it — RAPL counters, the perf power PMU,
NVML, a BMC over IPMI, a wall-plug meter's CSV, or, when there is nothing, a model. The
sampler and the profiler must not care which; they ask every meter the same question:
*how many joules per domain since you were opened?*

Contract of :meth:`Meter.read`:

* it returns **cumulative joules per domain** (floats, SI units) counted from when the meter
  was opened; only differences between two reads mean anything;
* it never decreases — counter wraparound and power integration are the meter's business;
* it is cheap enough to call at the sampler's rate; a meter whose underlying query is slow
  (``ipmitool``) rate-limits itself (:attr:`Meter.min_period_s`) and extrapolates in between;
* it must be called at least once every :attr:`Meter.max_period_s` seconds, or a counter may
  wrap twice between two reads and energy be lost (the sampler enforces this);
* it is not thread-safe: the sampler serialises reads with a lock.

Every figure carries its meter's :attr:`Meter.source` — ``"measured"`` (a hardware counter or
instrument) or ``"estimated"`` (a model) — as DESIGN.md requires.

A meter that cannot run on this machine is never constructed: its ``probe`` raises
:class:`MeterUnavailable` with a reason a user can act on (what is missing, how to grant
access). Probing only reads; it changes nothing on the machine.
"""

from __future__ import annotations

import math
import os
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import ClassVar, Literal, Self

from greenckpt.platform.root import PlatformError, SysRoot

Source = Literal["measured", "estimated"]
"""Where a power or energy figure comes from: a hardware counter/instrument, or a model."""

Clock = Callable[[], float]
"""A monotonic clock in seconds (``time.monotonic`` by default; injectable for tests)."""


class MeterUnavailable(PlatformError):  # noqa: N818 - reads as "raise MeterUnavailable"
    """A meter cannot run here; ``reason`` says why and, where possible, how to fix it."""

    def __init__(self, meter: str, reason: str) -> None:
        super().__init__(f"{meter}: {reason}")
        self.meter = meter
        self.reason = reason


@dataclass(frozen=True)
class Resolution:
    """The smallest step a meter can report: an energy step (J) or a power step (W)."""

    value: float
    unit: Literal["J", "W"]

    def __str__(self) -> str:
        return f"{self.value:.3g} {self.unit}"


@dataclass(frozen=True)
class MeterOptions:
    """Everything a meter may need besides the root; all optional, all in SI units.

    ``csv_path``: the external meter's log (``timestamp,watts``; only the CSV meter needs it).
    ``tdp_w``: the estimator's per-socket TDP, overriding the shipped table.
    ``idle_fraction``: the estimator's idle power as a fraction of TDP.
    ``ipmitool``: the ``ipmitool`` executable (name looked up on ``PATH``, or a path).
    ``ipmi_period_s`` / ``nvml_period_s``: the shortest time between two real queries.
    ``clock``: a monotonic clock; ``wall_clock``: Unix time (the CSV meter's time base); tests
    inject fake ones.
    """

    csv_path: str | os.PathLike[str] | None = None
    csv_domain: str = "node"
    tdp_w: float | None = None
    idle_fraction: float | None = None
    ipmitool: str = "ipmitool"
    ipmi_timeout_s: float = 5.0
    ipmi_period_s: float = 1.0
    nvml_period_s: float = 0.02
    clock: Clock = time.monotonic
    wall_clock: Clock = time.time


class Meter(ABC):
    """A source of cumulative energy per domain (see the module docstring for the contract)."""

    name: ClassVar[str]
    """Short registry name: ``rapl``, ``perf``, ``nvml``, ``ipmi``, ``csv``, ``estimator``."""

    source: ClassVar[Source]
    """``"measured"`` or ``"estimated"``; applies to every figure this meter produces."""

    max_period_s: float = math.inf
    """Longest safe time between two reads (counter wrap); ``inf`` when nothing wraps."""

    min_period_s: float = 0.0
    """Shortest useful time between two real queries; reads in between extrapolate."""

    @classmethod
    @abstractmethod
    def probe(cls, root: SysRoot, options: MeterOptions) -> Self:
        """Open the meter on ``root`` or raise :class:`MeterUnavailable` saying why."""

    @property
    @abstractmethod
    def domains(self) -> tuple[str, ...]:
        """Names of what is measured, e.g. ``package-0``, ``dram-0``, ``gpu0``, ``node``."""

    @property
    @abstractmethod
    def resolution(self) -> Resolution:
        """The meter's step, in joules (counters) or watts (power readings)."""

    @abstractmethod
    def read(self) -> dict[str, float]:
        """Cumulative joules per domain since the meter was opened; never decreasing."""

    def close(self) -> None:  # noqa: B027 - most meters hold nothing to release
        """Release file descriptors, libraries, child processes. Idempotent."""

    def describe(self) -> str:
        """One line: name, domains, source, resolution."""
        return (
            f"{self.name}: {', '.join(self.domains)} ({self.source}, resolution {self.resolution})"
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class WrappingCounter:
    """Accumulates a hardware counter that wraps to zero after ``max_value``.

    Why: RAPL's ``energy_uj`` is a 32-bit MSR scaled to microjoules; it wraps every few
    minutes under load. A delta that comes out negative means one wrap happened, and the true
    delta is ``delta + max_value`` (exact to within one counter step, since the counter runs
    over ``0 .. max_value``). Two wraps between reads cannot be detected — hence
    :attr:`Meter.max_period_s`.
    """

    def __init__(self, first: int, max_value: int) -> None:
        if max_value <= 0:
            raise ValueError(f"max_value must be positive, got {max_value}")
        self.max_value = max_value
        self.last = first
        self.total = 0
        self.wraps = 0

    def update(self, value: int) -> int:
        """Feed a new raw value; return the accumulated (unwrapped) total since the first."""
        delta = value - self.last
        if delta < 0:
            delta += self.max_value
            self.wraps += 1
        self.last = value
        self.total += delta
        return self.total


class PowerIntegrator:
    """Turns power readings into cumulative energy by zero-order hold.

    Why zero-order hold rather than trapezoids: meters that report power (IPMI, NVML on old
    GPUs, a wall-plug meter read live) are read at the sampler's rate but queried less often.
    Between queries the last power is held, so ``energy_at(t)`` keeps growing smoothly; when a
    new reading arrives, the elapsed span is charged at the *previous* power, which is exactly
    what was extrapolated — so the cumulative energy never decreases and short phases get a
    non-zero share. The error per span is at most ``|ΔP|·Δt``; for post-hoc joins, where the
    whole series is known, :mod:`greenckpt.platform.meters.external` integrates trapezoids.
    """

    def __init__(self) -> None:
        self.energy_j = 0.0
        self.t_last: float | None = None
        self.p_last = 0.0

    def update(self, t: float, power_w: float) -> None:
        """A power reading ``power_w`` (W) taken at time ``t`` (s)."""
        if self.t_last is not None and t > self.t_last:
            self.energy_j += self.p_last * (t - self.t_last)
        if self.t_last is None or t >= self.t_last:
            self.t_last = t
            self.p_last = power_w

    def energy_at(self, t: float) -> float:
        """Cumulative joules at ``t``, holding the last power past the last reading."""
        if self.t_last is None or t <= self.t_last:
            return self.energy_j
        return self.energy_j + self.p_last * (t - self.t_last)


class PolledPowerMeter(Meter):
    """Base for meters that query instantaneous power per domain, at most every ``period``.

    Subclasses implement :meth:`_query` (power in watts per domain, slow); :meth:`read` calls it
    only when ``min_period_s`` has passed since the last query and otherwise extrapolates by
    holding the last power (see :class:`PowerIntegrator`).
    """

    def __init__(self, domains: tuple[str, ...], min_period_s: float, clock: Clock) -> None:
        self._domains = domains
        self.min_period_s = min_period_s
        self._clock = clock
        self._integrators = {d: PowerIntegrator() for d in domains}
        self._t_query: float | None = None
        self._lock = threading.Lock()
        self.queries = 0
        self.failures = 0
        self.last_error: str | None = None

    @property
    def domains(self) -> tuple[str, ...]:
        return self._domains

    @abstractmethod
    def _query(self) -> Mapping[str, float]:
        """Instantaneous power (W) per domain; may raise ``PlatformError`` on a failed query."""

    def _poll(self, t: float) -> None:
        try:
            powers = self._query()
        except PlatformError as exc:
            # A transient failure (BMC busy, timeout): keep holding the last power and say so.
            self.failures += 1
            self.last_error = str(exc)
            self._t_query = t
            return
        self._accept(t, powers)

    def _accept(self, t: float, powers: Mapping[str, float]) -> None:
        """Record a successful query's powers (W) taken at ``t``."""
        self.queries += 1
        self._t_query = t
        for d, integ in self._integrators.items():
            integ.update(t, float(powers.get(d, integ.p_last)))

    def read(self) -> dict[str, float]:
        with self._lock:
            t = self._clock()
            if self._t_query is None or t - self._t_query >= self.min_period_s:
                self._poll(t)
            return {d: integ.energy_at(t) for d, integ in self._integrators.items()}


def open_counter(path: Path) -> int:
    """Open a sysfs counter for repeated reads; raises ``OSError`` (``PermissionError`` for a
    root-only ``energy_uj``) as the OS does.

    Counters are opened once, at probe time, and re-read with ``pread`` at offset 0 (sysfs
    regenerates the value on each read from offset 0): no open/close per sample, which keeps
    a 1 kHz sampler cheap, and a permission problem shows up when probing, not mid-run. The
    meters call this through their module, so a test can stand in a non-root user's view of a
    root-only file (see ``tests/platform/fake_power.py``).
    """
    return os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))


def read_counter(fd: int) -> int:
    """The integer value of a counter opened by :func:`open_counter`."""
    return int(os.pread(fd, 64, 0).strip())

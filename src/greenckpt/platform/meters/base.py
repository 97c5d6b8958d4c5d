"""The one small meter interface and the helpers every meter shares.

Why one interface: greenckpt attributes energy to phases (compute, checkpoint, restart, flush)
and builds profiles from whatever the node can tell it — RAPL counters, the perf power PMU,
NVML, a BMC over IPMI, a wall-plug meter's CSV, or, when there is nothing, a model. The
sampler and the profiler must not care which; they ask every meter the same question:
*how many joules per domain since you were opened?*

The details are in docs/design/measurement.md ("Meters: the meter interface").
"""

from __future__ import annotations

import math
import os
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import ClassVar, Literal, Self

from greenckpt.errors import InvalidValueError
from greenckpt.platform.root import ClosesOnExit, PlatformError, SysRoot

Source = Literal["measured", "estimated"]
"""Where a power or energy figure comes from: a hardware counter/instrument, or a model."""

MeterRole = Literal["cpu", "gpu", "node"]
"""What a meter measures, which decides where detection, profiles and the self-check use it:

* ``cpu``: the processor side (domains ``package-N``, ``dram-N``, ``psys``, ``core``, or an
  estimator's ``cpu``); auto-detection opens one CPU meter, the first that opens, measured
  meters before estimated ones (in registration order among each);
* ``gpu``: accelerators (domains ``gpuN``), added to the CPU side's packages and DRAM;
* ``node``: the whole node (one domain ``node``: a BMC, a wall-plug meter), which includes
  all the others and stands alone for a profile's node power.
"""

ROLES: tuple[MeterRole, ...] = ("cpu", "gpu", "node")

Clock = Callable[[], float]
"""A monotonic clock in seconds (``time.monotonic`` by default; injectable for tests)."""

HOLD_QUERIES = 3
"""Failed queries in a row after which a polled meter stops holding its last power: the
failures before are answered by the held power (and counted in ``gaps``); from this one on
:meth:`PolledPowerMeter.read_nowait` raises until a query succeeds, and the time in between
is not charged at all."""

_NO_GAPS: Mapping[str, int] = MappingProxyType({})


class MeterUnavailable(PlatformError):  # noqa: N818 - reads as "raise MeterUnavailable"
    """A meter cannot run here; ``reason`` says why and, where possible, how to fix it."""

    def __init__(self, meter: str, reason: str) -> None:
        super().__init__(f"{meter}: {reason}")
        self.meter = meter
        self.reason = reason

    def __reduce__(self) -> tuple[object, ...]:
        """Pickle by the constructor's two arguments (the message alone cannot rebuild it)."""
        return (type(self), (self.meter, self.reason), self.__dict__)


@dataclass(frozen=True)
class Resolution:
    """The smallest step a meter can report: an energy step (J) or a power step (W)."""

    value: float
    unit: Literal["J", "W"]

    def __str__(self) -> str:
        return f"{self.value:.3g} {self.unit}"


@dataclass(frozen=True)
class MeterOption:
    """One option a meter declares (:attr:`Meter.options`): the key it is read by in
    :class:`MeterOptions` (a field of it, or a key of its ``extra``) and, where the option
    has one, the command-line flag every command that opens meters offers for it."""

    name: str
    """The key (``csv_path``, ``tdp_w``, ...): a :class:`MeterOptions` field or ``extra`` key."""
    help: str
    """What it is, for ``--help``."""
    flag: str | None = None
    """The command-line flag (``--meter-csv``), or None: set from Python only."""
    metavar: str | None = None
    parse: Callable[[str], object] | None = None
    """Turns the flag's text into the value (None: the text); may raise ValueError."""
    path: bool = False
    """A file name: made absolute where it is given (runs may change directory)."""


@dataclass(frozen=True)
class MeterOptions:
    """Everything a meter may need besides the root; all optional, all in SI units.

    ``csv_path``: the external meter's log (``timestamp,watts``; only the CSV meter needs it).
    ``tdp_w``: the estimator's per-socket TDP, overriding the shipped table.
    ``idle_fraction``: the estimator's idle power as a fraction of TDP.
    ``ipmitool``: the ``ipmitool`` executable (name looked up on ``PATH``, or a path).
    ``ipmi_period_s`` / ``nvml_period_s``: the shortest time between two real queries.
    ``csv_max_hold_s``: how long past its last row a power log's last power may be extrapolated
    before the CSV meter refuses (``None``: three times the log's median interval, at least 1 s;
    10 s while the log has fewer than two rows).
    ``csv_time_unit``: the unit of the log's timestamps (``s``, ``ms``, ``us`` or ``ns``);
    ``None``: from the header's time column (``time_ms``, ...), else detected against the clock.
    ``clock``: a monotonic clock; ``wall_clock``: Unix time (the CSV meter's time base); tests
    inject fake ones.
    ``extra``: the options of meters registered besides the built-in ones (their
    :attr:`Meter.options`), by name; read them with :meth:`value`.
    """

    csv_path: str | os.PathLike[str] | None = None
    csv_domain: str = "node"
    csv_max_hold_s: float | None = None
    csv_time_unit: str | None = None
    tdp_w: float | None = None
    idle_fraction: float | None = None
    ipmitool: str = "ipmitool"
    ipmi_timeout_s: float = 5.0
    ipmi_period_s: float = 1.0
    nvml_period_s: float = 0.02
    clock: Clock = time.monotonic
    wall_clock: Clock = time.time
    extra: Mapping[str, object] = field(default_factory=dict)

    @classmethod
    def from_values(cls, values: Mapping[str, object]) -> MeterOptions:
        """Options from declared names and values: the fields set, the rest in ``extra``."""
        own = {f.name for f in fields(cls)} - {"extra"}
        extra = {k: v for k, v in values.items() if k not in own}
        return cls(**{k: v for k, v in values.items() if k in own}, extra=extra)  # type: ignore[arg-type]

    def value(self, name: str, default: object = None) -> object:
        """A declared option's value: the field of that name, else ``extra``'s, else
        ``default``."""
        if name != "extra" and name in {f.name for f in fields(self)}:
            return getattr(self, name)
        return self.extra.get(name, default)


class Meter(ClosesOnExit, ABC):
    """A source of cumulative energy per domain (the contract: docs/design/measurement.md)."""

    name: ClassVar[str]
    """Short registry name: ``rapl``, ``perf``, ``nvml``, ``ipmi``, ``csv``, ``estimator``."""

    source: ClassVar[Source]
    """``"measured"`` or ``"estimated"``; applies to every figure this meter produces."""

    role: ClassVar[MeterRole]
    """What it measures (:data:`MeterRole`): where detection, profiles and the self-check
    use it."""

    label: ClassVar[str]
    """What it is in a few words (``BMC via IPMI``), for reports of what a figure covers."""

    options: ClassVar[tuple[MeterOption, ...]] = ()
    """The options it reads from :class:`MeterOptions` (and the flags offered for them)."""

    max_period_s: float = math.inf
    """Longest safe time between two reads (counter wrap); ``inf`` when nothing wraps."""

    min_period_s: float = 0.0
    """Shortest useful time between two real queries; reads in between extrapolate."""

    @classmethod
    @abstractmethod
    def probe(cls, root: SysRoot, options: MeterOptions) -> Self:
        """Open the meter on ``root`` or raise :class:`MeterUnavailable` saying why."""

    @classmethod
    def not_needed(cls, options: MeterOptions) -> str | None:
        """Why auto-detection need not probe this meter with ``options`` (e.g. no log given),
        or None: it is probed."""
        return None

    def power_bound(self, domain: str) -> tuple[float, str] | None:
        """The highest plausible power of ``domain`` (W) and where it comes from, when the
        meter knows one (the self-check's bound); None: a generic bound by domain."""
        return None

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

    def poll(self) -> None:
        """Run the meter's slow query now if one is due (the sampler's background thread)."""

    def read_nowait(self) -> dict[str, float]:
        """Like :meth:`read`, but never runs a slow query: what is known, integrated to now."""
        return self.read()

    @property
    def gaps(self) -> Mapping[str, int]:
        """Degraded readings returned so far, per domain (cumulative; absent domains: none).

        A degraded reading is a figure this meter returned that is not a plain measurement:
        a failed query answered by holding the last power, a counter read later than
        :attr:`max_period_s`. Reads that raise are not counted here (the caller sees them).
        """
        return _NO_GAPS

    def close(self) -> None:
        """Release file descriptors, libraries, child processes. Idempotent."""

    def describe(self) -> str:
        """One line: name, domains, source, resolution."""
        return (
            f"{self.name}: {', '.join(self.domains)} ({self.source}, resolution {self.resolution})"
        )


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
            raise InvalidValueError(f"max_value must be positive, got {max_value}")
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

    Subclasses implement :meth:`_query` (power in watts per domain, slow). :meth:`poll` calls it
    when ``min_period_s`` has passed since the last attempt, *without holding the meter's lock*
    while it runs, so :meth:`read_nowait` — the held power integrated to now (see
    :class:`PowerIntegrator`) — never waits for it; :meth:`read` is ``poll`` then
    ``read_nowait``. A reading is stamped when its query returns, so a figure already handed
    out is never revised downwards.

    Failed queries (BMC busy, timeout, driver error): the last power is held, the failure is
    counted in ``failures`` and in :attr:`gaps`; after :data:`HOLD_QUERIES` failures in a row
    :meth:`read_nowait` raises ``PlatformError`` instead of extrapolating further, and the span
    from the last figure handed out to the next successful query is not charged (an honest
    under-count, marked, rather than a guess presented as a measurement).
    """

    def __init__(
        self,
        domains: tuple[str, ...],
        min_period_s: float,
        clock: Clock,
        max_failures: int = HOLD_QUERIES,
    ) -> None:
        self._domains = domains
        self.min_period_s = min_period_s
        self.max_failures = max_failures
        self._clock = clock
        self._integrators = {d: PowerIntegrator() for d in domains}
        self._t_query: float | None = None  # start of the last attempt
        self._t_good: float | None = None  # when the last successful query returned
        self._t_returned = -math.inf  # the latest time a figure was handed out for
        self._inflight = False
        self._refusing = False
        self._lock = threading.Lock()
        self._gaps = dict.fromkeys(domains, 0)
        self.queries = 0
        self.failures = 0
        self.consecutive_failures = 0
        self.last_error: str | None = None

    @property
    def domains(self) -> tuple[str, ...]:
        return self._domains

    @property
    def gaps(self) -> Mapping[str, int]:
        """Failed queries answered by holding the last power, for every domain."""
        return self._gaps

    @abstractmethod
    def _query(self) -> Mapping[str, float]:
        """Instantaneous power (W) per domain; may raise ``PlatformError`` on a failed query."""

    def poll(self) -> None:
        with self._lock:
            t = self._clock()
            if self._inflight or (
                self._t_query is not None and t - self._t_query < self.min_period_s
            ):
                return
            self._inflight = True
            self._t_query = t
        powers: Mapping[str, float] | None = None
        error = ""
        try:
            powers = self._query()
        except PlatformError as exc:
            error = str(exc)
        except BaseException as exc:
            error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            with self._lock:
                self._inflight = False
                if powers is None:
                    self._failed(error)
                else:
                    self._accept(self._clock(), powers)

    def _failed(self, message: str) -> None:
        """Record a failed query (lock held): hold the last power, or stop holding it."""
        self.failures += 1
        self.consecutive_failures += 1
        self.last_error = message
        if self.consecutive_failures < self.max_failures:
            for d in self._gaps:  # answered by holding the last power: a degraded figure
                self._gaps[d] += 1
        elif not self._refusing:
            self._refusing = True
            for integ in self._integrators.values():
                if integ.t_last is not None:
                    # Charge up to the last figure handed out, then nothing until a new reading.
                    integ.update(max(integ.t_last, self._t_returned), 0.0)

    def _accept(self, t: float, powers: Mapping[str, float]) -> None:
        """Record a successful query's powers (W), stamped ``t`` (when it returned)."""
        self.queries += 1
        self.consecutive_failures = 0
        self._refusing = False
        self._t_good = t
        if self._t_query is None:
            self._t_query = t
        for d, integ in self._integrators.items():
            integ.update(t, float(powers.get(d, integ.p_last)))

    def read_nowait(self) -> dict[str, float]:
        with self._lock:
            t = self._clock()
            if self._refusing:
                age = "" if self._t_good is None else f" for {t - self._t_good:.3g} s"
                raise PlatformError(
                    f"{self.name}: no power reading{age} ({self.consecutive_failures} queries "
                    f"failed in a row, last: {self.last_error}); not extrapolating further"
                )
            self._t_returned = max(self._t_returned, t)
            return {d: integ.energy_at(t) for d, integ in self._integrators.items()}

    def read(self) -> dict[str, float]:
        self.poll()
        return self.read_nowait()


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

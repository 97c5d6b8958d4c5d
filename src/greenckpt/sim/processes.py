"""Failure processes: when the machine fails, as a stream of gaps between consecutive failures.

Failures are a property of the machine, not of the application: they strike at the same times
whatever the run is doing and the application cannot delay or provoke them. The simulators
therefore never ask the process anything but "how long until the next failure?", and they ask
it in vectorised batches so that millions of gaps cost a few NumPy calls, not a Python loop.

:class:`Exponential` (Poisson, the model's assumption), :class:`Weibull` (renewal gaps with the
given MTBF; shape < 1 is what failure logs show) and :class:`Trace` (a replayed failure log,
whose intervals are indicative only) are provided. A process is immutable and reusable;
:meth:`FailureProcess.stream` opens a fresh, stateful :class:`GapStream` for one run.
docs/model.md section 6.1 describes each process.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import gammaincc

from greenckpt.errors import InvalidValueError
from greenckpt.sim._checks import non_negative, positive

FloatArray = NDArray[np.float64]

_REACH_TERMS = 64


class GapStream(ABC):
    """The gaps of one simulation run, handed out in order, batch by batch."""

    @abstractmethod
    def take(self, n: int) -> FloatArray:
        """The next ``n`` gaps (seconds), or fewer, down to none, once a finite process ends."""


class FailureProcess(ABC):
    """When the machine fails: a source of inter-failure gaps, independent of the application."""

    @property
    @abstractmethod
    def mean_gap(self) -> float:
        """Mean seconds between failures, the MTBF (for a trace: horizon / failure count)."""

    @property
    def renewal(self) -> bool:
        """Whether gaps are i.i.d. (a renewal process), which makes per-gap samples i.i.d."""
        return True

    @property
    def memoryless(self) -> bool:
        """Whether the process is Poisson, which makes *any* instant a renewal point."""
        return False

    @property
    def final_stretch(self) -> float | None:
        """Failure-free seconds after a finite process's last gap; ``None`` if it never ends."""
        return None

    def stream(self, rng: np.random.Generator) -> GapStream:
        """Open a fresh stream of gaps for one run, drawing from ``rng``."""
        return _DrawnStream(self, rng)

    def draw(self, rng: np.random.Generator, n: int) -> FloatArray:
        """``n`` fresh i.i.d. gaps; only renewal processes implement it."""
        raise NotImplementedError(f"{type(self).__name__} does not draw i.i.d. gaps")

    def mean_reach(self, start: float, step: float) -> float | None:
        """An upper bound on ``Σ_{j≥0} P(gap ≥ start + j·step)``; ``None`` if unknown.

        That sum is the expected number of the marks ``start, start + step, …`` one gap
        reaches: with ``start`` the failure-free time a gap needs to complete its first unit
        (or period) and ``step`` the time of each further one, it is the mean number of units
        a gap completes. The simulators use it, before drawing anything, to bound from below
        the failures a run needs (Wald: ``need ≥ 1 + (n − b₀)/b``) and refuse runs that could
        not finish. Only an *upper* bound is safe here: an underestimate would refuse a
        runnable scenario.
        """
        return None


class _DrawnStream(GapStream):
    def __init__(self, process: FailureProcess, rng: np.random.Generator) -> None:
        self._process = process
        self._rng = rng

    def take(self, n: int) -> FloatArray:
        return self._process.draw(self._rng, n)


@dataclass(frozen=True)
class Exponential(FailureProcess):
    """Poisson failures of rate ``rate`` (1/s); ``MTBF = 1/rate``."""

    rate: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "rate", positive("rate", self.rate, "per second"))

    @classmethod
    def from_mtbf(cls, mtbf: float) -> Exponential:
        """The Poisson process with mean time between failures ``mtbf`` seconds."""
        return cls(1.0 / positive("mtbf", mtbf))

    @property
    def mean_gap(self) -> float:
        return 1.0 / self.rate

    @property
    def memoryless(self) -> bool:
        return True

    def draw(self, rng: np.random.Generator, n: int) -> FloatArray:
        return rng.exponential(1.0 / self.rate, size=n)

    def mean_reach(self, start: float, step: float) -> float:
        """Exact: ``e^{−λ·start} / (1 − e^{−λ·step})``, a geometric series."""
        return math.exp(-self.rate * start) / -math.expm1(-self.rate * step)


@dataclass(frozen=True)
class Weibull(FailureProcess):
    """Renewal process with Weibull gaps of shape ``shape`` and mean ``mtbf`` seconds."""

    shape: float
    mtbf: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", positive("shape", self.shape, "(dimensionless)"))
        object.__setattr__(self, "mtbf", positive("mtbf", self.mtbf))
        if not math.isfinite(self.scale) or self.scale <= 0:
            raise InvalidValueError(
                f"shape {self.shape!r} is too small: the Weibull scale underflows"
            )

    @property
    def mean_gap(self) -> float:
        return self.mtbf

    @property
    def scale(self) -> float:
        """Weibull scale ``η`` (seconds) such that the mean gap ``η·Γ(1 + 1/k)`` is the MTBF."""
        try:
            return self.mtbf / math.gamma(1.0 + 1.0 / self.shape)
        except OverflowError:  # Γ(1 + 1/k) overflows for k below about 0.006
            return 0.0

    def draw(self, rng: np.random.Generator, n: int) -> FloatArray:
        return rng.weibull(self.shape, size=n) * self.scale

    def mean_reach(self, start: float, step: float) -> float:
        """The first 64 terms exactly, plus a bound on the rest: the survival function
        ``S(t) = e^{−(t/η)^k}`` decreases, so each term is at most the mean of ``S`` over the
        ``step`` before it, and the tail is at most ``∫_{start+63·step}^∞ S / step``
        ``= MTBF · Q(1/k, ((start + 63·step)/η)^k) / step`` (``Q``: regularised upper
        incomplete gamma). It exceeds the true sum by less than one term."""
        eta, k = self.scale, self.shape
        marks = start + step * np.arange(_REACH_TERMS, dtype=np.float64)
        head = float(np.exp(-((marks / eta) ** k)).sum())
        edge = float(marks[-1] / eta) ** k
        return head + self.mtbf / step * float(gammaincc(1.0 / k, edge))


class Trace(FailureProcess):
    """Replay of recorded failure times (seconds from job start, sorted, ``>= 0``).

    ``horizon`` is where the replayed run stops (default: the last failure, i.e. nothing is
    assumed about the time after it); it must not come before the last failure. The stretch
    between the last failure and the horizon ends without a failure. Two equal times are two
    failures in the same instant (the second strikes the restart the first one started).
    """

    @classmethod
    def from_text(cls, text: str, name: str = "trace") -> Trace:
        """A trace from the text of a trace file: failure times in seconds, whitespace-separated
        (one per line). ``name`` says in errors which file it was. Pure: the caller reads the
        file."""
        try:
            times = [float(x) for x in text.split()]
        except ValueError:
            raise InvalidValueError(
                f"trace file {name!r}: every line must be a failure time in seconds, e.g. 3600.5"
            ) from None
        if not times:
            raise InvalidValueError(f"trace file {name!r} holds no failure times")
        return cls(np.array(times))

    def __init__(self, times: ArrayLike, horizon: float | None = None) -> None:
        arr = np.array(times, dtype=np.float64, copy=True).reshape(-1)
        if not np.all(np.isfinite(arr)):
            bad = float(arr[~np.isfinite(arr)][0])
            raise InvalidValueError(f"failure times must be finite, got {bad!r}")
        if arr.size and arr[0] < 0:
            raise InvalidValueError(f"failure times must be >= 0 seconds, got {float(arr[0])!r}")
        if arr.size > 1 and np.any(np.diff(arr) < 0):
            i = int(np.argmax(np.diff(arr) < 0))
            raise InvalidValueError(
                f"failure times must be sorted, got {float(arr[i])!r} before {float(arr[i + 1])!r} "
                f"(positions {i} and {i + 1})"
            )
        last = float(arr[-1]) if arr.size else 0.0
        if horizon is None:
            if arr.size == 0:
                raise InvalidValueError("an empty trace needs a horizon > 0 seconds, got None")
            end = last
        else:
            end = non_negative("horizon", horizon)
            if end < last:
                raise InvalidValueError(
                    f"horizon must be >= the last failure ({last!r} s), got {horizon!r}"
                )
        if end <= 0:
            raise InvalidValueError(f"the trace must span > 0 seconds, got horizon {end!r}")
        arr.setflags(write=False)
        self._times = arr
        self._end = end

    def __repr__(self) -> str:
        return f"Trace(<{self._times.size} failures>, horizon={self._end!r})"

    @property
    def times(self) -> FloatArray:
        """Failure times, seconds from job start (read-only)."""
        return self._times

    @property
    def horizon(self) -> float:
        """Seconds from job start at which the replayed run stops."""
        return self._end

    @property
    def mean_gap(self) -> float:
        return self.horizon / self.times.size if self.times.size else math.inf

    @property
    def renewal(self) -> bool:
        return False

    @property
    def final_stretch(self) -> float:
        return self.horizon - (float(self.times[-1]) if self.times.size else 0.0)

    def gaps(self) -> FloatArray:
        """All gaps: first failure from job start, then between consecutive failures."""
        return np.diff(self.times, prepend=0.0)

    def stream(self, rng: np.random.Generator) -> GapStream:
        return _TraceStream(self.gaps())


class _TraceStream(GapStream):
    def __init__(self, gaps: FloatArray) -> None:
        self._gaps = gaps
        self._pos = 0

    def take(self, n: int) -> FloatArray:
        out = self._gaps[self._pos : self._pos + n]
        self._pos += out.size
        return out

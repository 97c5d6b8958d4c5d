"""Background power sampling with phase markers and energy per phase.

Why: the runtime attributes energy to phases (compute, checkpoint, restart, flush) and the
profiler needs power while an I/O pattern runs. Both need a time series of power per domain and
the energy of each phase — and the second must not depend on the first's sampling rate: a
phase's energy comes from counter readings taken synchronously at its boundaries, so a 50 ms
checkpoint is charged its exact delta even at 1 Hz. The background thread keeps the series and
reads wrapping counters more often than they wrap; a boundary never waits for a slow meter, and
one failing meter never stops the others (its gaps are counted and reported). The figures
themselves (:class:`PhaseEnergy`, :class:`Mark`, :class:`Series`) live in
:mod:`greenckpt.platform.series`; the whole design and its cost are in
docs/design/measurement.md ("Power sampling").
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

import numpy as np

from greenckpt.platform.meters.base import Clock, Meter, Source
from greenckpt.platform.meters.detect import Selection, select_meters
from greenckpt.platform.root import PlatformError
from greenckpt.platform.series import FloatArray, Mark, PhaseEnergy, SampleBuffer, Series

__all__ = [
    "DEFAULT_RATE_HZ",
    "MAX_ERRORS_KEPT",
    "MAX_RATE_HZ",
    "FloatArray",
    "Mark",
    "Phase",
    "PhaseEnergy",
    "Sampler",
    "Series",
]

DEFAULT_RATE_HZ = 10.0
MAX_RATE_HZ = 10_000.0
MAX_ERRORS_KEPT = 20


@dataclass
class _OpenPhase:
    name: str
    index: int
    parent: int | None
    depth: int
    thread: str
    t0: float
    unix0: float
    e0: FloatArray
    row0: int
    gaps0: FloatArray
    children: FloatArray
    result: PhaseEnergy | None = None


class Phase:
    """Context manager returned by :meth:`Sampler.phase`; ``result`` is set on exit."""

    def __init__(self, sampler: Sampler, name: str) -> None:
        self._sampler = sampler
        self.name = name
        self._open: _OpenPhase | None = None
        self.result: PhaseEnergy | None = None

    def __enter__(self) -> Self:
        if self._open is not None:
            raise PlatformError(f"phase {self.name!r} is already open")
        self._open = self._sampler._enter_phase(self.name)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._open is not None
        opened, self._open = self._open, None
        try:
            self.result = self._sampler._exit_phase(opened)
        except Exception as read_error:
            if exc is None:
                raise
            self._sampler._record_error(f"phase {self.name!r} end: {read_error}")


@dataclass
class _Stats:
    ticks: int = 0
    missed_ticks: int = 0
    errors: list[str] = field(default_factory=list)
    error_count: int = 0
    thread_cpu_s: float = 0.0


class Sampler:
    """Samples meters in a background thread; phases get energy from boundary deltas.

    ``meters``: the meters to sample (a :class:`~greenckpt.platform.meters.detect.Selection`
    or a sequence; the caller keeps ownership and closes them), or ``None`` to auto-detect
    (the sampler then owns the selection and closes it on :meth:`stop`). ``rate_hz``: timer
    reads per second (default 10; up to 10 kHz — 1 kHz is reasonable with counter meters).
    ``max_samples``: keep only about the most recent this many reads in the series.
    """

    def __init__(
        self,
        meters: Selection | Sequence[Meter] | None = None,
        *,
        rate_hz: float = DEFAULT_RATE_HZ,
        max_samples: int | None = None,
        clock: Clock = time.monotonic,
        wall_clock: Clock = time.time,
    ) -> None:
        if not (math.isfinite(rate_hz) and 0 < rate_hz <= MAX_RATE_HZ):
            raise PlatformError(f"sampling rate must be in (0, {MAX_RATE_HZ:g}] Hz, got {rate_hz}")
        if max_samples is not None and max_samples < 2:
            raise PlatformError(f"max_samples must be at least 2, got {max_samples}")
        self._owned: Selection | None = None
        if meters is None:
            self._owned = select_meters()
            meters = self._owned
        try:
            self._setup(meters, rate_hz, max_samples, clock, wall_clock)
        except BaseException:
            self._close_owned()  # auto-detected meters would otherwise stay open
            raise

    def _setup(
        self,
        meters: Selection | Sequence[Meter],
        rate_hz: float,
        max_samples: int | None,
        clock: Clock,
        wall_clock: Clock,
    ) -> None:
        self.selection = meters if isinstance(meters, Selection) else None
        self.meters: tuple[Meter, ...] = tuple(
            meters.meters if isinstance(meters, Selection) else meters
        )
        if not self.meters:
            why = f":\n{self.selection.report()}" if self.selection else ""
            raise PlatformError(f"no meter to sample{why}")
        self.rate_hz = float(rate_hz)
        self.period_s = 1.0 / self.rate_hz
        for m in self.meters:
            if self.period_s > m.max_period_s:
                raise PlatformError(
                    f"sampling period {self.period_s:g} s exceeds {m.name}'s safe maximum "
                    f"{m.max_period_s:g} s (its counters could wrap twice between reads); "
                    f"sample at ≥ {1 / m.max_period_s:.3g} Hz"
                )
        keys: list[str] = []
        sources: dict[str, Source] = {}
        layout: list[tuple[Meter, tuple[str, ...], int, int]] = []
        for m in self.meters:
            domains = tuple(m.domains)
            lo = len(keys)
            for d in domains:
                key = f"{m.name}/{d}"
                if key in sources:
                    raise PlatformError(f"domain {key!r} appears twice (the same meter twice?)")
                keys.append(key)
                sources[key] = m.source
            layout.append((m, domains, lo, len(keys)))
        self.domains: tuple[str, ...] = tuple(keys)
        self.sources: Mapping[str, Source] = sources
        self._layout = tuple(layout)
        # Meters with a slow query of their own: queried by the background thread only.
        self._pollers = tuple(m for m in self.meters if type(m).poll is not Meter.poll)
        self._clock = clock
        self._wall = wall_clock
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._buf = SampleBuffer(len(keys) + len(self.meters), max_samples)
        self._origin = np.zeros(len(keys))
        self._raw = [0.0] * len(keys)  # last good reading per domain (meters' own origins)
        self._gaps = np.zeros(len(keys))  # failed + degraded readings per domain since start
        self._meter_gaps = [0] * len(keys)  # meters' own gap counters at the last read
        self._failed_reads = dict.fromkeys((m.name for m in self.meters), 0)
        self._t0 = 0.0
        self._last: tuple[float, float, FloatArray, int, FloatArray] | None = None
        self._phases: list[_OpenPhase] = []
        self._local = threading.local()
        self._stats = _Stats()
        self._state = "new"

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> Self:
        """Take the first reading and start the background thread."""
        if self._state != "new":
            raise PlatformError(f"sampler already {self._state}; make a new one")
        with self._lock:
            self._t0 = self._clock()
            unix = self._wall()
            try:
                self._origin = self._first_reading()
            except BaseException:
                self._state = "stopped"
                self._close_owned()
                raise
            self._store(0.0, unix, np.zeros(len(self.domains)), True, [False] * len(self.meters))
        self._state = "running"
        self._thread = threading.Thread(target=self._run, name="greenckpt-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread (at once), take a final reading, close owned meters. Idempotent."""
        if self._state != "running":
            if self._state == "new":
                self._state = "stopped"
                self._close_owned()
            return
        self._stop.set()
        assert self._thread is not None
        self._thread.join()
        try:
            self._boundary_read("final reading")
        except Exception as exc:
            self._record_error(f"final reading: {exc}")
        self._state = "stopped"
        self._close_owned()

    def _close_owned(self) -> None:
        if self._owned is not None:
            owned, self._owned = self._owned, None
            owned.close()

    @property
    def running(self) -> bool:
        """True between start() and stop()."""
        return self._state == "running"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- reading -------------------------------------------------------------------------

    def _first_reading(self) -> FloatArray:
        """Every meter's reading at start (lock held); any failure is fatal: no value yet."""
        for m, domains, lo, hi in self._layout:
            try:
                r = m.read_nowait()
                self._raw[lo:hi] = [float(r[d]) for d in domains]
            except Exception as exc:
                raise PlatformError(
                    f"first reading failed: {_describe(m, exc)} (a meter must answer at start)"
                ) from exc
            gaps = m.gaps
            self._meter_gaps[lo:hi] = [gaps.get(d, 0) for d in domains]
        return np.asarray(self._raw, dtype=np.float64)

    def _read_meters(self, where: str) -> tuple[FloatArray, list[bool]]:
        """Every meter's cumulative joules, in domain order (meters' own origins), and per
        meter whether its figure is held or degraded (lock held).

        A meter that raises keeps its last good value and the others are read as usual.
        """
        raw = self._raw
        held: list[bool] = []
        for m, domains, lo, hi in self._layout:
            try:
                r = m.read_nowait()
                values = [float(r[d]) for d in domains]
                gaps = m.gaps
            except Exception as exc:
                self._failed_reads[m.name] += 1
                self._gaps[lo:hi] += 1
                self._note_error(f"{where}: {_describe(m, exc)}")
                held.append(True)
                continue
            raw[lo:hi] = values
            degraded = False
            if gaps:
                for j, d in enumerate(domains, lo):
                    g = gaps.get(d, 0)
                    if g != self._meter_gaps[j]:
                        self._gaps[j] += max(0, g - self._meter_gaps[j])
                        self._meter_gaps[j] = g
                        degraded = True
            held.append(degraded)
        return np.asarray(raw, dtype=np.float64), held

    def _store(
        self, t_rel: float, unix: float, e: FloatArray, boundary: bool, held: list[bool]
    ) -> None:
        self._buf.append(t_rel, unix, boundary, [*e.tolist(), *map(float, held)])
        self._last = (t_rel, unix, e, self._buf.appended - 1, self._gaps.copy())

    def _sample(self, where: str) -> tuple[float, float, FloatArray, int, FloatArray]:
        """Read every meter, store the row; return (t_rel, unix, energy, row index, gaps)."""
        with self._lock:
            t = self._clock()
            unix = self._wall()
            raw, held = self._read_meters(where)
            e = raw - self._origin
            t_rel = t - self._t0
            self._store(t_rel, unix, e, where != "sample", held)
            assert self._last is not None
            return self._last

    def _boundary_read(self, where: str) -> tuple[float, float, FloatArray, int, FloatArray]:
        return self._sample(where)

    def _note_error(self, message: str) -> None:
        """Record an error (lock held)."""
        self._stats.error_count += 1
        if len(self._stats.errors) < MAX_ERRORS_KEPT:
            self._stats.errors.append(message)

    def _record_error(self, message: str) -> None:
        with self._lock:
            self._note_error(message)

    def _run(self) -> None:
        cpu0 = time.thread_time()
        period = self.period_s
        next_t = self._clock() + period
        try:
            while not self._stop.wait(max(0.0, next_t - self._clock())):
                for m in self._pollers:  # slow queries: here only, outside the lock
                    try:
                        m.poll()
                    except Exception as exc:
                        self._record_error(f"poll: {_describe(m, exc)}")
                if self._stop.is_set():
                    break
                try:
                    self._sample("sample")
                    self._stats.ticks += 1
                except Exception as exc:
                    self._record_error(f"sample: {type(exc).__name__}: {exc}")
                next_t += period
                now = self._clock()
                if next_t <= now:
                    behind = math.floor((now - next_t) / period) + 1
                    self._stats.missed_ticks += behind
                    next_t += behind * period
        finally:
            self._stats.thread_cpu_s = time.thread_time() - cpu0

    # -- phases --------------------------------------------------------------------------

    def phase(self, name: str) -> Phase:
        """``with sampler.phase("checkpoint") as p: ...`` — then ``p.result`` is a PhaseEnergy.

        Phases may nest (per thread); energies are inclusive of nested phases.
        """
        if not name or not isinstance(name, str):
            raise PlatformError("a phase needs a non-empty name")
        return Phase(self, name)

    def _stack(self) -> list[_OpenPhase]:
        stack: list[_OpenPhase] | None = getattr(self._local, "stack", None)
        if stack is None:
            stack = []
            self._local.stack = stack
        return stack

    def _enter_phase(self, name: str) -> _OpenPhase:
        if self._state != "running":
            raise PlatformError(f"phase {name!r}: the sampler is not running (start it first)")
        t, unix, e, row, gaps = self._boundary_read(f"phase {name!r} start")
        stack = self._stack()
        parent = stack[-1] if stack else None
        with self._lock:
            op = _OpenPhase(
                name=name,
                index=len(self._phases),
                parent=None if parent is None else parent.index,
                depth=len(stack),
                thread=threading.current_thread().name,
                t0=t,
                unix0=unix,
                e0=e,
                row0=row,
                gaps0=gaps,
                children=np.zeros(len(self.domains)),
            )
            self._phases.append(op)
        stack.append(op)
        return op

    def _exit_phase(self, op: _OpenPhase) -> PhaseEnergy:
        stack = self._stack()
        if op in stack:
            stack.remove(op)
        truncated = self._state != "running"
        if truncated:
            assert self._last is not None
            t, unix, e, row, gaps = self._last  # the final reading
        else:
            t, unix, e, row, gaps = self._boundary_read(f"phase {op.name!r} end")
        inclusive = e - op.e0
        phase_gaps = (gaps - op.gaps0).astype(int).tolist()
        exclusive = inclusive - op.children
        result = PhaseEnergy(
            name=op.name,
            index=op.index,
            parent=op.parent,
            depth=op.depth,
            thread=op.thread,
            start_s=op.t0,
            end_s=t,
            start_unix=op.unix0,
            end_unix=unix,
            energy_j=dict(zip(self.domains, inclusive.tolist(), strict=True)),
            exclusive_energy_j=dict(zip(self.domains, exclusive.tolist(), strict=True)),
            sources=dict(self.sources),
            samples=max(0, row - op.row0 - 1),
            truncated=truncated,
            gaps=dict(zip(self.domains, phase_gaps, strict=True)),
        )
        with self._lock:
            op.result = result
            if op.parent is not None:
                self._phases[op.parent].children += inclusive
        return result

    def mark(self) -> Mark:
        """Read every meter now (in the caller's thread; thread-safe) and return the reading.

        Like a phase boundary, the reading enters the time series; a failing meter's last
        value is carried forward and counted in ``gaps``.
        """
        if self._state != "running":
            raise PlatformError("mark: the sampler is not running (start it first)")
        t, unix, e, _row, gaps = self._boundary_read("mark")
        return Mark(
            t_s=t,
            monotonic_s=t + self._t0,
            unix=unix,
            energy_j=dict(zip(self.domains, e.tolist(), strict=True)),
            gaps=dict(zip(self.domains, gaps.astype(int).tolist(), strict=True)),
        )

    # -- results -------------------------------------------------------------------------

    @property
    def phases(self) -> list[PhaseEnergy]:
        """Every finished phase, in the order they started."""
        with self._lock:
            return [op.result for op in self._phases if op.result is not None]

    def totals_by_phase(self, exclusive: bool = True) -> dict[str, dict[str, float]]:
        """Joules per phase name per domain, summed over every phase of that name.

        ``exclusive=True`` (default) counts nested phases once, in the innermost phase; the
        figures' sources are :attr:`sources`.
        """
        totals: dict[str, dict[str, float]] = {}
        for p in self.phases:
            src = p.exclusive_energy_j if exclusive else p.energy_j
            acc = totals.setdefault(p.name, dict.fromkeys(self.domains, 0.0))
            for k, v in src.items():
                acc[k] += v
        return totals

    def energy_j(self) -> dict[str, float]:
        """Joules per domain from start to the latest read (or stop)."""
        with self._lock:
            if self._last is None:
                return dict.fromkeys(self.domains, 0.0)
            return dict(zip(self.domains, self._last[2].tolist(), strict=True))

    def series(self) -> Series:
        """The time series so far (a copy; safe to call while running)."""
        with self._lock:
            a = self._buf.array()
        nd = len(self.domains)
        meter_held = a[:, 3 + nd :] > 0.5
        columns = [j for j, (_, _, lo, hi) in enumerate(self._layout) for _ in range(lo, hi)]
        return Series(
            domains=self.domains,
            sources=dict(self.sources),
            t_s=a[:, 0].copy(),
            unix=a[:, 1].copy(),
            energy_j=a[:, 3 : 3 + nd].copy(),
            boundary=a[:, 2] > 0.5,
            held=meter_held[:, columns],
        )

    @property
    def gaps(self) -> dict[str, int]:
        """Failed or degraded readings per domain since start (see ``PhaseEnergy.gaps``)."""
        with self._lock:
            return dict(zip(self.domains, self._gaps.astype(int).tolist(), strict=True))

    @property
    def failed_reads(self) -> dict[str, int]:
        """Reads that raised, per meter name (their last values were carried forward)."""
        with self._lock:
            return dict(self._failed_reads)

    @property
    def ticks(self) -> int:
        """Timer reads taken by the background thread."""
        return self._stats.ticks

    @property
    def missed_ticks(self) -> int:
        """Timer reads skipped because a read overran its slot."""
        return self._stats.missed_ticks

    @property
    def errors(self) -> list[str]:
        """The first meter errors (any read or poll), each naming its meter; see
        ``error_count``."""
        with self._lock:
            return list(self._stats.errors)

    @property
    def error_count(self) -> int:
        """How many meter reads or polls failed."""
        return self._stats.error_count

    @property
    def thread_cpu_s(self) -> float:
        """CPU seconds the sampling thread used (``time.thread_time``), known after stop()."""
        return self._stats.thread_cpu_s

    def describe(self) -> Iterable[str]:
        """One line per domain: key and source."""
        return [f"{k} ({s})" for k, s in self.sources.items()]


def _describe(meter: Meter, exc: BaseException) -> str:
    """``"<meter>: <error>"`` for an error message, without naming the meter twice."""
    text = str(exc) or type(exc).__name__
    if not isinstance(exc, PlatformError):
        text = f"{type(exc).__name__}: {text}"
    return text if text.startswith(f"{meter.name}:") else f"{meter.name}: {text}"

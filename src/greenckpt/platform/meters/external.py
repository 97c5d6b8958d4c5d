"""External power meters (wall-plug meters, PDUs) through a ``timestamp,watts`` CSV log.

Why: the most trustworthy node figure is an instrument between the wall and the power supply
(the papers' numbers come from such meters), and nearly all of them — or the script polling
them — can write a CSV. greenckpt does not talk to the instrument; it reads the log.

Format (one reading per line; what ``powerstat``-style loggers and most meters' software write)::

    # comments and blank lines are ignored; an optional header line is skipped
    timestamp,watts
    1718000000.00,231.4
    1718000000.50,236.9

``timestamp`` is **Unix time in seconds** (float, UTC, ``time.time()`` of the logging host);
``watts`` is the average or instantaneous power of that reading. Timestamps must increase; the
logging host's clock must be the run's clock (same host, or NTP-synchronised).

Two uses:

* **Join afterwards** (accurate): :meth:`PowerLog.energy_between` integrates the readings
  between two Unix timestamps by trapezoids, interpolating linearly at both ends. The sampler
  records every phase's wall-clock start and end
  (:attr:`~greenckpt.platform.sampler.PhaseEnergy.start_unix`), so a run's phases can be
  charged from the meter's log once the run is over.
* **Live** (approximate): :class:`ExternalCsvMeter` tails the file while it grows — new complete
  lines are read on each :meth:`~ExternalCsvMeter.read` — and integrates by zero-order hold,
  extrapolating the last reading to now; the cumulative figure is clamped so it never
  decreases when a late row revises the extrapolation. Its error per span is the logger's
  interval × the power change; prefer the join for reported numbers.

  The last power is extrapolated for at most the *hold limit* past the last row's timestamp:
  three times the log's median interval (over its last 16 rows), at least 1 s — 10 s while the
  log has fewer than two rows — or ``MeterOptions.csv_max_hold_s``. A log that falls further
  behind (the logger stopped, crashed or stalls) makes :meth:`ExternalCsvMeter.read` raise
  ``PlatformError`` rather than present a held figure as a measurement; the sampler marks the
  phases concerned, and when rows come again the time in between is not charged (join the log
  afterwards for the exact figure). A log with no row yet raises too.

Both are ``measured``: the figures come from an instrument.
"""

from __future__ import annotations

import math
import os
import statistics
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Self

import numpy as np
import numpy.typing as npt

from greenckpt.platform.meters.base import (
    Clock,
    Meter,
    MeterOptions,
    MeterUnavailable,
    PowerIntegrator,
    Resolution,
    Source,
)
from greenckpt.platform.root import PlatformError, SysRoot

HOLD_INTERVALS = 3.0
"""The live meter extrapolates the last row for at most this many log intervals..."""
MIN_HOLD_S = 1.0
"""... and for at least this long (loggers flush in bursts)."""
DEFAULT_HOLD_S = 10.0
"""Hold limit while the log has fewer than two rows (its interval is not known yet)."""
_INTERVALS_KEPT = 16


def _parse_line(line: str) -> tuple[float, float, int] | None:
    """``(timestamp, watts, decimals of watts)``, or None for a blank/comment/header line.

    Raises ``ValueError`` for a line that is neither.
    """
    text = line.strip()
    if not text or text.startswith("#"):
        return None
    parts = [p.strip() for p in text.split(",")]
    if len(parts) < 2:
        raise ValueError(f"expected 'timestamp,watts', got {text!r}")
    try:
        ts = float(parts[0])
    except ValueError:
        if parts[0].lower() in {"timestamp", "time", "unix", "t"}:
            return None  # header
        raise
    watts = float(parts[1])
    if not (math.isfinite(ts) and math.isfinite(watts)) or watts < 0:
        raise ValueError(f"timestamp and watts must be finite, watts ≥ 0: {text!r}")
    decimals = len(parts[1].partition(".")[2].rstrip()) if "." in parts[1] else 0
    return ts, watts, decimals


@dataclass(frozen=True)
class PowerLog:
    """A whole ``timestamp,watts`` log, for joining energy to a run afterwards (measured)."""

    times: npt.NDArray[np.float64]  # Unix seconds, strictly increasing
    watts: npt.NDArray[np.float64]
    source: ClassVar[Source] = "measured"

    @classmethod
    def parse(cls, lines: Iterable[str], where: str = "<log>") -> PowerLog:
        """Parse CSV lines; ``PlatformError`` naming the line for a bad row or a time step back."""
        ts: list[float] = []
        ws: list[float] = []
        for no, line in enumerate(lines, 1):
            try:
                row = _parse_line(line)
            except ValueError as exc:
                raise PlatformError(f"{where}:{no}: {exc}") from None
            if row is None:
                continue
            if ts and row[0] <= ts[-1]:
                raise PlatformError(f"{where}:{no}: timestamp {row[0]} not after {ts[-1]}")
            ts.append(row[0])
            ws.append(row[1])
        if len(ts) < 2:
            raise PlatformError(f"{where}: fewer than two readings")
        return cls(np.asarray(ts, dtype=np.float64), np.asarray(ws, dtype=np.float64))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> PowerLog:
        """Read a log file (see the module docstring for the format)."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise PlatformError(f"cannot read power log {path}: {exc}") from None
        return cls.parse(text.splitlines(), str(path))

    @property
    def span(self) -> tuple[float, float]:
        """First and last timestamps."""
        return float(self.times[0]), float(self.times[-1])

    def _at(self, t: float) -> float:
        return float(np.interp(t, self.times, self.watts))

    def energy_between(self, t0: float, t1: float) -> float:
        """Joules between Unix times ``t0`` ≤ ``t1`` by trapezoids (measured).

        ``PlatformError`` if the log does not cover ``[t0, t1]``: extrapolating a wall meter's
        log would present a guess as a measurement.
        """
        if t1 < t0:
            raise PlatformError(f"end {t1} before start {t0}")
        lo, hi = self.span
        if t0 < lo or t1 > hi:
            raise PlatformError(
                f"the power log covers [{lo:.3f}, {hi:.3f}] but [{t0:.3f}, {t1:.3f}] was asked"
            )
        inside = (self.times > t0) & (self.times < t1)
        t = np.concatenate(([t0], self.times[inside], [t1]))
        w = np.concatenate(([self._at(t0)], self.watts[inside], [self._at(t1)]))
        return float(np.sum((w[1:] + w[:-1]) * 0.5 * np.diff(t)))

    def mean_power(self, t0: float, t1: float) -> float:
        """Average watts over ``[t0, t1]`` (measured); the reading at ``t0`` if they are equal."""
        if t1 == t0:
            self.energy_between(t0, t1)  # range check
            return self._at(t0)
        return self.energy_between(t0, t1) / (t1 - t0)


class ExternalCsvMeter(Meter):
    """A growing ``timestamp,watts`` CSV read live (tail) and integrated; measured."""

    name = "csv"
    source: ClassVar[Source] = "measured"

    def __init__(
        self, path: Path, domain: str, wall_clock: Clock, max_hold_s: float | None = None
    ) -> None:
        self.path = path
        self._domain = domain
        self._wall = wall_clock
        self.max_hold_s = max_hold_s
        self._fh = open(path, "rb")  # noqa: SIM115 - held open for tailing; closed in close()
        self._offset = 0
        self._partial = b""
        self._integ = PowerIntegrator()
        self._decimals: int | None = None
        self._t_row: float | None = None  # timestamp of the last row accepted
        self._intervals: deque[float] = deque(maxlen=_INTERVALS_KEPT)
        self._t_returned = -math.inf  # the latest wall time a figure was handed out for
        self._frozen = False
        self.skipped_lines = 0
        self.rows = 0
        self.stale_reads = 0
        try:
            self._tail()
        except BaseException:
            self._fh.close()
            raise
        now = self._wall()
        energy = self._energy_now(now)  # (freezes a log that is already stale)
        self._base = energy if energy is not None else self._integ.energy_at(now)
        self._last = 0.0

    @classmethod
    def probe(cls, root: SysRoot, options: MeterOptions) -> Self:
        if options.csv_path is None:
            raise MeterUnavailable(
                cls.name, "no log file given (MeterOptions.csv_path: a timestamp,watts CSV)"
            )
        path = Path(options.csv_path)
        if not path.is_file():
            raise MeterUnavailable(cls.name, f"power log {path} does not exist")
        hold = options.csv_max_hold_s
        if hold is not None and not (hold > 0):
            raise MeterUnavailable(cls.name, f"csv_max_hold_s must be positive, got {hold}")
        try:
            return cls(path, options.csv_domain, options.wall_clock, hold)
        except OSError as exc:
            raise MeterUnavailable(cls.name, f"cannot read {path}: {exc}") from None

    @property
    def domains(self) -> tuple[str, ...]:
        return (self._domain,)

    @property
    def resolution(self) -> Resolution:
        """The finest power step seen in the log (1 W until a row with decimals arrives)."""
        return Resolution(10.0 ** -(self._decimals or 0), "W")

    def _tail(self) -> None:
        """Read the lines appended since the last call and feed complete rows in."""
        fh = self._fh
        size = os.fstat(fh.fileno()).st_size
        if size < self._offset:  # truncated: start over; rows not after the last are skipped
            self._offset = 0
            self._partial = b""
        fh.seek(self._offset)
        data = fh.read()
        self._offset += len(data)
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()  # an incomplete last line waits for its newline
        for raw in lines:
            try:
                row = _parse_line(raw.decode("utf-8"))
            except (ValueError, UnicodeDecodeError):
                self.skipped_lines += 1
                continue
            if row is None:
                continue
            ts, watts, decimals = row
            if self._integ.t_last is not None and ts <= self._integ.t_last:
                self.skipped_lines += 1
                continue
            if self._t_row is not None:
                self._intervals.append(ts - self._t_row)
            self._integ.update(ts, watts)  # after a freeze, the gap is charged at 0 W
            self._t_row = ts
            self._frozen = False
            self.rows += 1
            self._decimals = decimals if self._decimals is None else max(self._decimals, decimals)

    @property
    def hold_s(self) -> float:
        """How long past the last row its power may be extrapolated (see the module doc)."""
        if self.max_hold_s is not None:
            return self.max_hold_s
        if not self._intervals:
            return DEFAULT_HOLD_S
        return max(MIN_HOLD_S, HOLD_INTERVALS * statistics.median(self._intervals))

    def _energy_now(self, now: float) -> float | None:
        """Integrated joules at ``now`` (log's origin), or None when the log is stale/empty."""
        if self._t_row is None:
            return None
        if now - self._t_row > self.hold_s:
            if not self._frozen:
                # Charge up to the last figure handed out, then nothing until a new row.
                self._integ.update(max(self._t_row, self._t_returned), 0.0)
                self._frozen = True
            return None
        self._t_returned = max(self._t_returned, now)
        return self._integ.energy_at(now)

    def read(self) -> dict[str, float]:
        self._tail()
        now = self._wall()
        energy = self._energy_now(now)
        if energy is None:
            self.stale_reads += 1
            if self._t_row is None:
                raise PlatformError(f"no reading in {self.path} yet (is the logger running?)")
            raise PlatformError(
                f"the last row of {self.path} is {now - self._t_row:.3g} s old, beyond the "
                f"{self.hold_s:.3g} s hold limit (has the logger stopped?); not extrapolating"
            )
        value = max(self._last, energy - self._base)
        self._last = value
        return {self._domain: value}

    def close(self) -> None:
        self._fh.close()

"""External power meters (wall-plug meters, PDUs) through a ``timestamp,watts`` CSV log.

Why: the most trustworthy node figure is an instrument between the wall and the power supply
(the papers' numbers come from such meters), and nearly all of them — or the script polling
them — can write a CSV. greenckpt does not talk to the instrument; it reads the log.

The details are in docs/design/measurement.md ("Meters: external meters (CSV logs)").
"""

from __future__ import annotations

import math
import os
import re
import statistics
import time
import warnings
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Self

import numpy as np
import numpy.typing as npt

from greenckpt.errors import GreenckptError, InvalidValueError
from greenckpt.files import NotRegularFileError, open_regular, read_regular
from greenckpt.platform.meters.base import (
    Clock,
    Meter,
    MeterOption,
    MeterOptions,
    MeterRole,
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
MAX_POWER_W = 1e6
"""A row above 1 MW is not a node's power (a unit or parsing error): it is refused."""
FUTURE_TOLERANCE_S = 5.0
"""The live meter takes a row dated up to this far past its clock as clock skew; later is
refused (a wrong clock or unit that would otherwise block every later row)."""
MAX_WARNINGS = 10
"""Dropped rows warned about one by one per meter; the rest are counted, and all are listed in
:attr:`ExternalCsvMeter.dropped`."""

TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
"""Seconds per unit of the timestamp column."""
_UNIT_WORDS = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}
_TIME_HEADER = re.compile(
    r"^(?:timestamp|time|unix|epoch|t)(?:[_ ]?[(\[]?(s|ms|us|µs|ns)[)\]]?)?$", re.IGNORECASE
)
_POWER_HEADER = re.compile(r"^(?:watts?|power|p|w)(?:[_ ]?[(\[]?w[)\]]?)?$", re.IGNORECASE)


def _check_unit(unit: str | None) -> str | None:
    """``unit`` normalised (``µs`` → ``us``), or ValueError naming the valid ones."""
    if unit is None:
        return None
    u = unit.strip().lower().replace("µ", "u")
    if u not in TIME_UNITS:
        raise InvalidValueError(
            f"time unit {unit!r} is not one of {', '.join(TIME_UNITS)} (the timestamp column's "
            "unit; None: from the header, else detected)"
        )
    return u


@dataclass(frozen=True)
class DroppedRow:
    """A line of a power log that was not used, and why."""

    line: int
    text: str
    reason: str


class _RowError(GreenckptError, ValueError):
    """A line that is not a usable reading (the message says why)."""


class _Rows:
    """Parses a log's lines one at a time, keeping what the header said.

    Why a class: the join reads a whole file, the live meter reads lines as they come; both
    must accept and refuse exactly the same rows. A row is ``timestamp,watts``: exactly as many
    fields as the header (two without one — a third field is most often a decimal comma, as
    in ``100,200,5``), a finite timestamp, a power from 0 to :data:`MAX_POWER_W`, and a time
    after the previous row's. The timestamp unit is the one stated by the caller, else the
    header's (``time_ms``), else detected from the first row against the clock (Unix time in
    s, ms, µs or ns is within a factor 2 of the clock in exactly one unit), else seconds.
    """

    def __init__(self, unit: str | None, clock: Clock | None) -> None:
        self.stated = _check_unit(unit)
        self.unit = self.stated
        self.how = "stated" if self.stated else ""
        self.clock = clock
        self.fields = 2
        self.t_last: float | None = None

    def reset(self) -> None:
        """The file was truncated: a new header may come (rows must still move forward)."""
        self.fields = 2

    @property
    def unit_note(self) -> str:
        """One line on the timestamp unit in use and how it was found (empty before a row)."""
        if self.unit is None:
            return ""
        return f"timestamps: {self.unit} ({_UNIT_WORDS[self.unit]}, {self.how})"

    def _header(self, parts: list[str]) -> None:
        time_name = _TIME_HEADER.match(parts[0])
        if time_name is None:
            raise _RowError(
                f"{parts[0]!r} is neither a timestamp nor a header's time column (timestamp, "
                "time, time_s, time_ms, time_us, time_ns)"
            )
        if not _POWER_HEADER.match(parts[1]):
            raise _RowError(
                f"the second column {parts[1]!r} must be the power in watts (name it watts, "
                "power or power_w)"
            )
        said = _check_unit(time_name.group(1))
        if said is not None:
            if self.stated is not None and said != self.stated:
                raise _RowError(
                    f"the header says {said} but the time unit was given as {self.stated}"
                )
            if self.unit is not None and said != self.unit:
                raise _RowError(f"the header says {said}, the earlier rows were in {self.unit}")
            self.unit, self.how = said, self.how or f"from the header {parts[0]!r}"
        self.fields = len(parts)

    def _detect(self, ts: float) -> None:
        now = self.clock() if self.clock is not None else 0.0
        for unit, scale in TIME_UNITS.items():
            if now > 0 and 0.5 <= ts * scale / now <= 2.0:
                self.unit = unit
                self.how = f"detected: the first timestamp {ts:.6g} against the clock {now:.6g} s"
                return
        self.unit = "s"
        self.how = (
            f"assumed: the first timestamp {ts:.6g} is not Unix time in any unit, so it is "
            "taken as seconds, the format's unit"
        )

    def parse(self, line: str) -> tuple[float, float, int] | None:
        """``(timestamp in s, watts, decimals of watts)``, None for a blank, comment or header
        line; :class:`_RowError` for anything else."""
        text = line.strip().lstrip("\ufeff").strip()
        if not text or text.startswith("#"):
            return None
        if ";" in text:
            raise _RowError(
                "';' separates the fields: write timestamp,watts with ',' between the fields "
                "and '.' as the decimal point"
            )
        parts = [p.strip() for p in text.split(",")]
        try:
            ts = float(parts[0])
        except ValueError:
            if len(parts) < 2:
                raise _RowError(f"expected 'timestamp,watts', got {text!r}") from None
            self._header(parts)
            return None
        if len(parts) != self.fields:
            if len(parts) > self.fields:
                raise _RowError(
                    f"{len(parts)} fields where {self.fields} are expected: a decimal comma? "
                    "write watts as 200.5, not 200,5"
                )
            raise _RowError(f"expected 'timestamp,watts', got {text!r}")
        try:
            watts = float(parts[1])
        except ValueError:
            raise _RowError(f"power {parts[1]!r} is not a number of watts") from None
        if not math.isfinite(ts):
            raise _RowError(f"timestamp {parts[0]!r} is not finite")
        if not (0.0 <= watts <= MAX_POWER_W):  # False for NaN too
            raise _RowError(
                f"power {parts[1]} W is not plausible (expected 0 to {MAX_POWER_W:.0e} W, finite)"
            )
        if self.unit is None:
            self._detect(ts)
        t = ts * TIME_UNITS[self.unit or "s"]
        if self.t_last is not None and t <= self.t_last:
            raise _RowError(f"timestamp {ts:.17g} not after the previous row's")
        decimals = len(parts[1].partition(".")[2].rstrip()) if "." in parts[1] else 0
        return t, watts, decimals

    def accept(self, t: float) -> None:
        """``t`` (s) is the newest row used."""
        self.t_last = t


def _summary(where: str, dropped: Sequence[DroppedRow], shown: int = 5) -> str:
    """``dropped N row(s) of WHERE: line 4 (why), ...``."""
    lines = ", ".join(f"line {d.line} ({d.reason})" for d in dropped[:shown])
    more = f", and {len(dropped) - shown} more" if len(dropped) > shown else ""
    return f"dropped {len(dropped)} row(s) of {where}: {lines}{more}"


def _read_regular(path: str | os.PathLike[str]) -> bytes:
    """The bytes of a regular file; PlatformError for a FIFO, device or directory (reading a
    FIFO would wait for a writer forever)."""
    try:
        return read_regular(path)
    except NotRegularFileError as exc:
        raise PlatformError(f"power log {path} is {exc.strerror}: give the logger's file") from None


@dataclass(frozen=True)
class PowerLog:
    """A whole ``timestamp,watts`` log, for joining energy to a run afterwards (measured)."""

    times: npt.NDArray[np.float64]  # Unix seconds, strictly increasing
    watts: npt.NDArray[np.float64]
    dropped: tuple[DroppedRow, ...] = ()
    """Rows left out (only when parsed with ``strict=False``)."""
    notes: tuple[str, ...] = ()
    """The timestamp unit and how it was found; the dropped rows, named."""
    source: ClassVar[Source] = "measured"

    @classmethod
    def parse(
        cls,
        lines: Iterable[str],
        where: str = "<log>",
        *,
        time_unit: str | None = None,
        strict: bool = True,
        clock: Clock = time.time,
    ) -> PowerLog:
        """Parse CSV lines (see :class:`_Rows` for what a valid row is).

        ``strict``: a bad row or a time step back raises ``PlatformError`` naming the line;
        otherwise such rows are left out and listed in :attr:`dropped` and :attr:`notes`.
        ``time_unit``: ``s``/``ms``/``us``/``ns`` (ValueError for another), else from the
        header, else detected against ``clock`` (Unix time).
        """
        rows = _Rows(time_unit, clock)
        ts: list[float] = []
        ws: list[float] = []
        dropped: list[DroppedRow] = []
        for no, line in enumerate(lines, 1):
            try:
                row = rows.parse(line)
            except _RowError as exc:
                if strict:
                    raise PlatformError(f"{where}:{no}: {exc}") from None
                dropped.append(DroppedRow(no, line.strip(), str(exc)))
                continue
            if row is None:
                continue
            rows.accept(row[0])
            ts.append(row[0])
            ws.append(row[1])
        notes = [rows.unit_note] if rows.unit_note else []
        if dropped:
            notes.append(_summary(where, dropped))
        if len(ts) < 2:
            why = f"; {notes[-1]}" if dropped else ""
            raise PlatformError(f"{where}: fewer than two readings{why}")
        return cls(
            np.asarray(ts, dtype=np.float64),
            np.asarray(ws, dtype=np.float64),
            tuple(dropped),
            tuple(notes),
        )

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        time_unit: str | None = None,
        strict: bool = True,
        clock: Clock = time.time,
    ) -> PowerLog:
        """Read a log file (format: docs/design/measurement.md); a UTF-8 BOM is fine."""
        try:
            text = _read_regular(path).decode("utf-8-sig")
        except (OSError, UnicodeDecodeError) as exc:
            raise PlatformError(f"cannot read power log {path}: {exc}") from None
        return cls.parse(
            text.splitlines(), str(path), time_unit=time_unit, strict=strict, clock=clock
        )

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
    role: ClassVar[MeterRole] = "node"
    label = "external power meter"
    options = (
        MeterOption(
            "csv_path",
            "an external power meter's log (timestamp,watts CSV, docs/formats.md) read by "
            "the csv meter; with auto meters it is used in addition to the others",
            flag="--meter-csv",
            metavar="FILE",
            path=True,
        ),
        MeterOption("csv_domain", "the domain the log's power is reported as (node)"),
        MeterOption("csv_max_hold_s", "how long past its last row the log's power may be held"),
        MeterOption("csv_time_unit", "the unit of the log's timestamps (s, ms, us or ns)"),
    )

    @classmethod
    def not_needed(cls, options: MeterOptions) -> str | None:
        return "no external meter log given" if options.csv_path is None else None

    def __init__(
        self,
        path: Path,
        domain: str,
        wall_clock: Clock,
        max_hold_s: float | None = None,
        time_unit: str | None = None,
    ) -> None:
        self.path = path
        self._domain = domain
        self._wall = wall_clock
        self.max_hold_s = max_hold_s
        self._rows = _Rows(time_unit, wall_clock)  # ValueError for an unknown unit
        try:
            fd = open_regular(path)
        except NotRegularFileError as exc:
            raise PlatformError(
                f"power log {path} is {exc.strerror}: give the logger's file"
            ) from None
        self._fh = os.fdopen(fd, "rb")  # held open for tailing; closed in close()
        self._offset = 0
        self._line = 0  # lines consumed, for naming dropped rows
        self.dropped: list[DroppedRow] = []
        """Every row not used, with its line number and why (also warned about, up to
        :data:`MAX_WARNINGS`; reads whose figure spans a dropped row count in :attr:`gaps`)."""
        self._gaps = 0
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
        if not path.exists():
            raise MeterUnavailable(cls.name, f"power log {path} does not exist")
        hold = options.csv_max_hold_s
        if hold is not None and not (hold > 0):
            raise MeterUnavailable(cls.name, f"csv_max_hold_s must be positive, got {hold}")
        try:
            return cls(path, options.csv_domain, options.wall_clock, hold, options.csv_time_unit)
        except (ValueError, PlatformError) as exc:
            raise MeterUnavailable(cls.name, str(exc)) from None
        except OSError as exc:
            raise MeterUnavailable(cls.name, f"cannot read {path}: {exc}") from None

    @property
    def domains(self) -> tuple[str, ...]:
        return (self._domain,)

    @property
    def resolution(self) -> Resolution:
        """The finest power step seen in the log (1 W until a row with decimals arrives)."""
        return Resolution(10.0 ** -(self._decimals or 0), "W")

    def _tail(self) -> int:
        """Read the lines appended since the last call and feed complete rows in; returns how
        many rows were dropped."""
        fh = self._fh
        size = os.fstat(fh.fileno()).st_size
        if size < self._offset:  # truncated: start over; rows not after the last are dropped
            self._offset = 0
            self._partial = b""
            self._line = 0
            self._rows.reset()
        fh.seek(self._offset)
        data = fh.read()
        self._offset += len(data)
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()  # an incomplete last line waits for its newline
        dropped = 0
        now = self._wall()
        for raw in lines:
            self._line += 1
            text = raw.decode("utf-8", errors="replace")
            try:
                row = self._rows.parse(text)
                if row is not None and row[0] > now + FUTURE_TOLERANCE_S:
                    raise _RowError(
                        f"dated {row[0] - now:.3g} s ahead of this host's clock (is the "
                        "logger's clock, or the timestamp unit, wrong?)"
                    )
            except _RowError as exc:
                self._drop(DroppedRow(self._line, text.strip(), str(exc)))
                dropped += 1
                continue
            if row is None:
                continue
            ts, watts, decimals = row
            self._rows.accept(ts)
            if self._t_row is not None:
                self._intervals.append(ts - self._t_row)
            self._integ.update(ts, watts)  # after a freeze, the gap is charged at 0 W
            self._t_row = ts
            self._frozen = False
            self.rows += 1
            self._decimals = decimals if self._decimals is None else max(self._decimals, decimals)
        return dropped

    def _drop(self, row: DroppedRow) -> None:
        self.dropped.append(row)
        self.skipped_lines += 1
        n = len(self.dropped)
        if n <= MAX_WARNINGS:
            message = f"power log {self.path}: dropped line {row.line} ({row.reason})"
        elif n == MAX_WARNINGS + 1:
            message = (
                f"power log {self.path}: further rows dropped; all are listed in the meter's "
                "dropped rows"
            )
        else:
            return
        warnings.warn(message, RuntimeWarning, stacklevel=4)

    @property
    def notes(self) -> tuple[str, ...]:
        """The timestamp unit and how it was found, and the rows dropped so far, named."""
        out = [self._rows.unit_note] if self._rows.unit_note else []
        if self.dropped:
            out.append(_summary(str(self.path), self.dropped))
        return tuple(out)

    @property
    def gaps(self) -> Mapping[str, int]:
        """Reads whose figure spans a row that was dropped (a hole in the log)."""
        return {self._domain: self._gaps} if self._gaps else {}

    def describe(self) -> str:
        """The base line plus the timestamp unit (and how it was found)."""
        unit = self._rows.unit_note
        return super().describe() + (f"; {unit}" if unit else "")

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
        if self._tail():
            self._gaps += 1
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

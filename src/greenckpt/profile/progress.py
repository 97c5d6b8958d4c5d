"""Progress of a sweep: what is done, what remains, and an estimated time to finish.

Why bytes *and* process starts: a cell's time is moving its bytes (size × runs) plus starting
its worker processes (runs × processes; each is a fresh Python interpreter, about 0.1-0.3 s
on a small node — with 16 processes per run that dominates a small cell). The time left is
fitted as ``a·bytes + b·starts`` (non-negative least squares) over the finished cells and
applied to what remains; with fewer than two cells it is the bytes left at the observed rate.
Cells skipped on resume count as done and take no time, so they do not skew the estimate.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, TextIO

import numpy as np
from scipy.optimize import nnls

from greenckpt.profile.grid import Cell


@dataclass
class Eta:
    """Time-to-finish estimate from bytes and process starts (see the module docstring)."""

    total_bytes: int
    total_starts: int = 0
    done_bytes: int = 0
    done_starts: int = 0
    measured_bytes: int = 0
    measured_seconds: float = 0.0
    _cells: list[tuple[float, float, float]] = field(default_factory=list, repr=False)

    def skip(self, nbytes: int, starts: int = 0) -> None:
        """A cell already measured by an earlier run (no time spent now)."""
        self.done_bytes += nbytes
        self.done_starts += starts

    def add(self, nbytes: int, seconds: float, starts: int = 0) -> None:
        """A cell measured now: its bytes, its process starts and the wall time it took."""
        self.done_bytes += nbytes
        self.done_starts += starts
        self.measured_bytes += nbytes
        self.measured_seconds += seconds
        self._cells.append((float(nbytes), float(starts), seconds))

    @property
    def fraction(self) -> float:
        """Share of the bytes done, 0..1 (an adaptive sweep that looks at a cell quickly and then
        measures it in full counts both, so it is capped)."""
        return min(1.0, self.done_bytes / self.total_bytes) if self.total_bytes else 1.0

    @property
    def seconds_left(self) -> float:
        """Estimated seconds to finish; NaN before the first measured cell."""
        if self.measured_bytes == 0:
            return math.nan
        left_bytes = max(0, self.total_bytes - self.done_bytes)
        left_starts = max(0, self.total_starts - self.done_starts)
        if len(self._cells) >= 2 and any(c[1] for c in self._cells):
            a = np.array([c[:2] for c in self._cells])
            scale = a.max(axis=0)
            scale[scale == 0] = 1.0
            coef, _ = nnls(a / scale, np.array([c[2] for c in self._cells]))
            per_byte, per_start = coef / scale
            return float(per_byte * left_bytes + per_start * left_starts)
        rate = self.measured_bytes / max(self.measured_seconds, 1e-9)
        return left_bytes / rate


def format_eta(seconds: float) -> str:
    """``1h02m``, ``3m05s``, ``42s`` or ``?`` when unknown."""
    if not math.isfinite(seconds):
        return "?"
    s = round(seconds)
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


class ProgressSink(Protocol):
    """Receives the sweep's progress (the CLI renders it as a bar or as lines)."""

    def started(self, cells: int, skipped: int, eta: Eta) -> None:
        """The sweep starts: ``cells`` in all, ``skipped`` already done."""
        ...

    def cell_done(self, index: int, cell: Cell, summary: str, eta: Eta) -> None:
        """Cell number ``index`` (1-based) finished; ``summary`` is one line of results."""
        ...

    def finished(self, eta: Eta) -> None:
        """The sweep ended (complete, or stopped early by the adaptive mode)."""
        ...


class LineProgress:
    """One line per finished cell (for logs and non-terminals): ``[3/24 12%] ... ETA 4m10s``."""

    def __init__(
        self, stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self._clock = clock
        self._t0 = clock()
        self._cells = 0

    def started(self, cells: int, skipped: int, eta: Eta) -> None:
        self._cells = cells
        self._t0 = self._clock()
        resumed = f" ({skipped} already measured, resuming)" if skipped else ""
        print(f"profiling {cells} cells{resumed}", file=self.stream, flush=True)

    def cell_done(self, index: int, cell: Cell, summary: str, eta: Eta) -> None:
        print(
            f"[{index}/{self._cells} {eta.fraction:4.0%}] {cell.label}: {summary}  "
            f"ETA {format_eta(eta.seconds_left)}",
            file=self.stream,
            flush=True,
        )

    def finished(self, eta: Eta) -> None:
        took = format_eta(self._clock() - self._t0)
        print(f"done in {took}", file=self.stream, flush=True)

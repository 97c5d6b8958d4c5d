"""Progress of a sweep: what is done, what remains, and an estimated time to finish.

Why by bytes: a cell's time is dominated by moving its bytes (size × runs per cell), so the
time left is estimated as the bytes left at the rate observed so far (wall time of the
finished cells, everything included). Cells skipped on resume count as done and take no
time, so the estimate of a resumed sweep is not skewed by them.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TextIO

from greenckpt.profile.grid import Cell


@dataclass
class Eta:
    """Byte-weighted time-to-finish estimate."""

    total_bytes: int
    done_bytes: int = 0
    measured_bytes: int = 0
    measured_seconds: float = 0.0

    def skip(self, nbytes: int) -> None:
        """Bytes of a cell already measured by an earlier run (no time spent now)."""
        self.done_bytes += nbytes

    def add(self, nbytes: int, seconds: float) -> None:
        """A cell measured now: its bytes and the wall time it took."""
        self.done_bytes += nbytes
        self.measured_bytes += nbytes
        self.measured_seconds += seconds

    @property
    def fraction(self) -> float:
        """Share of the bytes done, 0..1."""
        return self.done_bytes / self.total_bytes if self.total_bytes else 1.0

    @property
    def seconds_left(self) -> float:
        """Estimated seconds to finish; NaN before the first measured cell."""
        if self.measured_bytes == 0:
            return math.nan
        rate = self.measured_bytes / max(self.measured_seconds, 1e-9)
        return max(0, self.total_bytes - self.done_bytes) / rate


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

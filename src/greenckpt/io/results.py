"""What a finished job reports: per worker and in aggregate, on the node's monotonic clock.

Why its own module: the figures a profile stores come from here, and their definitions must
not drift — aggregate throughput is ``S / (last end − earliest release)``, each worker's own
throughput is over its own duration, and the window is on ``time.monotonic()`` so power
samples can be lined up with it. Design notes: docs/design/measurement.md ("The I/O engine").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from greenckpt.io.jobplan import Layout, StartMethod
from greenckpt.io.sources import DataKind
from greenckpt.io.worker import Op, ReadMethod, WorkerReport

__all__ = ["IOResult", "ProcessResult", "process_results"]


@dataclass(frozen=True)
class ProcessResult:
    """One worker: bytes, and times in seconds relative to the job's common start."""

    rank: int
    bytes: int
    start_s: float
    end_s: float
    seconds: float
    """``end_s − start_s``: the worker's own duration."""
    throughput: float
    """Bytes per second of this worker over its own duration."""
    checksums: tuple[int, ...] | None
    """CRC-32 per chunk, in chunk order, when the job asked for checksums."""


@dataclass(frozen=True)
class IOResult:
    """A finished job: what was asked, how it was measured, and how fast it went."""

    op: Op
    layout: Layout
    workers: int
    total_bytes: int
    block_size: int
    fsync: bool
    read_method: ReadMethod | None
    """How the page cache was avoided (reads); ``None`` for writes."""
    path: str
    files: tuple[str, ...]
    kept: bool
    """Whether the files are still there (a kept write, or a read's input files)."""
    storage_key: str | None
    """:func:`~greenckpt.platform.storage.identify_storage` key; ``None`` if it failed."""
    in_process: bool
    start_method: StartMethod | None
    """``None`` when the single worker ran in the calling process."""
    wall_s: float
    """``max end − common start``."""
    start_monotonic_s: float
    """The common start on ``time.monotonic()``'s clock (the same in every process of the
    node), so power samples can be lined up with the I/O window."""
    end_monotonic_s: float
    """The last worker's end on the same clock."""
    throughput: float
    """Aggregate bytes per second: ``total_bytes / wall_s``."""
    processes: tuple[ProcessResult, ...]
    notes: tuple[str, ...] = ()
    codec: str | None = None
    """Canonical codec label (``zstd:3``…) when blocks were compressed; ``None`` otherwise."""
    stored_bytes: int = 0
    """Bytes written to or read from the files: ``total_bytes`` unless compressed."""
    data: DataKind = "random"
    """What the written data looked like (reads: what the caller says was written)."""

    @property
    def compression_ratio(self) -> float:
        """Logical bytes per stored byte (1.0 uncompressed)."""
        return self.total_bytes / self.stored_bytes if self.stored_bytes else 1.0

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values (lists for tuples)."""
        out: dict[str, Any] = _jsonable(asdict(self))
        return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def process_results(
    reports: list[WorkerReport],
) -> tuple[tuple[ProcessResult, ...], int, int, float]:
    """Per-worker results, the common start and last end (ns) and the wall time (s).

    The common start is the earliest release; the wall time is never below 1 ns, so a
    throughput is always defined.
    """
    start = min(r.start_ns for r in reports)
    end = max(r.end_ns for r in reports)
    wall = max((end - start) / 1e9, 1e-9)
    processes = tuple(
        ProcessResult(
            rank=r.rank,
            bytes=r.bytes,
            start_s=(r.start_ns - start) / 1e9,
            end_s=(r.end_ns - start) / 1e9,
            seconds=(r.end_ns - r.start_ns) / 1e9,
            throughput=r.bytes / max((r.end_ns - r.start_ns) / 1e9, 1e-9),
            checksums=r.checksums,
        )
        for r in reports
    )
    return processes, start, end, wall

"""Where the bytes of a write come from: generated data or the caller's own buffers.

Why a seam here: the profiler writes synthetic data, the checkpoint library writes the
application's state, and both must go through the *same* write loop (DESIGN.md: the profiler
measures the code path the checkpoints use). A :class:`DataSource` hands the write loop one
block at a time as a ``memoryview``; the loop never copies it, so a source that already holds
the data (:class:`BufferSource`) costs no extra full copy.

Why generated data is pseudo-random: zeros or a short repeated pattern would flatter any later
compression experiment (and some storage compresses or deduplicates on its own). The pool is
generated *before* the start barrier, so generating it is not part of the measured time.
"""

from __future__ import annotations

import random
from typing import Protocol, runtime_checkable

__all__ = ["DEFAULT_POOL_BYTES", "BufferSource", "DataSource", "PatternSource"]

DEFAULT_POOL_BYTES = 8 * 1024 * 1024
"""Size of the random pool a :class:`PatternSource` repeats. 8 MiB is larger than the window
of zlib (32 KiB), lz4 (64 KiB) and default zstd levels, so those see incompressible data."""


@runtime_checkable
class DataSource(Protocol):
    """Bytes of one chunk, served block by block to the write loop.

    ``prepare`` runs in the worker before the start barrier (unmeasured): generate, attach to
    shared memory, check sizes. ``block`` runs inside the measured loop and must be cheap:
    return a view, do not build new bytes.
    """

    def prepare(self, length: int, block_size: int) -> None:
        """Get ready to serve ``length`` bytes in blocks of at most ``block_size``."""
        ...

    def block(self, pos: int, length: int) -> memoryview:
        """The ``length`` bytes at position ``pos`` of the chunk (0 = chunk start)."""
        ...


class PatternSource:
    """Incompressible pseudo-random bytes from a fixed seed (reproducible, hence checkable).

    A pool of ``pool_bytes`` random bytes (rounded up to a whole number of blocks so every block
    is one contiguous slice, hence zero-copy) is generated from ``(seed, stream)`` and repeated.
    ``stream`` keeps chunks of different workers different. Picklable: it crosses into spawned
    workers as three integers and generates its pool there.
    """

    def __init__(self, seed: int = 0, stream: int = 0, pool_bytes: int = DEFAULT_POOL_BYTES):
        if pool_bytes < 1:
            raise ValueError(f"pool_bytes must be ≥ 1, got {pool_bytes}")
        self.seed = seed
        self.stream = stream
        self.pool_bytes = pool_bytes
        self._pool: memoryview | None = None

    def __getstate__(self) -> dict[str, int]:
        """Pickle the recipe, not the pool (the worker regenerates it before the barrier)."""
        return {"seed": self.seed, "stream": self.stream, "pool_bytes": self.pool_bytes}

    def __setstate__(self, state: dict[str, int]) -> None:
        """Restore from :meth:`__getstate__`."""
        self.seed = state["seed"]
        self.stream = state["stream"]
        self.pool_bytes = state["pool_bytes"]
        self._pool = None

    def prepare(self, length: int, block_size: int) -> None:
        """Generate the pool: ``min(pool_bytes, length)`` rounded up to whole blocks."""
        size = max(1, min(self.pool_bytes, length))
        size = -(-size // block_size) * block_size
        rng = random.Random(self.seed * 1_000_003 + self.stream)
        self._pool = memoryview(rng.randbytes(size))

    def block(self, pos: int, length: int) -> memoryview:
        """A view into the pool (``pos`` is a multiple of the block size in the write loop)."""
        pool = self._pool
        if pool is None:
            raise RuntimeError("PatternSource.block called before prepare")
        start = pos % len(pool)
        if start + length <= len(pool):
            return pool[start : start + length]
        # Only reached when a caller uses positions that are not block-aligned.
        return memoryview(bytes(pool[(start + i) % len(pool)] for i in range(length)))

    def expected(self, length: int, block_size: int) -> bytes:
        """The exact bytes a write of ``length`` produces (for verification, not for speed)."""
        self.prepare(length, block_size)
        return b"".join(
            bytes(self.block(p, min(block_size, length - p))) for p in range(0, length, block_size)
        )

    def __repr__(self) -> str:
        return (
            f"PatternSource(seed={self.seed}, stream={self.stream}, pool_bytes={self.pool_bytes})"
        )


class BufferSource:
    """The caller's own buffer (a checkpoint's arrays), served as views: no extra full copy.

    In-process only: a memoryview of the caller's memory cannot cross into a spawned worker
    without a copy, so the engine accepts it only for one worker run in the calling process.
    (For several processes, a shared-memory source is the next step; see the package docs.)
    """

    def __init__(self, buffer: memoryview | bytes | bytearray):
        view = memoryview(buffer)
        self._view = view.cast("B") if view.format != "B" or view.ndim != 1 else view

    def __len__(self) -> int:
        return len(self._view)

    def __reduce__(self) -> tuple[object, ...]:
        """Refuse pickling: crossing a process boundary would copy the whole buffer."""
        raise TypeError("BufferSource is in-process only (pickling would copy the buffer)")

    def prepare(self, length: int, block_size: int) -> None:
        """Check the buffer holds the chunk."""
        if len(self._view) < length:
            raise ValueError(f"BufferSource holds {len(self._view)} bytes, chunk needs {length}")

    def block(self, pos: int, length: int) -> memoryview:
        """A slice of the caller's buffer."""
        return self._view[pos : pos + length]

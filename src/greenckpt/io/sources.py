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
from typing import Literal, Protocol, runtime_checkable

from greenckpt.errors import InvalidTypeError, InvalidValueError, UsageError

DataKind = Literal["random", "field"]
DATA_KINDS: tuple[DataKind, ...] = ("random", "field")
"""What generated data looks like: ``random`` (incompressible) or ``field`` (a simulation's
floating-point state, about as compressible as real checkpoints of such codes)."""

__all__ = [
    "DATA_KINDS",
    "DEFAULT_POOL_BYTES",
    "BufferSource",
    "DataKind",
    "DataSource",
    "FieldSource",
    "PatternSource",
    "make_source",
]

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
            raise InvalidValueError(f"pool_bytes must be ≥ 1, got {pool_bytes}")
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
            raise UsageError("PatternSource.block called before prepare")
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


class FieldSource(PatternSource):
    """A 2-D heat-diffusion temperature field in float64: what a stencil code checkpoints.

    Why: compression only pays when the data compress, and random bytes never do while zeros
    compress absurdly well. Real simulation state is in between: smooth fields whose low
    mantissa bits still vary, with regions still at their initial value. This pool is a
    1024×1024 grid (8 MiB) of a few hot Gaussian sources from ``(seed, stream)`` over a plate at
    exactly 0.0 where the heat has not arrived (about a sixth of the grid). General-purpose
    codecs shrink it by about 1.2–1.3× (zstd:3 1.26, lz4 1.20, zlib:6 1.26 on this data); the
    ratio each run achieved is measured and recorded, never assumed.
    """

    SIDE = 1024
    SOURCES = 8

    def __init__(self, seed: int = 0, stream: int = 0) -> None:
        super().__init__(seed, stream, pool_bytes=self.SIDE * self.SIDE * 8)

    def prepare(self, length: int, block_size: int) -> None:
        """Compute the field (about 40 ms) and lay it out as whole blocks."""
        import numpy as np  # noqa: PLC0415 - workers writing random data never load NumPy

        rng = np.random.default_rng([self.seed, self.stream])
        axis = np.arange(self.SIDE) / self.SIDE
        y, x = axis[:, None], axis[None, :]
        field = np.zeros((self.SIDE, self.SIDE))
        for cx, cy, width, amp in rng.random((self.SOURCES, 4)):
            field += (20 + 80 * amp) * np.exp(
                -((x - cx) ** 2 + (y - cy) ** 2) / (0.002 + 0.01 * width)
            )
        field[field < 1e-3] = 0.0
        raw = field.tobytes()
        size = max(1, min(len(raw), length))
        size = -(-size // block_size) * block_size
        reps = -(-size // len(raw))
        self._pool = memoryview((raw * reps)[:size])

    def __repr__(self) -> str:
        return f"FieldSource(seed={self.seed}, stream={self.stream})"


def make_source(kind: DataKind, seed: int, stream: int) -> PatternSource:
    """The generated source for a data kind (picklable; it builds its pool in the worker)."""
    if kind == "field":
        return FieldSource(seed, stream)
    if kind == "random":
        return PatternSource(seed, stream)
    raise InvalidValueError(f"unknown data kind {kind!r}: use one of {', '.join(DATA_KINDS)}")


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
        raise InvalidTypeError("BufferSource is in-process only (pickling would copy the buffer)")

    def prepare(self, length: int, block_size: int) -> None:
        """Check the buffer holds the chunk."""
        if len(self._view) < length:
            raise InvalidValueError(
                f"BufferSource holds {len(self._view)} bytes, chunk needs {length}"
            )

    def block(self, pos: int, length: int) -> memoryview:
        """A slice of the caller's buffer."""
        return self._view[pos : pos + length]

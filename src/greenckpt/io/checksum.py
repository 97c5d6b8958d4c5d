"""Streaming checksums of checkpoint data.

Why: a checkpoint counts as complete only when its data are verified, and restart must never
pick a corrupt one. Every rank file and every variable therefore carries a digest that is
computed while the data stream past (no second pass over gigabytes, no copies of the caller's
arrays) and checked again before a restart trusts the file.

Two algorithms, named in the manifest so a reader knows how to check a file:

- ``"xxh3_64"`` (default): XXH3 64-bit from the C-backed ``xxhash`` package; it runs at memory
  bandwidth, so checking costs little next to the I/O it protects.
- ``"crc32"``: zlib's CRC-32, always available in the standard library and what tools such as
  ``cksum``-style scripts can reproduce without extra packages.

Neither is a cryptographic hash: they detect torn writes, bit rot and truncation, not tampering.
Digests are lowercase hexadecimal strings of a fixed length per algorithm (see
:func:`digest_hex_length`), so a manifest can check their shape before any file is read.
"""

from __future__ import annotations

import os
import zlib
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeAlias, cast

import numpy as np
import xxhash

from greenckpt.errors import GreenckptError, InvalidValueError

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

BufferLike: TypeAlias = "ReadableBuffer | np.ndarray[Any, Any]"
"""What can be checksummed: bytes, bytearray, memoryview, mmap, a C-contiguous NumPy array —
anything with the buffer protocol. NumPy arrays are named explicitly because on Python 3.11 the
type checker does not see them as buffers."""

__all__ = [
    "CHECKSUMS",
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_CHECKSUM",
    "BufferLike",
    "ChecksumError",
    "Hasher",
    "check_checksum_name",
    "digest_bytes",
    "digest_hex_length",
    "file_digest",
    "new_hasher",
]

CHECKSUMS: Final[tuple[str, ...]] = ("xxh3_64", "crc32")
"""The checksum names a manifest may record, default first."""

DEFAULT_CHECKSUM: Final = "xxh3_64"

DEFAULT_BLOCK_SIZE: Final = 4 * 1024 * 1024
"""Bytes read per call by :func:`file_digest`: large enough that per-call overhead vanishes,
small enough to stay in cache-friendly territory and not hold much memory."""

_HEX_LENGTH: Final[dict[str, int]] = {"xxh3_64": 16, "crc32": 8}


class ChecksumError(GreenckptError, ValueError):
    """An unknown checksum name; the message lists the valid names."""


class Hasher(Protocol):
    """An incremental checksum: feed buffers in order, then read the hex digest."""

    @property
    def name(self) -> str:
        """The checksum's name, one of :data:`CHECKSUMS`."""
        ...

    def update(self, buffer: BufferLike) -> None:
        """Add the bytes of ``buffer`` (any C-contiguous buffer; it is not copied)."""
        ...

    def hexdigest(self) -> str:
        """The lowercase hex digest of everything fed so far (does not reset the state)."""
        ...


def check_checksum_name(name: str) -> str:
    """Return ``name`` if it is a known checksum, else raise :class:`ChecksumError`."""
    if name not in CHECKSUMS:
        raise ChecksumError(f"unknown checksum {name!r}: expected one of {', '.join(CHECKSUMS)}")
    return name


def digest_hex_length(name: str) -> int:
    """Number of hex characters in a digest of checksum ``name`` (16 for xxh3_64, 8 for crc32)."""
    return _HEX_LENGTH[check_checksum_name(name)]


def _contiguous(buffer: BufferLike) -> memoryview:
    """A zero-copy view of ``buffer``, refused when its bytes are not laid out in C order.

    Why refuse instead of copying: a strided view (``a[:, ::2]``) or a Fortran-ordered array has
    no single "logical byte order" the digest could honestly stand for, and a silent copy of a
    large array would double the memory a checkpoint needs.
    """
    view = memoryview(cast("ReadableBuffer", buffer))
    if not view.c_contiguous:
        raise InvalidValueError(
            f"cannot checksum a non-C-contiguous buffer (shape {view.shape}, strides "
            f"{view.strides}): pass numpy.ascontiguousarray(x) or bytes"
        )
    return view


class _Xxh3Hasher:
    """XXH3 64-bit, streaming (the xxhash state carries across updates)."""

    name: Final = "xxh3_64"

    def __init__(self) -> None:
        self._state = xxhash.xxh3_64()

    def update(self, buffer: BufferLike) -> None:
        self._state.update(_contiguous(buffer))

    def hexdigest(self) -> str:
        return self._state.hexdigest()


class _Crc32Hasher:
    """CRC-32 (zlib), streaming through the running value."""

    name: Final = "crc32"

    def __init__(self) -> None:
        self._crc = 0

    def update(self, buffer: BufferLike) -> None:
        self._crc = zlib.crc32(_contiguous(buffer), self._crc)

    def hexdigest(self) -> str:
        return f"{self._crc:08x}"


def new_hasher(name: str = DEFAULT_CHECKSUM) -> Hasher:
    """A fresh incremental hasher for checksum ``name``."""
    if check_checksum_name(name) == "xxh3_64":
        return _Xxh3Hasher()
    return _Crc32Hasher()


def digest_bytes(name: str, buffer: BufferLike) -> str:
    """The hex digest of one buffer (bytes, memoryview, C-contiguous NumPy array, ...)."""
    hasher = new_hasher(name)
    hasher.update(buffer)
    return hasher.hexdigest()


def file_digest(
    path: str | os.PathLike[str],
    name: str = DEFAULT_CHECKSUM,
    block_size: int = DEFAULT_BLOCK_SIZE,
) -> tuple[str, int]:
    """Hex digest of a file's bytes and the number of bytes read.

    The file is read in ``block_size`` pieces into one reused buffer, so memory stays constant
    whatever the file's size. The byte count lets a caller tell a short file from a corrupt one.
    """
    if block_size < 1:
        raise InvalidValueError(f"block_size must be >= 1 byte, got {block_size}")
    hasher = new_hasher(name)
    buf = bytearray(block_size)
    view = memoryview(buf)
    total = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            n = f.readinto(view)
            if not n:
                break
            hasher.update(view[:n])
            total += n
    return hasher.hexdigest(), total

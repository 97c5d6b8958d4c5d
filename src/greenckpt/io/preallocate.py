"""Reserve a file's blocks before writing it (``fallocate`` with ``FALLOC_FL_KEEP_SIZE``).

Why: a buffered write into a new file leaves the file system to find blocks for it piece by
piece as the pages are written back (ext4's delayed allocation: an extent lookup and a block
allocation per writeback request). Reserving the whole range first lets the file system
allocate it at once, in as few extents as it can. Measured on the 2-vCPU VM this was developed
on (ext4 on virtio, 256 MiB in 1 MiB ``pwrite``\\s with writeback every 8 MiB, fsynced, page
reporting held, medians of 11 interleaved runs, 2026-12-06): 71.3 ms of CPU without, 65.5 ms
with — the 8 % by which the I/O engine cost more than ``ndarray.tofile``, which NumPy makes the
same call before (seen with strace); the wall time was the same (140 ms).

``KEEP_SIZE`` leaves the file's size to the writes, so a reader never sees a length that was
not written, and a write that stops early leaves a file as short as the bytes it holds. Only
for writes whose length is known (not compressed ones: blocks reserved past what a codec
stores would stay allocated beyond the end of the file). A hint, never a condition of a
correct write: where the call does not exist or is refused (a file system without it, no space
left — the write itself then reports that), the write goes on without it.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable

__all__ = ["FALLOC_FL_KEEP_SIZE", "reserve"]

FALLOC_FL_KEEP_SIZE = 1
"""``<linux/falloc.h>``: allocate the range but leave the file's size as it is."""

_Call = Callable[[int, int, int, int], int]


@functools.cache
def _fallocate() -> _Call | None:
    """libc's ``fallocate``, or None where there is none (looked up once, among the symbols the
    process already has, as :mod:`greenckpt.io.writeback` does for ``sync_file_range``)."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).fallocate
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    fn.restype = ctypes.c_int
    result: _Call = fn
    return result


def reserve(fd: int, offset: int, length: int) -> bool:
    """Reserve ``length`` bytes of ``fd`` from ``offset`` without changing its size; True if
    the file system did, False where it could not (nothing is changed then)."""
    call = _fallocate()
    if call is None or length <= 0:
        return False
    return call(fd, FALLOC_FL_KEEP_SIZE, offset, length) == 0

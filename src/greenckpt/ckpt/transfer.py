"""Moving checkpoint files between ranks in bounded segments (levels 2 and 3).

Why segments: a partner copy or a parity computation touches as many bytes as the checkpoint
itself, and the library promises at most a few tens of MiB of memory beyond the protected data
whatever their size. Files are therefore read with ``pread`` and exchanged one segment at a time
(:data:`SEGMENT` bytes), and received data are written and hashed as they arrive.

Why a file may be sent from memory (:class:`InMemory`): right after level 1 wrote a rank's
file without a codec, that file is byte for byte the protected buffers laid end to end, still
in memory. Sending those buffers (a segment inside one buffer goes to MPI as a view of it, no
copy) spares the read of the file just written — a copy out of the page cache, or a device
read where the pages were already dropped. The copy's receiver still checks it against the
digest the owner's write took, so memory that changed in between fails the checkpoint rather
than store a copy that differs from the file.

Why every rank takes part in every exchange, even with nothing to send: the exchanges are
blocking collectives or paired send/receives. A rank that skipped one after a local error (a
missing file, a full disk) would leave its peers waiting forever. So local errors are recorded
and the rank goes on sending empty segments; the caller learns of the error from the return
value and reports it collectively.
"""

from __future__ import annotations

import bisect
import contextlib
import ctypes
import errno
import itertools
import mmap
import os
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from greenckpt.ckpt.agree import PEER, first_cause, one_line
from greenckpt.ckpt.comm import Comm
from greenckpt.errors import InvalidValueError
from greenckpt.io.checksum import new_hasher
from greenckpt.io.writeback import Writeback

__all__ = [
    "PEER",
    "SEGMENT",
    "InMemory",
    "Received",
    "SegmentWriter",
    "aligned_buffer",
    "first_cause",
    "one_line",
    "read_into",
    "shift_file",
]

SEGMENT: Final = 4 * 1024 * 1024
"""Bytes per exchanged segment: large enough for full-speed transfers, small enough that a
rank holds only a few of them at once."""


def read_into(fd: int, offset: int, out: bytearray | memoryview, length: int) -> int:
    """Read up to ``length`` bytes at ``offset`` into the start of ``out`` (fewer only at the
    end of the file): how many. No new buffer per segment: a fresh multi-MiB ``bytes`` is a
    fresh mapping, and the kernel zeroes every page of it on first touch."""
    view = memoryview(out)
    done = 0
    while done < length:
        got = os.preadv(fd, [view[done:length]], offset + done)
        if not got:
            break
        done += got
    return done


DIRECT_ALIGN: Final = 4096
"""Alignment of ``O_DIRECT`` writes (address, offset and length): the largest logical block
size of common devices, so it suits 512-byte and 4K ones alike."""


def aligned_buffer(length: int) -> mmap.mmap:
    """A zeroed, writable, page-aligned buffer of ``length`` bytes (an anonymous mapping): what
    ``O_DIRECT`` can write from without a copy, and what MPI can receive into."""
    return mmap.mmap(-1, max(length, 1))


def _open_direct(path: Path) -> int:
    """``path`` opened again for ``O_DIRECT`` writes, or -1 where that is refused (tmpfs and
    some network or FUSE file systems: the writer then stays buffered)."""
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return -1
    try:
        return os.open(path, os.O_WRONLY | os.O_CLOEXEC | flag)
    except OSError:
        return -1


def _starts(view: memoryview, buffer: mmap.mmap) -> bool:
    """Whether ``view`` is a view of ``buffer`` from its first byte."""
    if view.obj is not buffer or view.readonly:
        return False
    start = ctypes.addressof(ctypes.c_char.from_buffer(view))
    return start == ctypes.addressof(ctypes.c_char.from_buffer(buffer))


def _free(buffers: list[mmap.mmap]) -> None:
    """Unmap ``buffers`` (one a failed write's traceback still views goes with that error)."""
    for old in buffers:
        with contextlib.suppress(BufferError):
            old.close()


def _pwrite_all(fd: int, view: memoryview, offset: int) -> None:
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done:], offset + done)


class SegmentWriter:
    """A file written segment by segment at explicit offsets, hashed when written in order.

    ``close`` fsyncs it: a rebuilt or copied file must be durable before anything refers to it.

    ``cached=False`` writes the aligned part of every segment with ``O_DIRECT``, past the page
    cache, from a background thread: for the files a checkpoint stores only in case of a
    failure (partner copies, parity), which nobody reads back unless a node is lost. Why: a
    buffered write copies every byte into freshly allocated page-cache pages and makes the
    kernel write them back later; on a node whose cores are busy that copy, not the device, is
    the cost — on the 2-CPU VM this was built on, 4 ranks storing 256 MiB partner copies spent
    0.5–2.4 CPU-s in buffered writes and 0.11–0.17 CPU-s with ``O_DIRECT`` — and cached copies
    push the application's pages out of memory. An ``O_DIRECT`` write returns only when the
    device has the data, so the segment is copied into one of two aligned buffers and written
    by the thread while the caller receives the next one (one write in flight, one being
    filled). A tail shorter than :data:`DIRECT_ALIGN`, an unaligned offset, and every write on
    a file system that refuses ``O_DIRECT`` (tmpfs, some network and FUSE ones) go through the
    page cache as before. An error of a background write is raised by the next call.
    """

    def __init__(self, path: Path, checksum: str, *, cached: bool = True) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        self._writeback = Writeback(self._fd)  # level 1's: the fsync at the end stays short
        self._direct = -1 if cached else _open_direct(path)
        self._buffers: list[mmap.mmap] = []
        self._turn = 0
        self._pool: ThreadPoolExecutor | None = None
        self._pending: Future[None] | None = None
        self._hasher = new_hasher(checksum)
        self._next = 0
        self._ordered = True
        self.size = 0

    @property
    def direct(self) -> bool:
        """Whether aligned writes go past the page cache (``O_DIRECT`` was granted)."""
        return self._direct >= 0

    def write_at(self, offset: int, data: bytes | bytearray | memoryview | mmap.mmap) -> None:
        """Write ``data`` at ``offset``; the digest covers the file only if writes were in
        order without gaps (:meth:`close` says)."""
        view = memoryview(data).cast("B")
        done = self._write_behind(offset, view) if self._direct >= 0 else 0
        if done < len(view):
            _pwrite_all(self._fd, view[done:], offset + done)
            self._writeback.wrote(offset + done, len(view) - done)
        if offset != self._next:
            self._ordered = False
        else:
            self._hasher.update(view)
        self._next = offset + len(view)
        self.size = max(self.size, offset + len(view))

    def buffer(self, length: int) -> mmap.mmap:
        """An aligned buffer of at least ``length`` bytes to fill with the next segment:
        handed back to :meth:`write_at` (as is, or a view of its start) it is written without
        a copy. Only until that call: the writer then gives the other of its two buffers."""
        if len(self._buffers) < 2 or len(self._buffers[0]) < length:
            self._wait()  # no write may be reading a buffer that is replaced
            _free(self._buffers)
            size = max(length, DIRECT_ALIGN)
            self._buffers = [aligned_buffer(size), aligned_buffer(size)]
        return self._buffers[self._turn]

    def _write_behind(self, offset: int, view: memoryview) -> int:
        """Hand the aligned head of ``view`` to the background ``O_DIRECT`` write: how many
        bytes (0 at an unaligned offset; the rest is the caller's to write buffered)."""
        n = len(view) - len(view) % DIRECT_ALIGN
        if offset % DIRECT_ALIGN or not n:
            return 0
        buffer = self.buffer(n)
        if not _starts(view, buffer):  # else the caller filled it: no copy
            buffer[:n] = view[:n]  # the other buffer may still be on its way to the device
        self._wait()
        if self._direct < 0:  # the last write found O_DIRECT refused: this one goes buffered
            return 0
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="greenckpt-direct")
        self._pending = self._pool.submit(self._write_direct, buffer, n, offset)
        self._turn ^= 1
        return n

    def _write_direct(self, buffer: mmap.mmap, n: int, offset: int) -> None:
        """The background write (the file system may still refuse the alignment: then these
        bytes, and every later write, go through the page cache)."""
        view = memoryview(buffer)[:n]
        try:
            _pwrite_all(self._direct, view, offset)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            _pwrite_all(self._fd, view, offset)
            self._close_direct()
        finally:
            view.release()

    def _wait(self) -> None:
        """Wait for the write in flight; raise its error."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def _close_direct(self) -> None:
        if self._direct >= 0:
            with contextlib.suppress(OSError):
                os.close(self._direct)
            self._direct = -1

    def _release(self) -> None:
        """Stop the background writer (waiting for a write in flight) and free its buffers."""
        try:
            self._wait()
        finally:
            if self._pool is not None:
                self._pool.shutdown()
                self._pool = None
            self._close_direct()
            _free(self._buffers)
            self._buffers = []

    def close(self) -> str | None:
        """fsync and close; the digest of the file when it was written in order, else None."""
        try:
            self._release()
            os.fsync(self._fd)  # the inode's data, whichever descriptor wrote them
        finally:
            os.close(self._fd)
        return self._hasher.hexdigest() if self._ordered else None

    def abandon(self) -> None:
        """Close and delete after an error."""
        with contextlib.suppress(OSError):
            self._release()
        with contextlib.suppress(OSError):
            os.close(self._fd)
        self.path.unlink(missing_ok=True)


@dataclass(frozen=True)
class Received:
    """What :func:`shift_file` received: bytes, their digest, and this rank's error if any.

    ``send_error`` is the part of ``error`` about what this rank *sent* (its own file could not
    be read): it concerns the receiving peer's data, not this rank's, and a caller that says
    whose data were lost needs the two apart."""

    nbytes: int
    digest: str | None
    error: str | None
    send_error: str | None = None


class InMemory:
    """A rank's file as it sits in memory: the buffers whose concatenation the file stores
    (level 1's file without a codec is exactly that), to send instead of reading the file."""

    def __init__(self, buffers: Sequence[memoryview]) -> None:
        self._views = [memoryview(b).cast("B") for b in buffers]
        self._starts = list(itertools.accumulate((len(v) for v in self._views), initial=0))
        self.size = self._starts[-1]

    def segment(self, offset: int, length: int, scratch: bytearray) -> memoryview:
        """The ``length`` bytes at ``offset`` (fewer at the end): a view of the buffer that
        holds them all, else copied into ``scratch`` (a segment across buffers)."""
        length = max(min(length, self.size - offset), 0)
        if not length:
            return memoryview(scratch)[:0]
        i = bisect.bisect_right(self._starts, offset) - 1
        at = offset - self._starts[i]
        if at + length <= len(self._views[i]):
            return self._views[i][at : at + length]
        return memoryview(scratch)[: self.read_into(offset, scratch, length)]

    def holder(self, offset: int, length: int) -> tuple[memoryview, int] | None:
        """The buffer that holds the ``length`` bytes at ``offset`` whole (fewer at the end),
        and where they start in it; None when they span buffers. For a bulk exchange that
        sends pieces from where they lie instead of packing them."""
        length = max(min(length, self.size - offset), 0)
        i = max(bisect.bisect_right(self._starts, offset) - 1, 0)
        at = offset - self._starts[i]
        if i >= len(self._views) or at + length > len(self._views[i]):
            return None
        return self._views[i], at

    def read_into(self, offset: int, out: bytearray | memoryview, length: int) -> int:
        """Copy up to ``length`` bytes at ``offset`` into the start of ``out`` (fewer only at
        the end): how many, as :func:`read_into` reads a file."""
        length = max(min(length, self.size - offset), 0)
        i = bisect.bisect_right(self._starts, offset) - 1
        at, target, done = offset - self._starts[i] if length else 0, memoryview(out), 0
        while done < length:
            view = self._views[i]
            n = min(len(view) - at, length - done)
            target[done : done + n] = view[at : at + n]
            done, i, at = done + n, i + 1, 0
        return done


class _FileOut:
    """A file to send, read segment by segment into the caller's buffer."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd, self.size = fd, size

    def segment(self, offset: int, length: int, scratch: bytearray) -> memoryview:
        n = read_into(self.fd, offset, scratch, max(min(length, self.size - offset), 0))
        return memoryview(scratch)[:n]


def _open_send(send: Path) -> tuple[int, int, str | None]:
    """The file to send opened for reading: (descriptor, size, None), or (-1, -1, why not)."""
    fd = -1
    try:
        fd = os.open(send, os.O_RDONLY | os.O_CLOEXEC)
        return fd, os.fstat(fd).st_size, None
    except OSError as exc:
        if fd >= 0:
            os.close(fd)
        return -1, -1, f"cannot read {send}: {one_line(exc)}"


def _received(
    writer: SegmentWriter | None,
    recv: Path | None,
    source: int,
    expected: int,
    send_error: str | None,
    recv_error: str | None,
) -> Received:
    """Keep what arrived if it is whole and nothing failed: what this rank received."""
    error = send_error or recv_error
    if writer is None:
        if recv is not None and error is None:
            error = PEER + f"rank {source} had no file to send"
        return Received(0, None, error, send_error)
    if error is not None:
        writer.abandon()
        return Received(0, None, error, send_error)
    try:
        digest = writer.close()
    except OSError as exc:
        writer.path.unlink(missing_ok=True)
        return Received(0, None, f"cannot write {recv}: {one_line(exc)}")
    if writer.size != expected:
        writer.path.unlink(missing_ok=True)
        return Received(
            writer.size,
            None,
            PEER + f"received {writer.size} of {expected} bytes from rank {source}",
        )
    return Received(writer.size, digest, None)


def shift_file(
    comm: Comm,
    send: Path | InMemory | None,
    dest: int,
    recv: Path | None,
    source: int,
    checksum: str,
    segment: int = SEGMENT,
    *,
    cached: bool = True,
) -> Received:
    """Send file ``send`` to rank ``dest`` while receiving rank ``source``'s file into ``recv``.

    Collective over ``comm``: every rank calls it, with ``dest``/``source`` forming a
    permutation (rank r sends to dest(r) and dest(r) receives from r). ``send=None`` sends
    nothing, an :class:`InMemory` sends the file from the buffers it stores; ``recv=None``
    discards what arrives. All ranks run the same number of rounds (the
    largest file decides), so nobody waits on a peer that finished early. ``cached=False``:
    the received file is written past the page cache (:class:`SegmentWriter`).
    """
    # send_error: this rank cannot read what it sends (its peer sees it); recv_error: this
    # rank cannot store what it receives
    fd, send_error = -1, None
    source_of: _FileOut | InMemory | None = send if isinstance(send, InMemory) else None
    if isinstance(send, Path):
        fd, size, send_error = _open_send(send)
        source_of = _FileOut(fd, size) if send_error is None else None
    size = -1 if source_of is None else source_of.size
    recv_error: str | None = None
    sizes = comm.allgather(size)
    expected = sizes[source]
    rounds = -(-max(*sizes, 0) // segment)
    writer: SegmentWriter | None = None
    if recv is not None and expected >= 0:
        try:
            writer = SegmentWriter(recv, checksum, cached=cached)
        except OSError as exc:
            recv_error = f"cannot create {recv}: {one_line(exc)}"
    # reused every round (from memory, only for a segment across buffers)
    outgoing = bytearray(segment)
    spare = bytearray(segment if writer is None else 0)  # what nobody stores lands here
    try:
        for i in range(rounds):
            chunk = memoryview(outgoing)[:0]
            if source_of is not None and send_error is None:  # a receive problem never stops
                try:  # the sending
                    chunk = source_of.segment(i * segment, segment, outgoing)
                except OSError as exc:
                    send_error = f"cannot read {send}: {one_line(exc)}"
            # received straight into the buffer the writer stores it from (no copy)
            incoming = writer.buffer(segment) if writer is not None else spare
            try:
                got = comm.sendrecv_into(chunk, dest, incoming, source)
            except InvalidValueError as exc:  # more than a segment: received, then refused
                got, recv_error = 0, recv_error or one_line(exc)
            if writer is not None and got and recv_error is None:
                try:
                    writer.write_at(i * segment, memoryview(incoming)[:got])
                except OSError as exc:
                    recv_error = f"cannot write {recv}: {one_line(exc)}"
    finally:
        if fd >= 0:
            os.close(fd)
    return _received(writer, recv, source, expected, send_error, recv_error)

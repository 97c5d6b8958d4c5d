"""What one I/O worker does: open its files, wait for the start signal, move its chunks, report.

Why it is its own module: a spawned worker imports only this (and :mod:`.sources`), so its
start-up is short and everything it needs is picklable. The same :func:`run_worker` runs
in-process for a single worker, so the measured code path is identical either way.

A worker's work is a tuple of :class:`Chunk` ``(path, offset, length, source)``: the benchmark
gives each worker one chunk of one file; the checkpoint library can give a worker any number of
chunks of any files (its own file, or its slice of a shared file).

Timing: everything that is not the I/O itself — opening files, allocating the aligned buffer,
generating the data pool, dropping the page cache before a read — happens *before* the start
barrier. The clock (``CLOCK_MONOTONIC``, the same in every process of the node) starts when
the barrier releases and stops after the last ``fsync``. Writes start the writeback of what
they wrote every ``flush_after`` bytes (:mod:`greenckpt.io.writeback`), so the copy into the
page cache and the transfer to storage overlap instead of following each other.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import signal
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from greenckpt.durable import fsync_directory
from greenckpt.errors import DeviceIOError, GreenckptError, InvalidValueError
from greenckpt.io.codec import FRAME_HEADER, BlockCodec, CodecError, CodecSpec
from greenckpt.io.preallocate import reserve
from greenckpt.io.sinks import DataSink
from greenckpt.io.sources import DataSource
from greenckpt.io.writeback import DEFAULT_FLUSH_AFTER, Writeback

if TYPE_CHECKING:
    from greenckpt.io.checksum import Hasher

__all__ = [
    "Chunk",
    "Fault",
    "Op",
    "ReadMethod",
    "WorkerReport",
    "WorkerTask",
    "aligned_buffer",
    "run_worker",
]

Op = Literal["write", "read"]
ReadMethod = Literal["o_direct", "fadvise_dontneed", "cached"]
"""How a read avoided the page cache: ``o_direct`` (bypassed it), ``fadvise_dontneed`` (the
file's clean pages were dropped before the start), ``cached`` (neither was possible: the
figure may be a memory-copy speed, not the storage's)."""

BARRIER_TIMEOUT_S = 300.0
"""How long a worker waits for the others to be ready before giving up."""

SINK_READ_BYTES = 256 * 1024
"""Largest request of a buffered read that lands straight in the caller's memory (a sink's
view). Why smaller than the block: such a read copies the page cache into memory that is not
in any cache, and the digest then reads those bytes again; a quarter-MiB piece (its source
pages and its destination) still sits in a 1 MiB L2 when the digest reads it, a 1 MiB block
does not. Measured on the 2-vCPU EPYC guest this was tuned on (4 ranks, 64 MiB each, from
storage, xxh3 digest): 1 MiB requests ran at 0.92x the speed of reading into a small reused
buffer (what fio does), 64-256 KiB requests at 0.96-0.98x. Reads into the worker's own buffer
(no sink, O_DIRECT, the profiler's cells) keep ``block_size`` requests."""


@dataclass(frozen=True)
class Chunk:
    """``length`` bytes at ``offset`` of ``path``; ``source`` supplies them for a write,
    ``sink`` (optional) receives them on a read (else they are only counted and checked)."""

    path: str
    offset: int
    length: int
    source: DataSource | None = None
    sink: DataSink | None = None


@dataclass(frozen=True)
class Fault:
    """Test hook: make worker ``rank`` raise after it has moved ``after_bytes`` bytes.

    Exists so the tests can check that a failing worker's job cleans up (files, processes)
    through the real multi-process path, not a mock of it.
    """

    rank: int = 0
    after_bytes: int = 0


@dataclass(frozen=True)
class WorkerTask:
    """Everything one worker needs; picklable (crosses into a spawned process)."""

    rank: int
    op: Op
    chunks: tuple[Chunk, ...]
    block_size: int
    fsync: bool
    read_method: ReadMethod
    alignment: int
    checksum: bool = False
    fault: Fault | None = None
    codec: CodecSpec | None = None
    """Compress each block into a frame (writes) or expand frames (reads); see
    :mod:`greenckpt.io.codec`. A compressed chunk's ``length`` is its *logical* length and
    its frames start at ``offset``."""
    digest: str | None = None
    """Checksum name (:mod:`greenckpt.io.checksum`) of the *stored* bytes of each chunk,
    computed as they pass: what a checkpoint manifest records and a restart checks."""
    flush_after: int = DEFAULT_FLUSH_AFTER
    """Writes: start writeback of every ``flush_after`` bytes as soon as they are written
    (:mod:`greenckpt.io.writeback`); 0 leaves it all to the kernel and the final fsync."""
    cpus: tuple[int, ...] | None = None
    """Pin the worker process to these CPUs before it prepares its chunks (the per-core
    split's writer cores, so the waiting cores may run slower); None: as inherited. A worker
    run in the calling process is never pinned: that process's affinity is its caller's."""


@dataclass(frozen=True)
class WorkerReport:
    """What a worker did: logical bytes moved, bytes stored on disk per chunk (fewer than the
    logical ones when compressed), monotonic start/end (ns), CRC-32 of each chunk's logical
    bytes if asked."""

    rank: int
    bytes: int
    start_ns: int
    end_ns: int
    checksums: tuple[int, ...] | None
    chunk_stored: tuple[int, ...] = ()
    digests: tuple[str, ...] | None = None
    """Hex digest of each chunk's stored bytes when the task named a ``digest``."""

    @property
    def stored_bytes(self) -> int:
        """Bytes written to or read from the files (the frames, when compressed)."""
        return sum(self.chunk_stored)


def aligned_buffer(size: int, alignment: int) -> tuple[mmap.mmap, memoryview]:
    """A writable buffer of ``size`` bytes whose address is a multiple of ``alignment``.

    O_DIRECT needs the memory address, the file offset and the length aligned to the device's
    logical block size. Anonymous ``mmap`` memory is page-aligned, which covers any logical
    block size up to the page size; a larger alignment over-allocates and slices.
    """
    page = mmap.PAGESIZE
    extra = 0 if alignment <= page else alignment
    region = mmap.mmap(-1, size + extra)
    if extra == 0:
        return region, memoryview(region)[:size]
    address = ctypes.addressof(ctypes.c_char.from_buffer(region))
    skip = (-address) % alignment
    return region, memoryview(region)[skip : skip + size]


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _open_files(task: WorkerTask) -> dict[str, int]:
    """Open each distinct file once, in the mode the op and read method need."""
    fds: dict[str, int] = {}
    try:
        for chunk in task.chunks:
            if chunk.path in fds:
                continue
            if task.op == "write":
                # The engine creates/truncates files before the workers start, so a worker
                # never truncates a file another worker is already writing (shared layout).
                flags = os.O_WRONLY
            else:
                flags = os.O_RDONLY | (os.O_DIRECT if task.read_method == "o_direct" else 0)
            fds[chunk.path] = os.open(chunk.path, flags | os.O_CLOEXEC)
    except BaseException:
        for fd in fds.values():
            os.close(fd)
        raise
    return fds


def _drop_cache(fd: int) -> None:
    """Make the file's cached pages clean (fsync) and ask the kernel to drop them."""
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


class InjectedFaultError(GreenckptError, RuntimeError):
    """The failure a test asked for (``Fault``): a worker stops as if its device failed."""


def _check_fault(task: WorkerTask, moved: int) -> None:
    fault = task.fault
    if fault is not None and fault.rank == task.rank and moved >= fault.after_bytes:
        raise InjectedFaultError(f"injected fault in worker {task.rank} after {moved} bytes")


def _write_chunk(
    task: WorkerTask, fd: int, chunk: Chunk, moved: int, hasher: Hasher | None
) -> int | None:
    source = chunk.source
    if source is None:
        raise InvalidValueError(f"write chunk of {chunk.path} at {chunk.offset} has no source")
    crc = 0
    pos = 0
    writeback = Writeback(fd, task.flush_after)
    while pos < chunk.length:
        _check_fault(task, moved + pos)
        want = min(task.block_size, chunk.length - pos)
        view = source.block(pos, want)
        # hashed before it is written: the kernel's copy then reads the block from the
        # CPU's cache instead of memory (after the write, the hash would read it again)
        if task.checksum:
            crc = zlib.crc32(view, crc)
        if hasher is not None:
            hasher.update(view)
        done = 0
        while done < want:
            done += os.pwrite(fd, view[done:], chunk.offset + pos + done)
        writeback.wrote(chunk.offset + pos, want)
        pos += want
    return crc if task.checksum else None


def _write_frames(
    task: WorkerTask,
    fd: int,
    chunk: Chunk,
    moved: int,
    codec: BlockCodec,
    hasher: Hasher | None,
) -> tuple[int | None, int]:
    """Compressed write: one frame per block, appended from ``chunk.offset``; returns the
    CRC of the logical bytes (if asked) and the stored length."""
    source = chunk.source
    if source is None:
        raise InvalidValueError(f"write chunk of {chunk.path} at {chunk.offset} has no source")
    crc = 0
    pos = 0
    stored = 0
    writeback = Writeback(fd, task.flush_after)
    while pos < chunk.length:
        _check_fault(task, moved + pos)
        want = min(task.block_size, chunk.length - pos)
        view = source.block(pos, want)
        header, payload = codec.encode(view)
        total = len(header) + len(payload)
        at = chunk.offset + stored
        done = os.pwritev(fd, [header, payload], at)
        if done < total:  # a short write: finish the frame from where it stopped
            rest = memoryview(header + bytes(payload))
            while done < total:
                done += os.pwrite(fd, rest[done:], at + done)
        writeback.wrote(at, total)
        if task.checksum:
            crc = zlib.crc32(view, crc)
        if hasher is not None:
            hasher.update(header)
            hasher.update(payload)
        pos += want
        stored += total
    return (crc if task.checksum else None), stored


class _FrameReader:
    """Reads a chunk's frames sequentially in ``block_size`` requests (aligned for O_DIRECT)
    and hands out whole frames; frames may straddle requests, so unconsumed bytes are kept."""

    def __init__(self, task: WorkerTask, fd: int, chunk: Chunk, buf: memoryview) -> None:
        self._fd = fd
        self._chunk = chunk
        self._buf = buf
        self._request = _round_up(task.block_size, task.alignment)
        self._file_pos = chunk.offset
        self.pending = bytearray()
        self.start = 0

    def fill(self, need: int) -> None:
        """Read until at least ``need`` unconsumed bytes are held."""
        while len(self.pending) - self.start < need:
            got = os.preadv(self._fd, [self._buf[: self._request]], self._file_pos)
            if got <= 0:
                raise DeviceIOError(
                    f"{self._chunk.path}: compressed stream ends at {self._file_pos}, "
                    "expected more frames"
                )
            if self.start > len(self._buf):  # drop consumed bytes now and then
                del self.pending[: self.start]
                self.start = 0
            self.pending += self._buf[:got]
            self._file_pos += got


def _read_frames(
    task: WorkerTask,
    fd: int,
    chunk: Chunk,
    buf: memoryview,
    moved: int,
    codec: BlockCodec,
    hasher: Hasher | None,
) -> tuple[int | None, int]:
    """Compressed read: expand frames until the chunk's logical length is reached; returns
    the CRC of the logical bytes (if asked) and the stored length consumed."""
    reader = _FrameReader(task, fd, chunk, buf)
    head = FRAME_HEADER.size
    crc = 0
    pos = 0
    stored = 0
    while pos < chunk.length:
        _check_fault(task, moved + pos)
        where = f"{chunk.path} offset {chunk.offset + stored}"
        reader.fill(head)
        s = reader.start
        stored_len, raw_len, raw = codec.decode_header(reader.pending[s : s + head], where)
        if raw_len == 0 or raw_len > chunk.length - pos or stored_len > raw_len:
            raise CodecError(
                f"corrupt compressed stream at {where}: frame of {raw_len} B "
                f"({stored_len} B stored) with {chunk.length - pos} B left to read"
            )
        reader.fill(head + stored_len)
        s = reader.start
        with memoryview(reader.pending) as whole, whole[s + head : s + head + stored_len] as pay:
            if hasher is not None:
                hasher.update(whole[s : s + head + stored_len])
            data = codec.decode_payload(pay, raw_len, raw, where)
            if task.checksum:
                crc = zlib.crc32(data, crc)
            if chunk.sink is not None:
                chunk.sink.put(pos, data)
                chunk.sink.filled(pos, data)
            if isinstance(data, memoryview):
                data.release()
        reader.start += head + stored_len
        pos += raw_len
        stored += head + stored_len
    return (crc if task.checksum else None), stored


def _read_chunk(
    task: WorkerTask, fd: int, chunk: Chunk, buf: memoryview, moved: int, hasher: Hasher | None
) -> int | None:
    direct = task.read_method == "o_direct"
    sink = chunk.sink
    crc = 0
    pos = 0
    # Smaller requests when the bytes land in the caller's memory (see SINK_READ_BYTES).
    step = (
        min(task.block_size, SINK_READ_BYTES)
        if sink is not None and not direct
        else task.block_size
    )
    while pos < chunk.length:
        _check_fault(task, moved + pos)
        want = min(step, chunk.length - pos)
        # Straight into the caller's memory when it is one contiguous piece (O_DIRECT needs
        # the aligned buffer instead).
        target = sink.view(pos, want) if sink is not None and not direct else None
        # O_DIRECT lengths must be whole logical blocks; the only short length is a chunk's
        # tail at end of file, where rounding up reads nothing beyond EOF.
        request = _round_up(want, task.alignment) if direct else want
        into = target if target is not None else buf[:request]
        got = os.preadv(fd, [into], chunk.offset + pos)
        if got <= 0:
            raise DeviceIOError(
                f"{chunk.path}: end of file at {chunk.offset + pos}, expected more data"
            )
        got = min(got, want)
        data = into[:got]
        if task.checksum:
            crc = zlib.crc32(data, crc)
        if hasher is not None:
            hasher.update(data)
        if sink is not None:
            if target is None:
                sink.put(pos, data)
            sink.filled(pos, data)
        pos += got
    return crc if task.checksum else None


def run_worker(task: WorkerTask, start: Callable[[], None] | None = None) -> WorkerReport:
    """Prepare, wait on ``start`` (the barrier), move the chunks, fsync; return the report.

    Files are closed whatever happens. For writes with ``fsync``, each file is fsynced and
    then each distinct directory, so a newly created file's directory entry is durable too.
    """
    fds = _open_files(task)
    region: mmap.mmap | None = None
    buf = memoryview(b"")
    codec = BlockCodec(task.codec) if task.codec is not None else None
    new_hasher = _hasher_factory(task.digest)
    try:
        if task.op == "write":
            _prepare_sources(task)
        else:
            for chunk in task.chunks:
                if chunk.sink is not None:
                    chunk.sink.prepare(chunk.length)
            size = _round_up(task.block_size, task.alignment)
            region, buf = aligned_buffer(size, task.alignment)
            if task.read_method == "fadvise_dontneed":
                for fd in fds.values():
                    _drop_cache(fd)
        if start is not None:
            start()
        start_ns = time.monotonic_ns()
        if task.op == "write" and codec is None:
            _reserve_extents(task, fds)
        moved, checksums, stored, digests = _move_chunks(task, fds, buf, codec, new_hasher)
        if task.op == "write" and task.fsync:
            _fsync_files(fds)
        end_ns = time.monotonic_ns()
    finally:
        for fd in fds.values():
            os.close(fd)
        buf.release()
        if region is not None:
            with contextlib.suppress(BufferError):  # a traceback may still hold a view
                region.close()
    return WorkerReport(
        rank=task.rank,
        bytes=moved,
        start_ns=start_ns,
        end_ns=end_ns,
        checksums=tuple(checksums) if task.checksum else None,
        chunk_stored=tuple(stored),
        digests=tuple(digests) if task.digest is not None else None,
    )


def _reserve_extents(task: WorkerTask, fds: dict[str, int]) -> None:
    """Reserve the blocks each file's chunks will fill (:func:`greenckpt.io.preallocate.reserve`):
    from the first chunk's offset to the last one's end, per file, as a hint."""
    spans: dict[str, tuple[int, int]] = {}
    for chunk in task.chunks:
        lo, hi = spans.get(chunk.path, (chunk.offset, chunk.offset))
        spans[chunk.path] = (min(lo, chunk.offset), max(hi, chunk.offset + chunk.length))
    for path, (lo, hi) in spans.items():
        reserve(fds[path], lo, hi - lo)


def _prepare_sources(task: WorkerTask) -> None:
    """Generate every write chunk's data before the start, so the clock times only I/O."""
    for chunk in task.chunks:
        if chunk.source is None:
            raise InvalidValueError(f"write chunk of {chunk.path} has no source")
        chunk.source.prepare(chunk.length, task.block_size)


def _move_chunks(
    task: WorkerTask,
    fds: dict[str, int],
    buf: memoryview,
    codec: BlockCodec | None,
    new_hasher: Callable[[], Hasher] | None,
) -> tuple[int, list[int], list[int], list[str]]:
    """Move every chunk in order: bytes moved, CRCs, stored bytes per chunk, digests."""
    moved = 0
    checksums: list[int] = []
    stored: list[int] = []
    digests: list[str] = []
    for chunk in task.chunks:
        fd = fds[chunk.path]
        hasher = new_hasher() if new_hasher is not None else None
        if codec is not None and task.op == "write":
            crc, kept = _write_frames(task, fd, chunk, moved, codec, hasher)
        elif codec is not None:
            crc, kept = _read_frames(task, fd, chunk, buf, moved, codec, hasher)
        elif task.op == "write":
            crc, kept = _write_chunk(task, fd, chunk, moved, hasher), chunk.length
        else:
            crc, kept = _read_chunk(task, fd, chunk, buf, moved, hasher), chunk.length
        moved += chunk.length
        stored.append(kept)
        if crc is not None:
            checksums.append(crc)
        if hasher is not None:
            digests.append(hasher.hexdigest())
    return moved, checksums, stored, digests


def _fsync_files(fds: dict[str, int]) -> None:
    """fsync every file, then each distinct directory (a new file's entry must be durable)."""
    for fd in fds.values():
        os.fsync(fd)
    for directory in dict.fromkeys(os.path.dirname(p) or "." for p in fds):
        fsync_directory(directory)


def _hasher_factory(name: str | None) -> Callable[[], Hasher] | None:
    """The digest's constructor, imported only when asked (a benchmark worker never is)."""
    if name is None:
        return None
    from greenckpt.io.checksum import new_hasher  # noqa: PLC0415 - see docstring

    return lambda: new_hasher(name)


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _die_with_parent(task: WorkerTask, parent: int | None) -> None:
    """Make this worker end, and remove what it was writing, when its parent dies.

    Why: a parent killed by SIGKILL (or by a SIGTERM sent to it alone) runs no cleanup; its
    workers would wait at the start barrier or on a full result pipe for minutes, holding
    their files open and keeping the caller's stdout/stderr pipes alive, so a
    ``$(greenckpt profile ...)`` would hang. Linux sends the worker SIGTERM when the parent
    goes (``PR_SET_PDEATHSIG``); the handler removes a write job's files (a partial write is
    worth nothing: its parent would have removed them too) and exits at once. Reads never
    remove anything. Without ``prctl`` (not Linux) this does nothing.
    """

    def on_term(signum: int, frame: object) -> None:
        if task.op == "write":
            for path in dict.fromkeys(chunk.path for chunk in task.chunks):
                with contextlib.suppress(OSError):
                    os.unlink(path)
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return
    prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    if parent is not None and os.getppid() != parent:  # it died before prctl took effect
        on_term(signal.SIGTERM, None)


def worker_entry(
    task: WorkerTask, barrier: threading.Barrier, results: Any, parent: int | None = None
) -> None:
    """Entry point of a worker process: run, and put ``(kind, rank, payload)`` on ``results``.

    SIGINT is ignored so that Ctrl-C reaches only the parent, which then terminates the
    workers and removes the files in one place. SIGTERM — from the parent stopping a failed
    job, from a batch system signalling the whole process group, or from the kernel when the
    parent process (pid ``parent``, when given) dies — ends the worker at once, removing a
    write job's files (see :func:`_die_with_parent`). A failure before the start breaks the
    barrier so the others stop waiting; ``kind`` is ``"ok"``, ``"error"`` (one-line message)
    or ``"aborted"`` (stopped because another worker failed).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent(task, parent)

    def start() -> None:
        barrier.wait(BARRIER_TIMEOUT_S)

    try:
        if task.cpus:
            os.sched_setaffinity(0, task.cpus)
        report = run_worker(task, start)
    except threading.BrokenBarrierError:
        results.put(("aborted", task.rank, "start barrier broken"))
    except BaseException as exc:  # report everything; the parent decides
        barrier.abort()
        # The class's own name, not traceback's module-qualified one for library classes.
        last = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        results.put(("error", task.rank, last))
    else:
        results.put(("ok", task.rank, report))

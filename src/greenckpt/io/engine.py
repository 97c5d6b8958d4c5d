"""The parallel read/write job: S bytes split among n processes, timed from a common start.

Why it looks like this (saito2013, section 4): the micro benchmark behind every profile point
divides one amount of data (2 GB) among n processes, each reading or writing its part
sequentially. The checkpoint library later writes real state through the same workers
(:func:`run_chunks`), so a profile measured here predicts what a checkpoint will do.

What makes a figure honest:

- Real processes (``spawn``/``forkserver``): checkpoints are written by several processes, and
  threads would share one GIL and one file table. n = 1 may run in the calling process — the
  same :func:`~greenckpt.io.worker.run_worker`, without process start-up.
- A start barrier: workers open files, allocate buffers and generate data first; the clock
  starts when all of them are released together. Aggregate throughput is
  ``S / (max end − common start)`` with the common start the earliest release.
- Durability: a write ends with ``fsync`` of every file and of its directory (new entries),
  inside the measured time. Writeback starts every 8 MiB as the data are written
  (``sync_file_range``, :mod:`greenckpt.io.writeback`), so the final fsync waits for the tail
  rather than the whole file; ``flush_after=0`` turns that off.
- Reads bypass the page cache: ``O_DIRECT`` with an aligned buffer where the filesystem takes
  it, else the files' clean pages are dropped with ``posix_fadvise(DONTNEED)`` after an
  ``fsync`` (no root needed), else the result says ``cached``. RAM filesystems (tmpfs) are
  always ``cached``: there is nothing behind the cache to measure.

Splitting (:func:`split_sizes`): S is split as evenly as possible in whole blocks; every chunk
is a multiple of the block size except the last, which also takes ``S mod block_size``. So S
must be at least ``n × block_size`` (no worker without a block).

Files: ``<name>.<rank>`` per worker (file per process) or one ``<name>.shared`` written at
offsets with ``pwrite``/``pread`` (shared file). A write job removes its files afterwards unless
``keep=True``, and always when it fails or is interrupted; a read job reads files a kept write
left (same name, layout and — for file per process — worker count) and never removes them.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, get_args

from greenckpt.errors import GreenckptError, InvalidValueError
from greenckpt.io.codec import CodecSpec, parse_codec
from greenckpt.io.sources import DATA_KINDS, DataKind, DataSource, make_source
from greenckpt.io.worker import (
    BARRIER_TIMEOUT_S,
    Chunk,
    Fault,
    Op,
    ReadMethod,
    WorkerReport,
    WorkerTask,
    aligned_buffer,
    run_worker,
    worker_entry,
)
from greenckpt.io.writeback import DEFAULT_FLUSH_AFTER
from greenckpt.platform.root import PlatformError
from greenckpt.platform.storage import identify_storage

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_TOTAL_BYTES",
    "IOJobError",
    "IOResult",
    "Layout",
    "ProcessResult",
    "ReadMethodRequest",
    "StartMethod",
    "job_files",
    "remove_files",
    "run_chunks",
    "run_io",
    "split_sizes",
]

MiB = 1024 * 1024
GiB = 1024 * MiB
DEFAULT_TOTAL_BYTES = 2 * GiB
"""saito2013's micro benchmark size."""
DEFAULT_BLOCK_SIZE = MiB
"""One request of each worker: large enough for sequential throughput, like fio ``--bs=1M``."""
DEFAULT_ALIGNMENT = 4096
"""O_DIRECT alignment when the device's logical block size is unknown (safe for 512 and 4K)."""
SPACE_MARGIN_BYTES = 64 * MiB
SPACE_MARGIN_FRACTION = 0.05
"""A write needs S plus max(64 MiB, 5 % of S) free: metadata, and not filling the disk."""
DEAD_WORKER_GRACE_S = 1.0

Layout = Literal["file_per_process", "shared_file"]
ReadMethodRequest = Literal["auto", "o_direct", "fadvise_dontneed", "cached"]
StartMethod = Literal["spawn", "forkserver"]


class IOJobError(GreenckptError, RuntimeError):
    """A worker failed or died; the job was stopped and its files removed."""


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


# --------------------------------------------------------------------------- planning


def split_sizes(total_bytes: int, workers: int, block_size: int) -> list[int]:
    """Chunk sizes: whole blocks spread evenly, the remainder of S on the last chunk.

    Raises ``ValueError`` unless ``workers ≥ 1``, ``block_size ≥ 1`` and
    ``total_bytes ≥ workers × block_size``.
    """
    if workers < 1:
        raise InvalidValueError(f"workers must be ≥ 1, got {workers}")
    if block_size < 1:
        raise InvalidValueError(f"block size must be ≥ 1 byte, got {block_size}")
    if total_bytes < workers * block_size:
        raise InvalidValueError(
            f"total size {total_bytes} B is less than {workers} workers × block size "
            f"{block_size} B; give at least {workers * block_size} B or fewer workers"
        )
    blocks, tail = divmod(total_bytes, block_size)
    base, extra = divmod(blocks, workers)
    sizes = [(base + (1 if i < extra else 0)) * block_size for i in range(workers)]
    sizes[-1] += tail
    return sizes


def job_files(
    path: str | os.PathLike[str], name: str, layout: Layout, workers: int
) -> tuple[str, ...]:
    """The files a job of this shape uses (see the module docstring for the names)."""
    directory = os.fspath(path)
    if layout == "shared_file":
        return (os.path.join(directory, f"{name}.shared"),)
    return tuple(os.path.join(directory, f"{name}.{rank:04d}") for rank in range(workers))


def remove_files(files: Iterable[str]) -> None:
    """Remove files, ignoring those already gone (e.g. a kept write's files after the read)."""
    for file in files:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(file)


def _plan(
    op: Op, files: Sequence[str], layout: Layout, sizes: Sequence[int], seed: int, data: DataKind
) -> list[tuple[Chunk, ...]]:
    chunks: list[tuple[Chunk, ...]] = []
    offset = 0
    for rank, size in enumerate(sizes):
        source: DataSource | None = make_source(data, seed, rank) if op == "write" else None
        if layout == "shared_file":
            chunks.append((Chunk(files[0], offset, size, source),))
        else:
            chunks.append((Chunk(files[rank], 0, size, source),))
        offset += size
    return chunks


# --------------------------------------------------------------------------- checks


def _check_directory(directory: str, op: Op) -> None:
    if not os.path.isdir(directory):
        what = "does not exist" if not os.path.lexists(directory) else "is not a directory"
        raise InvalidValueError(
            f"{directory} {what}: give an existing directory for the job's files"
        )
    mode = os.W_OK | os.X_OK if op == "write" else os.R_OK | os.X_OK
    if not os.access(directory, mode):
        need = "writable" if op == "write" else "readable"
        raise InvalidValueError(f"{directory} is not {need}: give a {need} directory")


def _check_space(directory: str, total_bytes: int) -> None:
    st = os.statvfs(directory)
    free = st.f_bavail * st.f_frsize
    need = total_bytes + max(SPACE_MARGIN_BYTES, int(total_bytes * SPACE_MARGIN_FRACTION))
    if free < need:
        raise InvalidValueError(
            f"{directory} has {free} B free; writing {total_bytes} B needs {need} B "
            f"(with margin): free space or choose a smaller size"
        )


def _probe_o_direct(file: str, alignment: int) -> bool:
    """Whether ``file`` can be opened *and read* with O_DIRECT (some filesystems accept the
    flag at open and refuse the read)."""
    try:
        fd = os.open(file, os.O_RDONLY | os.O_DIRECT | os.O_CLOEXEC)
    except OSError:
        return False
    region, buf = aligned_buffer(alignment, alignment)
    try:
        os.preadv(fd, [buf], 0)
    except OSError:
        return False
    finally:
        os.close(fd)
        buf.release()
        region.close()
    return True


def _choose_read_method(
    requested: ReadMethodRequest,
    files: Sequence[str],
    block_size: int,
    alignment: int,
    memory_backed: bool,
    notes: list[str],
) -> ReadMethod:
    if requested == "o_direct":
        if block_size % alignment:
            raise InvalidValueError(
                f"O_DIRECT needs a block size that is a multiple of the logical block size "
                f"{alignment} B; {block_size} B is not "
                f"(e.g. {max(1, block_size // alignment) * alignment})"
            )
        if not _probe_o_direct(files[0], alignment):
            raise PlatformError(f"{files[0]}: the filesystem refuses O_DIRECT reads")
        return "o_direct"
    if requested != "auto":
        return requested
    if memory_backed:
        notes.append("RAM-backed filesystem: reads come from memory whatever the method")
        return "cached"
    if block_size % alignment == 0 and _probe_o_direct(files[0], alignment):
        return "o_direct"
    notes.append("O_DIRECT not usable here (filesystem or block size); dropping the page cache")
    try:
        fd = os.open(files[0], os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    except (OSError, AttributeError):
        notes.append("posix_fadvise(DONTNEED) failed too: the read may be served from cache")
        return "cached"
    return "fadvise_dontneed"


# --------------------------------------------------------------------------- execution


ABORT_WAIT_S = 1.0
"""How long a failed job waits for its start barrier to break before stopping the workers."""


def _stop(procs: Sequence[multiprocessing.process.BaseProcess]) -> None:
    """Terminate workers still running, then kill any that ignore SIGTERM; reap all."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(2.0)
        if p.is_alive():
            p.kill()
            p.join()


class _StartWatcher:
    """Joins the workers' start barrier from the parent and calls ``on_start`` on release.

    Why a thread: the parent's main loop must keep watching for dead workers while the others
    wait; the extra barrier party lets the caller act (take a power reading) at the very
    moment the workers start moving data rather than when the processes were spawned.
    """

    def __init__(self, barrier: Any, on_start: Callable[[], None]) -> None:
        self.error: BaseException | None = None
        self._barrier = barrier
        self._on_start = on_start
        self._thread = threading.Thread(target=self._run, name="greenckpt-io-start", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._barrier.wait(BARRIER_TIMEOUT_S)
        except threading.BrokenBarrierError:
            return
        try:
            self._on_start()
        except BaseException as exc:  # handed to the caller's thread
            self.error = exc

    def join(self) -> None:
        self._thread.join(BARRIER_TIMEOUT_S)
        if self.error is not None:
            raise self.error


def _run_processes(
    tasks: Sequence[WorkerTask],
    start_method: StartMethod,
    on_start: Callable[[], None] | None = None,
) -> list[WorkerReport]:
    ctx = (
        multiprocessing.get_context("spawn")
        if start_method == "spawn"
        else multiprocessing.get_context("forkserver")
    )
    barrier = ctx.Barrier(len(tasks) + (on_start is not None))
    results = ctx.Queue()
    # A spawned worker's parent is this process; a forkserver's is the server, which ends
    # when this process does (the worker then ends too, see worker_entry).
    parent = os.getpid() if start_method == "spawn" else None
    procs = [
        ctx.Process(
            target=worker_entry,
            args=(task, barrier, results, parent),
            name=f"greenckpt-io-{task.rank}",
            daemon=True,
        )
        for task in tasks
    ]
    reports: dict[int, WorkerReport] = {}
    aborted: set[int] = set()
    finished = False
    watcher: _StartWatcher | None = None
    try:
        for p in procs:
            p.start()
        if on_start is not None:
            watcher = _StartWatcher(barrier, on_start)
        while len(reports) + len(aborted) < len(tasks):
            try:
                kind, rank, payload = results.get(timeout=0.1)
            except queue.Empty:
                for dead, p in enumerate(procs):
                    if p.exitcode is not None and dead not in reports and dead not in aborted:
                        # It may have put its message just before exiting: one last look.
                        try:
                            kind, rank, payload = results.get(timeout=DEAD_WORKER_GRACE_S)
                        except queue.Empty:
                            raise IOJobError(
                                f"worker {dead} exited with code {p.exitcode} without a result"
                            ) from None
                        break
                else:
                    continue
            if kind == "error":
                raise IOJobError(f"worker {rank} failed: {payload}")
            if kind == "aborted":
                aborted.add(rank)
            else:
                reports[rank] = payload
        if aborted:
            raise IOJobError(f"workers {sorted(aborted)} stopped without a failure report")
        for p in procs:
            p.join()
        if watcher is not None:
            watcher.join()
        finished = True
    finally:
        if not finished:
            _abort_barrier(barrier)
            _stop(procs)
        results.close()
        results.join_thread()
    return [reports[task.rank] for task in tasks]


def _abort_barrier(barrier: Any) -> None:
    """Break the start barrier so that every party still waiting at it returns.

    Why on a thread given a moment: multiprocessing's barrier wakes its waiters through a
    condition whose ``notify`` waits until each sleeper acknowledges; a worker that died while
    waiting (a batch system's SIGTERM reaches the whole process group) never does, and the
    abort would block the job — and the cleanup after it — forever. The workers are stopped
    next in any case (:func:`_stop`); a watcher thread left waiting ends at its own timeout.
    """
    aborting = threading.Thread(target=barrier.abort, name="greenckpt-io-abort", daemon=True)
    aborting.start()
    aborting.join(ABORT_WAIT_S)


def run_chunks(
    op: Op,
    assignments: Sequence[Sequence[Chunk]],
    *,
    block_size: int = DEFAULT_BLOCK_SIZE,
    fsync: bool = True,
    read_method: ReadMethod = "cached",
    alignment: int = DEFAULT_ALIGNMENT,
    checksum: bool = False,
    start_method: StartMethod = "spawn",
    in_process: bool = True,
    fault: Fault | None = None,
    on_start: Callable[[], None] | None = None,
    codec: CodecSpec | None = None,
    digest: str | None = None,
    flush_after: int = DEFAULT_FLUSH_AFTER,
) -> list[WorkerReport]:
    """Run one worker per entry of ``assignments`` (its chunks) from a common start.

    The executor under :func:`run_io`, for callers that own their files (the checkpoint
    library): it creates, validates and removes nothing, and ``read_method`` is taken as
    given (files for ``o_direct`` must allow it). Files to write must exist. A single worker
    runs in the calling process when ``in_process``; otherwise each worker is a process and
    its chunks' sources must be picklable. On any failure the workers are terminated and
    :class:`IOJobError` is raised. ``on_start`` is called in the calling process when the
    workers are released to move data (after files are open and sources prepared), e.g. to
    take a power reading at the start of the I/O window. With ``codec`` every block becomes a
    compressed frame (:mod:`greenckpt.io.codec`): chunk lengths stay logical, frames start at
    each chunk's offset, and the reports give the stored bytes per chunk (a compressed chunk
    must not share a file region with another, since its stored size is known only after).
    ``digest`` (a :mod:`greenckpt.io.checksum` name) makes each report carry the digest of
    every chunk's stored bytes, computed as they pass. ``flush_after`` (writes): start
    writeback of every so many bytes as they are written (:mod:`greenckpt.io.writeback`;
    0: off).
    """
    if not assignments:
        raise InvalidValueError("no workers: give at least one worker's chunks")
    tasks = [
        WorkerTask(
            rank=rank,
            op=op,
            chunks=tuple(chunks),
            block_size=block_size,
            fsync=fsync,
            read_method=read_method,
            alignment=alignment,
            checksum=checksum,
            fault=fault,
            codec=codec,
            digest=digest,
            flush_after=flush_after,
        )
        for rank, chunks in enumerate(assignments)
    ]
    if len(tasks) == 1 and in_process:
        try:
            return [run_worker(tasks[0], on_start)]
        except (OSError, RuntimeError, ValueError) as exc:
            raise IOJobError(f"worker 0 failed: {type(exc).__name__}: {exc}") from exc
    return _run_processes(tasks, start_method, on_start)


def run_io(
    op: Op,
    path: str | os.PathLike[str],
    *,
    total_bytes: int = DEFAULT_TOTAL_BYTES,
    workers: int = 1,
    block_size: int = DEFAULT_BLOCK_SIZE,
    layout: Layout = "file_per_process",
    fsync: bool = True,
    read_method: ReadMethodRequest = "auto",
    name: str = "greenckpt-io",
    keep: bool = False,
    seed: int = 0,
    checksum: bool = False,
    start_method: StartMethod = "spawn",
    in_process: bool = True,
    fault: Fault | None = None,
    on_start: Callable[[], None] | None = None,
    codec: str | CodecSpec | None = None,
    data: DataKind = "random",
) -> IOResult:
    """Write or read ``total_bytes`` in directory ``path`` with ``workers`` processes.

    Everything is checked before anything starts; bad input raises a one-line ``ValueError``
    (or :class:`~greenckpt.platform.root.PlatformError` when the filesystem cannot do what was
    explicitly asked). Writes send generated data from ``seed``: ``data="random"``
    (incompressible) or ``"field"`` (a simulation's float64 state, see
    :class:`~greenckpt.io.sources.FieldSource`). ``codec`` (``"zstd:3"``, ``"lz4"``…)
    compresses each block; throughput then counts logical bytes and ``stored_bytes`` what
    reached the disk. A compressed read must name the codec the files were written with.
    ``fault`` is a test hook (see :class:`~greenckpt.io.worker.Fault`); ``on_start`` is as in
    :func:`run_chunks`.
    """
    if op not in get_args(Op):
        raise InvalidValueError(f"op must be 'write' or 'read', got {op!r}")
    if layout not in get_args(Layout):
        raise InvalidValueError(f"layout must be one of {get_args(Layout)}, got {layout!r}")
    if read_method not in get_args(ReadMethodRequest):
        raise InvalidValueError(f"read_method must be one of {get_args(ReadMethodRequest)}")
    if start_method not in get_args(StartMethod):
        raise InvalidValueError(
            f"start_method must be 'spawn' or 'forkserver', got {start_method!r}"
        )
    if not name or "/" in name:
        raise InvalidValueError(f"name must be a plain file-name prefix, got {name!r}")
    if data not in DATA_KINDS:
        raise InvalidValueError(f"data must be one of {', '.join(DATA_KINDS)}, got {data!r}")
    spec = parse_codec(codec)
    if spec is not None and layout == "shared_file":
        raise InvalidValueError(
            "a codec needs layout file_per_process: compressed sizes are known only after "
            "writing, so workers cannot share one file at fixed offsets"
        )
    sizes = split_sizes(total_bytes, workers, block_size)
    directory = os.path.abspath(os.fspath(path))
    _check_directory(directory, op)

    notes: list[str] = []
    storage_key: str | None = None
    lbs: int | None = None
    memory_backed = False
    try:
        info = identify_storage(directory)
        storage_key, lbs, memory_backed = info.key, info.logical_block_size, info.kind == "memory"
    except PlatformError as exc:
        notes.append(f"storage not identified: {exc}")
    alignment = lbs or DEFAULT_ALIGNMENT

    files = job_files(directory, name, layout, workers)
    method: ReadMethod | None = None
    if op == "read":
        needs = (
            list(zip(files, sizes, strict=True))
            if layout == "file_per_process"
            else [(files[0], total_bytes)]
        )
        for file, end in needs:
            have = os.path.getsize(file) if os.path.isfile(file) else None
            if spec is not None and have:
                continue  # frames: the stored size is smaller than the logical one
            if have is None or have < end:
                raise InvalidValueError(
                    f"{file} {'is missing' if have is None else f'holds {have} B'}; reading "
                    f"needs {end} B: run the same write with keep=True first"
                )
        method = _choose_read_method(
            read_method, files, block_size, alignment, memory_backed, notes
        )
    else:
        if read_method == "o_direct" and block_size % alignment:
            raise InvalidValueError(
                f"O_DIRECT needs a block size that is a multiple of the logical block size "
                f"{alignment} B; {block_size} B is not"
            )
        _check_space(directory, total_bytes)

    assignments = _plan(op, files, layout, sizes, seed, data)
    single = workers == 1 and in_process
    created = False
    succeeded = False
    try:
        if op == "write":
            created = True
            for file in files:
                os.close(os.open(file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644))
        reports = run_chunks(
            op,
            assignments,
            block_size=block_size,
            fsync=fsync,
            read_method=method or "cached",
            alignment=alignment,
            checksum=checksum,
            start_method=start_method,
            in_process=in_process,
            fault=fault,
            on_start=on_start,
            codec=spec,
        )
        succeeded = True
    finally:
        if created and (not succeeded or not keep):
            remove_files(files)

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
    return IOResult(
        op=op,
        layout=layout,
        workers=workers,
        total_bytes=sum(r.bytes for r in reports),
        block_size=block_size,
        fsync=fsync,
        read_method=method,
        path=directory,
        files=files,
        kept=op == "read" or keep,
        storage_key=storage_key,
        in_process=single,
        start_method=None if single else start_method,
        wall_s=wall,
        start_monotonic_s=start / 1e9,
        end_monotonic_s=end / 1e9,
        throughput=sum(r.bytes for r in reports) / wall,
        processes=processes,
        notes=tuple(notes),
        codec=spec.label if spec is not None else None,
        stored_bytes=sum(r.stored_bytes for r in reports),
        data=data,
    )

"""The parallel read/write job: S bytes split among n processes, timed from a common start.

Why it looks like this (saito2013, section 4): the micro benchmark behind every profile point
divides one amount of data (2 GB) among n processes, each reading or writing its part
sequentially. The checkpoint library later writes real state through the same workers
(:func:`run_chunks`), so a profile measured here predicts what a checkpoint will do.

The jobs are split: the plan and every check before a job starts (:mod:`greenckpt.io.jobplan`),
the worker processes and their start barrier (:mod:`greenckpt.io.pool`), the figures a job
reports (:mod:`greenckpt.io.results`); this module runs a whole job. What makes the figures
honest (real processes, a start barrier, fsync inside the time, reads past the page cache)
and how S is split and files are named: docs/design/measurement.md ("The I/O engine").
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from greenckpt.errors import InvalidValueError
from greenckpt.io.codec import CodecSpec
from greenckpt.io.jobplan import (
    DEFAULT_ALIGNMENT,
    DEFAULT_BLOCK_SIZE,
    DEFAULT_TOTAL_BYTES,
    SPACE_MARGIN_BYTES,
    SPACE_MARGIN_FRACTION,
    GiB,
    Layout,
    MiB,
    ReadMethodRequest,
    StartMethod,
    check_directory,
    check_read_files,
    check_request,
    check_space,
    choose_read_method,
    job_files,
    plan_chunks,
    remove_files,
    split_sizes,
)
from greenckpt.io.pool import ABORT_WAIT_S, DEAD_WORKER_GRACE_S, IOJobError, run_chunks
from greenckpt.io.results import IOResult, ProcessResult, process_results
from greenckpt.io.sources import DataKind
from greenckpt.io.worker import Chunk, Fault, Op, ReadMethod, WorkerReport
from greenckpt.platform.root import PlatformError
from greenckpt.platform.storage import identify_storage

# run_io is this module's own; the other names moved to jobplan, pool and results and stay
# importable from here.
__all__ = [
    "ABORT_WAIT_S",
    "DEAD_WORKER_GRACE_S",
    "DEFAULT_ALIGNMENT",
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_TOTAL_BYTES",
    "SPACE_MARGIN_BYTES",
    "SPACE_MARGIN_FRACTION",
    "GiB",
    "IOJobError",
    "IOResult",
    "Layout",
    "MiB",
    "ProcessResult",
    "ReadMethodRequest",
    "StartMethod",
    "job_files",
    "remove_files",
    "run_chunks",
    "run_io",
    "split_sizes",
]


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
    cpus: Sequence[int] | None = None,
) -> IOResult:
    """Write or read ``total_bytes`` in directory ``path`` with ``workers`` processes.

    Everything is checked before anything starts; bad input raises a one-line ``ValueError``
    (or :class:`~greenckpt.platform.root.PlatformError` when the filesystem cannot do what was
    explicitly asked). Writes send generated data from ``seed``: ``data="random"``
    (incompressible) or ``"field"`` (a simulation's float64 state, see
    :class:`~greenckpt.io.sources.FieldSource`). ``codec`` (``"zstd:3"``, ``"lz4"``…)
    compresses each block; throughput then counts logical bytes and ``stored_bytes`` what
    reached the disk. A compressed read must name the codec the files were written with.
    ``fault`` is a test hook (see :class:`~greenckpt.io.worker.Fault`); ``on_start`` and
    ``cpus`` (the CPUs the worker processes are pinned to: the per-core split's writer cores)
    are as in :func:`run_chunks`.
    """
    spec = check_request(op, layout, read_method, start_method, name, data, codec)
    sizes = split_sizes(total_bytes, workers, block_size)
    directory = os.path.abspath(os.fspath(path))
    check_directory(directory, op)

    notes: list[str] = []
    storage_key, alignment, memory_backed = _identify(directory, notes)
    files = job_files(directory, name, layout, workers)
    method: ReadMethod | None = None
    if op == "read":
        check_read_files(files, sizes, layout, total_bytes, spec)
        method = choose_read_method(read_method, files, block_size, alignment, memory_backed, notes)
    else:
        _check_write(directory, total_bytes, read_method, block_size, alignment)

    reports = _execute(
        op,
        files,
        plan_chunks(op, files, layout, sizes, seed, data),
        keep=keep,
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
        cpus=cpus,
    )
    processes, start, end, wall = process_results(reports)
    single = workers == 1 and in_process
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


def _identify(directory: str, notes: list[str]) -> tuple[str | None, int, bool]:
    """The storage key, O_DIRECT alignment and RAM-backedness of the job's directory.

    A storage that cannot be identified is noted, not fatal: the job still runs, with the
    default alignment and no key.
    """
    try:
        info = identify_storage(directory)
    except PlatformError as exc:
        notes.append(f"storage not identified: {exc}")
        return None, DEFAULT_ALIGNMENT, False
    return info.key, info.logical_block_size or DEFAULT_ALIGNMENT, info.kind == "memory"


def _check_write(
    directory: str,
    total_bytes: int,
    read_method: ReadMethodRequest,
    block_size: int,
    alignment: int,
) -> None:
    """Refuse a write that asks for O_DIRECT with misaligned blocks, or lacks the space."""
    if read_method == "o_direct" and block_size % alignment:
        raise InvalidValueError(
            f"O_DIRECT needs a block size that is a multiple of the logical block size "
            f"{alignment} B; {block_size} B is not"
        )
    check_space(directory, total_bytes)


def _execute(
    op: Op,
    files: tuple[str, ...],
    assignments: list[tuple[Chunk, ...]],
    *,
    keep: bool,
    block_size: int,
    fsync: bool,
    read_method: ReadMethod,
    alignment: int,
    checksum: bool,
    start_method: StartMethod,
    in_process: bool,
    fault: Fault | None,
    on_start: Callable[[], None] | None,
    codec: CodecSpec | None,
    cpus: Sequence[int] | None = None,
) -> list[WorkerReport]:
    """Create a write's files, run the workers, and remove the files unless a write is kept.

    A failed or interrupted write always removes its files; a read never touches them.
    """
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
            read_method=read_method,
            alignment=alignment,
            checksum=checksum,
            start_method=start_method,
            in_process=in_process,
            fault=fault,
            on_start=on_start,
            codec=codec,
            cpus=cpus,
        )
        succeeded = True
    finally:
        if created and (not succeeded or not keep):
            remove_files(files)
    return reports

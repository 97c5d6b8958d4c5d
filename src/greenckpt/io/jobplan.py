"""The job's plan and checks: chunk sizes, file names, and what must hold before it starts.

Why its own module: everything a job can refuse is refused here, before a file is created or a
process started, so a bad request costs nothing and says in one line what to change; and the
split of S among n workers (saito2013 section 4) is one pure function the tests pin down.
Design notes: docs/design/measurement.md ("The I/O engine").
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Sequence
from typing import Literal, get_args

from greenckpt.errors import InvalidValueError
from greenckpt.io.codec import CodecSpec, parse_codec
from greenckpt.io.sources import DATA_KINDS, DataKind, DataSource, make_source
from greenckpt.io.worker import Chunk, Op, ReadMethod, aligned_buffer
from greenckpt.platform.root import PlatformError

__all__ = [
    "DEFAULT_ALIGNMENT",
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_TOTAL_BYTES",
    "Layout",
    "ReadMethodRequest",
    "StartMethod",
    "check_directory",
    "check_read_files",
    "check_request",
    "check_space",
    "choose_read_method",
    "job_files",
    "plan_chunks",
    "remove_files",
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

Layout = Literal["file_per_process", "shared_file"]
ReadMethodRequest = Literal["auto", "o_direct", "fadvise_dontneed", "cached"]
StartMethod = Literal["spawn", "forkserver"]


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
    """The files a job of this shape uses: ``<name>.<rank>`` per worker, or ``<name>.shared``."""
    directory = os.fspath(path)
    if layout == "shared_file":
        return (os.path.join(directory, f"{name}.shared"),)
    return tuple(os.path.join(directory, f"{name}.{rank:04d}") for rank in range(workers))


def remove_files(files: Iterable[str]) -> None:
    """Remove files, ignoring those already gone (e.g. a kept write's files after the read)."""
    for file in files:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(file)


def plan_chunks(
    op: Op, files: Sequence[str], layout: Layout, sizes: Sequence[int], seed: int, data: DataKind
) -> list[tuple[Chunk, ...]]:
    """One tuple of chunks per worker: its own file, or its region of the shared file."""
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


def check_request(
    op: Op,
    layout: Layout,
    read_method: ReadMethodRequest,
    start_method: StartMethod,
    name: str,
    data: DataKind,
    codec: str | CodecSpec | None,
) -> CodecSpec | None:
    """Refuse a malformed job request in one line; return the parsed codec."""
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
    return spec


def check_read_files(
    files: Sequence[str],
    sizes: Sequence[int],
    layout: Layout,
    total_bytes: int,
    spec: CodecSpec | None,
) -> None:
    """Refuse a read whose input files (a kept write's) are missing or too short."""
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


def check_directory(directory: str, op: Op) -> None:
    """Refuse a directory that is missing or that the op cannot use."""
    if not os.path.isdir(directory):
        what = "does not exist" if not os.path.lexists(directory) else "is not a directory"
        raise InvalidValueError(
            f"{directory} {what}: give an existing directory for the job's files"
        )
    mode = os.W_OK | os.X_OK if op == "write" else os.R_OK | os.X_OK
    if not os.access(directory, mode):
        need = "writable" if op == "write" else "readable"
        raise InvalidValueError(f"{directory} is not {need}: give a {need} directory")


def check_space(directory: str, total_bytes: int) -> None:
    """Refuse a write that would leave less than the margin free."""
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


def choose_read_method(
    requested: ReadMethodRequest,
    files: Sequence[str],
    block_size: int,
    alignment: int,
    memory_backed: bool,
    notes: list[str],
) -> ReadMethod:
    """How a read avoids the page cache: what was asked, or the best that works here."""
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

"""One job of the checkpoint benchmarks, run in a fresh process (or as the ranks of ``mpiexec``).

Not run by hand: ``bench_ckpt_io.py`` and ``bench_ckpt_memory.py`` start it and read the one
line it prints last, ``RESULT {json}`` (rank 0 only). Modes::

    _ckpt_worker.py io        DIR NAME BYTES_PER_RANK SEED SETTLE_S DROP(fadvise|global)
    _ckpt_worker.py raw       DIR NAME BYTES_PER_RANK SEED SETTLE_S DROP(fadvise|global)
    _ckpt_worker.py plain     DIR NAME BYTES_PER_RANK SEED SETTLE_S DROP(fadvise|global)
    _ckpt_worker.py digest    DIR NAME BYTES_PER_RANK SEED SETTLE_S DROP(fadvise|global)
    _ckpt_worker.py mem-write   DIR NAME BYTES CODEC SEED TRACEMALLOC(0|1) [LEVEL]
    _ckpt_worker.py mem-read    DIR NAME BYTES CODEC SEED TRACEMALLOC(0|1) [LEVEL]
    _ckpt_worker.py mem-rebuild DIR NAME BYTES CODEC SEED TRACEMALLOC(0|1) LEVEL

``io``: every rank protects one float64 array of BYTES_PER_RANK bytes (uniform random doubles:
incompressible), level 1 in DIR, codec none, keep 1, and calls
``Checkpointer(...).checkpoint(1)``; then it zeroes the array, and a fresh
``Checkpointer(...).recover()`` reads the checkpoint back into it. Before each call, once every
rank is ready, rank 0 writes back and drops the page cache (:func:`drop_page_cache`); the read
starts no earlier than SETTLE_S after the write ended. Each call is timed between an MPI
barrier and its return on every rank; the job's wall time is ``max end − min start`` on
``CLOCK_MONOTONIC`` (one clock for all processes of the node), the definition the raw engine
uses, and ``gap_s`` is the time from the end of the write to the start of the read. After the
timed read every rank compares its array with the data it wrote (outside the timer).

Why write and read in one job, the read right after the drop: reads on a VM can depend on how
long after the write they come (see ``bench_ckpt_io.py``); the raw engine and fio read right
after their own write, so the library does too, and the benchmark reports every tool's gap.

``raw``: the same job without the library — every rank writes the same array to its own file
with the I/O engine the library writes through (``run_chunks``: 1 MiB blocks straight from the
array, fsync of the file and of its directory) and reads it back into the zeroed array; no
digests, manifest, agreement or commit. Timed the same way, so the library/raw ratio is what
protecting the data costs, with the same processes, memory and launcher on both sides.
``plain``: the same with ``ndarray.tofile`` + fsync (file and directory) and ``readinto``.
``digest``: ``raw`` plus the digests the library takes, the way it takes them — the write
hashes each block as ``ConcatSource`` serves it to the engine, the read has the engine hash
each piece as it lands (``digest=``), both with the library's default checksum, and the read's
digest must equal the write's — and nothing else of the library: what checked integrity costs
by itself, so library/digest is the commit's share and digest/plain the digest's.
Every io mode also reports ``write_cpu_s``/``read_cpu_s``: user + system CPU-seconds of every
rank (threads and waited-for children) in the timed call, summed over the ranks.

``mem-*``: one process, one array of BYTES (a smooth field rounded to 1e-3: compressible, so a
codec does real work). It reads ``VmRSS``/``VmHWM`` (``/proc/self/status``) and ``ru_maxrss``
after importing the library, after allocating and touching the array and constructing the
Checkpointer, then resets the high-water mark (``echo 5 > /proc/self/clear_refs``) and runs
one checkpoint (or recovery); the peak minus the baseline is what that call cost in memory
beyond the protected data. With TRACEMALLOC=1 it then repeats the call under ``tracemalloc``
(Python and NumPy allocations only) after the resident measurement, so tracing does not
disturb it.

LEVEL (default ``L1``: one process, level 1): ``L2`` (partner copy), ``L3-xor`` (level 3,
parity 1) or ``L3-rs2`` (level 3, parity 2, Reed–Solomon) run as the ranks of ``mpiexec``, one
emulated node per rank, erasure groups of all ranks, each rank with its own array (the seed
plus its rank); every rank measures itself and rank 0 reports the rank with the largest
overhead, and every rank's. ``mem-rebuild`` is a recovery after emulated node 1 lost its
storage (:func:`greenckpt.ckpt.inject.erase_node_storage`, before the baseline): node 1's
files are rebuilt from the partner copy or the group's parity, the path that moves the most
data between ranks.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

FILL_CHUNK = 1 << 20
"""Elements generated per step (8 MiB): the array is filled in place, so generating its
contents never needs a second full-size temporary."""


def _rank_comm() -> Any:
    from greenckpt.ckpt.comm import world  # noqa: PLC0415 - after the mode is known

    return world()


def random_array(nbytes: int, seed: int) -> npt.NDArray[np.float64]:
    """``nbytes // 8`` uniform doubles from ``seed``, generated in place."""
    out = np.empty(nbytes // 8, dtype=np.float64)
    rng = np.random.default_rng(seed)
    for i in range(0, out.size, FILL_CHUNK):
        rng.random(out=out[i : i + FILL_CHUNK])
    return out


def matches_random(arr: npt.NDArray[np.float64], seed: int) -> bool:
    """Whether ``arr`` holds :func:`random_array`'s data for ``seed`` (chunk by chunk)."""
    rng = np.random.default_rng(seed)
    want = np.empty(min(FILL_CHUNK, arr.size), dtype=np.float64)
    for i in range(0, arr.size, FILL_CHUNK):
        part = arr[i : i + FILL_CHUNK]
        rng.random(out=want[: part.size])
        if not np.array_equal(part, want[: part.size]):
            return False
    return True


def field_array(nbytes: int, seed: int) -> npt.NDArray[np.float64]:
    """A smooth 1-D field rounded to 1e-3 (compresses like simulation state), in place."""
    out = np.empty(nbytes // 8, dtype=np.float64)
    for i in range(0, out.size, FILL_CHUNK):
        idx = np.arange(i, min(i + FILL_CHUNK, out.size), dtype=np.float64)
        out[i : i + idx.size] = np.round(np.sin(idx * 1e-4 + seed) * 1000.0) / 1000.0
    return out


def matches_field(arr: npt.NDArray[np.float64], seed: int) -> bool:
    """Whether ``arr`` holds :func:`field_array`'s data for ``seed``."""
    for i in range(0, arr.size, FILL_CHUNK):
        idx = np.arange(i, min(i + FILL_CHUNK, arr.size), dtype=np.float64)
        if not np.array_equal(
            arr[i : i + idx.size], np.round(np.sin(idx * 1e-4 + seed) * 1e3) / 1e3
        ):
            return False
    return True


DROP_METHODS = ("fadvise", "global")


def drop_page_cache(directory: str | os.PathLike[str], method: str = "fadvise") -> str:
    """Write back dirty pages (``os.sync()``) and drop cached pages; return what was done.

    ``fadvise``: ``fsync`` + ``posix_fadvise(DONTNEED)`` on every file under ``directory`` —
    exactly the data about to be read, and nothing else (no root needed). ``global``: ``echo 1
    > /proc/sys/vm/drop_caches`` (root), which also evicts the Python installation, so the
    processes started next (mpiexec ranks, the engine's spawned workers) are slowed by
    re-reading it; falls back to ``fadvise`` where refused.
    """
    os.sync()
    if method == "global":
        try:
            with open("/proc/sys/vm/drop_caches", "w", encoding="ascii") as f:
                f.write("1")
        except OSError:
            pass
        else:
            return "drop_caches"
    for dirpath, _dirs, files in os.walk(directory):
        for fname in files:
            fd = os.open(os.path.join(dirpath, fname), os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
    return "fadvise_dontneed"


def _drop_on_rank0(comm: Any, directory: str, method: str) -> str | None:
    """Every rank ready; rank 0 drops the cache; every rank waits for it."""
    comm.barrier()
    done = drop_page_cache(directory, method) if comm.rank == 0 else None
    comm.barrier()
    return done


REDUNDANT_LEVELS: dict[str, tuple[int, dict[str, Any]]] = {
    "L2": (2, {}),
    "L3-xor": (3, {"parity": 1}),
    "L3-rs2": (3, {"parity": 2}),
}
"""The multi-rank levels of the memory modes: level number and settings beyond ``enabled``."""


def checkpointer(directory: str, name: str, codec: str, level: str = "L1", ranks: int = 1) -> Any:
    """Level 1 only, in ``directory``, keep 1, no environment overrides; with
    ``BENCH_CKPT_NODES=per-rank`` (``bench_ckpt_io.py --nodes``) every rank is an emulated
    node of its own (``ranks_per_node=1``). ``level`` other than ``L1``: that level alone
    (:data:`REDUNDANT_LEVELS`), one emulated node per rank, erasure groups of ``ranks``."""
    from greenckpt.ckpt.api import Checkpointer  # noqa: PLC0415 - import cost is measured

    if level != "L1":
        number, extra = REDUNDANT_LEVELS[level]
        if number == 3:
            extra = {**extra, "group_size": ranks}
        return Checkpointer(
            local_dir=directory,
            name=name,
            keep=1,
            ranks_per_node=1,
            env={},
            **{f"l{number}": {"enabled": True, "codec": codec, **extra}},
        )
    per_rank = os.environ.get("BENCH_CKPT_NODES", "one") == "per-rank"
    return Checkpointer(
        local_dir=directory,
        name=name,
        keep=1,
        l1={"enabled": True, "codec": codec},
        env={},
        **({"ranks_per_node": 1} if per_rank else {}),
    )


def level_number(level: str) -> int:
    """The level a ``LEVEL`` argument checkpoints to."""
    return 1 if level == "L1" else REDUNDANT_LEVELS[level][0]


# --------------------------------------------------------------------------- io modes


def cpu_seconds() -> float:
    """User + system CPU-seconds of this process (every thread) and its waited-for children."""
    own, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _timed(comm: Any, action: Callable[[], Any]) -> tuple[float, float, Any, float]:
    """Every rank ready, then ``action()``: its start and end on CLOCK_MONOTONIC, its value,
    and the CPU-seconds this rank spent in it."""
    comm.barrier()
    start, cpu = time.monotonic(), cpu_seconds()
    value = action()
    end, cpu = time.monotonic(), cpu_seconds() - cpu
    return start, end, value, cpu


def io(
    mode: str, directory: str, name: str, nbytes: int, seed: int, settle: float, drop: str
) -> dict[str, Any] | None:
    """``io``: the library checkpoints and recovers; ``raw``, ``plain``, ``digest``: the same
    ranks move the same arrays without it (see the module docstring)."""
    comm = _rank_comm()
    arr = random_array(nbytes, seed + comm.rank)
    if mode == "io":
        ck = checkpointer(directory, name, "none")
        ck.protect("data", arr)
        write: Callable[[], Any] = lambda: ck.checkpoint(1)  # noqa: E731
    else:
        import greenckpt.io  # noqa: F401, PLC0415 - imported outside the timer, as the library is

        path = raw_path(comm, directory, name)
        write = lambda: WRITERS[mode](path, arr)  # noqa: E731
    method = _drop_on_rank0(comm, directory, drop)
    w0, w1, info, wcpu = _timed(comm, write)
    own_write = info.seconds if mode == "io" else w1 - w0
    if mode == "io":
        ck.finalize()
    written = comm.allgather((w0, w1, own_write, wcpu))
    write_end = max(r[1] for r in written)

    arr.fill(0.0)  # the destination: the same resident pages, emptied
    if mode == "io":
        ck2 = checkpointer(directory, name, "none")
        ck2.protect("data", arr)
        read: Callable[[], Any] = lambda: ck2.recover(missing_ok=False)  # noqa: E731
    else:
        read = lambda: READERS[mode](path, arr)  # noqa: E731
    time.sleep(max(0.0, write_end + settle - time.monotonic()))
    _drop_on_rank0(comm, directory, drop)
    r0, r1, rinfo, rcpu = _timed(comm, read)
    if mode == "io":
        ok = rinfo is not None and matches_random(arr, seed + comm.rank)
        own_read = rinfo.seconds if rinfo is not None else float("nan")
        ck2.finalize()
    else:
        ok, own_read = matches_random(arr, seed + comm.rank), r1 - r0
        ok = ok and rinfo == info  # the digest mode: the read's digest is the write's
    read = comm.allgather((r0, r1, own_read, ok, rcpu))
    if comm.rank != 0:
        return None
    read_start = min(r[0] for r in read)
    return {
        "write_wall_s": write_end - min(r[0] for r in written),
        "write_own_s": max(r[2] for r in written),
        "logical_bytes": nbytes * comm.size,
        "read_wall_s": max(r[1] for r in read) - read_start,
        "read_own_s": max(r[2] for r in read),
        "read_bytes": nbytes * comm.size,
        "verified": all(r[3] for r in read),
        "gap_s": read_start - write_end,
        "ranks": len(read),
        "cache_drop": method,
        "write_cpu_s": sum(r[3] for r in written),
        "read_cpu_s": sum(r[4] for r in read),
    }


def raw_path(comm: Any, directory: str, name: str) -> str:
    """This rank's file for the raw mode, its directory made by rank 0."""
    job = os.path.join(directory, name)
    if comm.rank == 0:
        os.makedirs(job, exist_ok=True)
    comm.barrier()
    return os.path.join(job, f"rank-{comm.rank:06d}.data")


def raw_write(path: str, arr: npt.NDArray[np.float64]) -> None:
    """The engine writing ``arr`` to a new file, fsynced with its directory: what a rank
    would do without a checkpoint library (no digests, manifest, agreement or commit)."""
    from greenckpt.io import Chunk, ConcatSource, run_chunks  # noqa: PLC0415

    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644))
    run_chunks("write", [[Chunk(path, 0, arr.nbytes, ConcatSource([arr]))]])


def raw_read(path: str, arr: npt.NDArray[np.float64]) -> None:
    """The engine reading the file back into ``arr`` (buffered, as the library reads)."""
    from greenckpt.io import Chunk, ConcatSink, run_chunks  # noqa: PLC0415

    run_chunks("read", [[Chunk(path, 0, arr.nbytes, sink=ConcatSink([arr]))]])


def digest_write(path: str, arr: npt.NDArray[np.float64]) -> str:
    """:func:`raw_write` hashing each block as the engine takes it (the library's way); the
    file's digest."""
    from greenckpt.io import Chunk, ConcatSource, run_chunks  # noqa: PLC0415
    from greenckpt.io.checksum import CHECKSUMS  # noqa: PLC0415

    source = ConcatSource([arr], checksum=CHECKSUMS[0])
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644))
    run_chunks("write", [[Chunk(path, 0, arr.nbytes, source)]])
    return source.digests()[1]


def digest_read(path: str, arr: npt.NDArray[np.float64]) -> str:
    """:func:`raw_read` with the engine hashing each piece as it lands, as a restart of an
    uncompressed checkpoint asks it to (``digest=``); the file's digest."""
    from greenckpt.io import Chunk, ConcatSink, run_chunks  # noqa: PLC0415
    from greenckpt.io.checksum import CHECKSUMS  # noqa: PLC0415

    chunk = Chunk(path, 0, arr.nbytes, sink=ConcatSink([arr]))
    (report,) = run_chunks("read", [[chunk]], digest=CHECKSUMS[0])
    assert report.digests is not None
    return report.digests[0]


def plain_write(path: str, arr: npt.NDArray[np.float64]) -> None:
    """A plain writer: ``ndarray.tofile`` into a new file, then fsync of it and its directory."""
    with open(path, "wb") as fh:
        arr.tofile(fh)
        fh.flush()
        os.fsync(fh.fileno())
    fd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


WRITERS: dict[str, Callable[[str, npt.NDArray[np.float64]], object]] = {
    "raw": raw_write,
    "plain": plain_write,
    "digest": digest_write,
}
"""The write of each mode without the library."""


def plain_read(path: str, arr: npt.NDArray[np.float64]) -> None:
    """A plain reader: ``readinto`` the zeroed array (buffered, no digest)."""
    view = memoryview(arr).cast("B")
    with open(path, "rb", buffering=0) as fh:
        done = 0
        while done < len(view):
            n = fh.readinto(view[done:])
            if not n:
                raise OSError(f"{path}: short read at {done} of {len(view)} bytes")
            done += n


READERS: dict[str, Callable[[str, npt.NDArray[np.float64]], object]] = {
    "raw": raw_read,
    "plain": plain_read,
    "digest": digest_read,
}
"""The read of each mode without the library (the digest mode's returns the digest, the
others None, as their writes do)."""


# --------------------------------------------------------------------------- memory modes


def _status() -> dict[str, int]:
    """``VmRSS`` and ``VmHWM`` of this process in bytes."""
    out: dict[str, int] = {}
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) * 1024
    return out


def _maxrss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def _trim_heap() -> bool:
    """Give freed heap memory back to the system (glibc ``malloc_trim``), so that memory the
    set-up freed cannot hide a call's allocations by being reused; False where unavailable."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        return False
    return True


def _reset_hwm() -> bool:
    """Reset ``VmHWM`` to the current RSS (Linux ≥ 4.0); False when refused."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
    except OSError:
        return False
    return True


def _lose_node(comm: Any, directory: str) -> None:
    """Emulated node 1 loses its storage (rank 0 erases it; every rank waits)."""
    from greenckpt.ckpt.inject import erase_node_storage  # noqa: PLC0415 - rebuild only

    comm.barrier()
    if comm.rank == 0:
        erase_node_storage(directory, node=1)
    comm.barrier()


def _call(mode: str, ck: Any, level: str) -> Any:
    """The measured call of a memory mode (a rebuild's node loss comes before it)."""
    if mode == "mem-write":
        return ck.checkpoint(level_number(level))
    return ck.recover(missing_ok=False)


def _job_result(comm: Any, mine: dict[str, Any], mode: str, trace: bool) -> dict[str, Any] | None:
    """On rank 0, the job's figures: the rank with the largest overhead, the largest of every
    other figure, and every rank's; None on the other ranks."""
    everyone = comm.gather(mine, 0)
    if everyone is None:
        return None
    worst = max(everyone, key=lambda r: int(r["overhead_hwm"]))
    job = {
        **worst,  # the rank with the largest overhead; the others' maxima below
        "overhead_maxrss": max(int(r["overhead_maxrss"]) for r in everyone),
        "hwm_reset": all(r["hwm_reset"] for r in everyone),
        "ranks": everyone,
    }
    if trace:
        job["tracemalloc_peak"] = max(int(r["tracemalloc_peak"]) for r in everyone)
    if mode == "mem-write":
        job["logical_bytes"] = sum(int(r["logical_bytes"]) for r in everyone)
        job["stored_bytes"] = sum(int(r["stored_bytes"]) for r in everyone)
    else:
        job["verified"] = all(r["verified"] for r in everyone)
        job["rebuilt"] = sorted({int(x) for r in everyone for x in r["rebuilt"]})
    return job


def memory(
    mode: str,
    directory: str,
    name: str,
    nbytes: int,
    codec: str,
    seed: int,
    trace: bool,
    level: str = "L1",
) -> dict[str, Any] | None:
    rss_start = _status()["VmRSS"]
    import greenckpt.ckpt.api  # noqa: F401, PLC0415 - its cost is reported apart

    import_rss = _status()["VmRSS"]
    comm = _rank_comm() if level != "L1" else None
    rank = 0 if comm is None else comm.rank
    if mode == "mem-write":
        arr = field_array(nbytes, seed + rank)
    else:
        arr = np.empty(nbytes // 8, dtype=np.float64)
        arr.fill(0.0)
    allocated_rss = _status()["VmRSS"]
    ck = checkpointer(directory, name, codec, level, 1 if comm is None else comm.size)
    ck.protect("data", arr)
    if mode == "mem-rebuild":
        _lose_node(comm, directory)
    trimmed = _trim_heap()
    if comm is not None:
        comm.barrier()
    reset = _reset_hwm()
    before = _status()
    maxrss_before = _maxrss()
    info: Any = _call(mode, ck, level)
    after = _status()
    maxrss_after = _maxrss()
    if mode == "mem-write":
        extra = {"logical_bytes": info.logical_bytes, "stored_bytes": info.stored_bytes}
    else:  # checked after the measurement: comparing needs temporaries
        extra = {"verified": info is not None and matches_field(arr, seed + rank)}
        extra["rebuilt"] = [] if info is None else list(info.rebuilt)
    traced: int | None = None
    if trace:
        import tracemalloc  # noqa: PLC0415 - only when asked

        if mode == "mem-rebuild":
            _lose_node(comm, directory)
        tracemalloc.start()
        _call(mode, ck, level)
        traced = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    ck.finalize()
    mine = {
        "rank": rank,
        "data_bytes": arr.nbytes,
        "rss_start": rss_start,
        "import_bytes": import_rss - rss_start,
        "init_bytes": before["VmRSS"] - allocated_rss,
        "baseline_rss": before["VmRSS"],
        "baseline_hwm": before["VmHWM"],
        "peak_hwm": after["VmHWM"],
        "hwm_reset": reset,
        "heap_trimmed": trimmed,
        "overhead_hwm": after["VmHWM"] - (before["VmRSS"] if reset else before["VmHWM"]),
        "maxrss_before": maxrss_before,
        "maxrss_after": maxrss_after,
        "overhead_maxrss": maxrss_after - maxrss_before,
        "rss_after": after["VmRSS"],
        "tracemalloc_peak": traced,
        **extra,
    }
    return mine if comm is None else _job_result(comm, mine, mode, trace)


def main(argv: list[str]) -> int:
    mode, rest = argv[0], argv[1:]
    result: dict[str, Any] | None
    if mode in ("io", *WRITERS):
        result = io(mode, rest[0], rest[1], int(rest[2]), int(rest[3]), float(rest[4]), rest[5])
    elif mode in ("mem-write", "mem-read", "mem-rebuild"):
        directory, name, size, codec, seed, trace, *level = rest
        result = memory(
            mode, directory, name, int(size), codec, int(seed), trace == "1", *level[:1]
        )
    else:
        print(f"_ckpt_worker.py: unknown mode {mode!r}", file=sys.stderr)
        return 2
    if result is not None:
        print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    os.environ.pop("GREENCKPT_CONFIG", None)
    sys.exit(main(sys.argv[1:]))

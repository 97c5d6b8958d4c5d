"""The I/O engine on the real disk, with small sizes: data, durability, read method, cleanup.

These assert behaviour only (what was written is what is read, fsync happens, bad input is
refused before anything starts, failures leave nothing behind); speed is compared with fio in
``benchmarks/bench_io_fio.py``.
"""

from __future__ import annotations

import json
import multiprocessing.queues
import os
import pickle
import time
import zlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from greenckpt.io import (
    BufferSource,
    Chunk,
    Fault,
    IOJobError,
    Layout,
    PatternSource,
    job_files,
    remove_files,
    run_chunks,
    run_io,
    split_sizes,
)
from greenckpt.platform.root import PlatformError
from greenckpt.platform.storage import identify_storage

MiB = 1024 * 1024
BS = 256 * 1024
"""Small blocks so that 8–16 MiB jobs still run many iterations of the loops."""


def _on_ram(path: Path) -> bool:
    try:
        return identify_storage(path).kind == "memory"
    except PlatformError:
        return False


def _worker_children() -> list[str]:
    """Command lines of this process's live children that are spawned workers."""
    found = []
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        for pid in (task / "children").read_text().split():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "spawn_main" in cmd or "forkserver" in cmd:
                found.append(cmd)
    return found


def _expected(layout: Layout, total: int, workers: int, seed: int) -> list[bytes]:
    """What each file should contain, rebuilt independently of the engine's write loop."""
    sizes = split_sizes(total, workers, BS)
    parts = [PatternSource(seed, rank).expected(size, BS) for rank, size in enumerate(sizes)]
    return [b"".join(parts)] if layout == "shared_file" else parts


# --------------------------------------------------------------------------- splitting


def test_split_sizes_examples() -> None:
    assert split_sizes(8 * MiB, 4, MiB) == [2 * MiB] * 4
    assert split_sizes(10 * MiB, 4, MiB) == [3 * MiB, 3 * MiB, 2 * MiB, 2 * MiB]
    assert split_sizes(4 * MiB + 5, 2, MiB) == [2 * MiB, 2 * MiB + 5]


@given(
    workers=st.integers(1, 16),
    block=st.integers(1, 4096),
    extra_blocks=st.integers(0, 200),
    tail=st.integers(0, 4095),
)
def test_split_sizes_properties(workers: int, block: int, extra_blocks: int, tail: int) -> None:
    total = (workers + extra_blocks) * block + tail % block
    sizes = split_sizes(total, workers, block)
    assert len(sizes) == workers
    assert sum(sizes) == total
    assert all(s % block == 0 and s >= block for s in sizes[:-1])
    whole = [s // block for s in sizes]
    assert max(whole) - min(whole) <= 1


# --------------------------------------------------------------------------- round trip


@pytest.mark.parametrize("layout", ["file_per_process", "shared_file"])
@pytest.mark.parametrize("workers", [1, 2, 4])
def test_write_then_read_round_trip(tmp_path: Path, layout: Layout, workers: int) -> None:
    total = 8 * MiB + 3 * BS + 1234  # not a whole number of blocks: exercises the tail
    w = run_io(
        "write", tmp_path, total_bytes=total, workers=workers, block_size=BS,
        layout=layout, keep=True, checksum=True, seed=7,
    )  # fmt: skip
    assert w.total_bytes == total and w.workers == workers and w.kept
    assert w.read_method is None and w.fsync and w.layout == layout
    for file, data in zip(w.files, _expected(layout, total, workers, 7), strict=True):
        assert Path(file).read_bytes() == data
    r = run_io(
        "read", tmp_path, total_bytes=total, workers=workers, block_size=BS,
        layout=layout, checksum=True,
    )  # fmt: skip
    assert [p.checksums for p in r.processes] == [p.checksums for p in w.processes]
    assert [p.bytes for p in r.processes] == split_sizes(total, workers, BS)
    if _on_ram(tmp_path):
        assert r.read_method == "cached"
    else:
        assert r.read_method == "o_direct"
    assert r.in_process == (workers == 1)
    assert r.storage_key == identify_storage(tmp_path).key
    assert r.throughput == pytest.approx(total / r.wall_s)
    assert r.wall_s >= max(p.end_s for p in r.processes) - 1e-9
    assert min(p.start_s for p in r.processes) == 0.0
    json.dumps(r.to_dict())
    assert all(Path(f).exists() for f in r.files)  # a read never removes its input
    remove_files(r.files)
    assert list(tmp_path.iterdir()) == []


def test_write_removes_files_unless_kept(tmp_path: Path) -> None:
    result = run_io("write", tmp_path, total_bytes=4 * MiB, workers=2, block_size=BS)
    assert not result.kept
    assert list(tmp_path.iterdir()) == []


def test_checksum_matches_data(tmp_path: Path) -> None:
    w = run_io("write", tmp_path, total_bytes=2 * MiB, block_size=BS, keep=True, checksum=True)
    assert w.processes[0].checksums == (zlib.crc32(Path(w.files[0]).read_bytes()),)
    remove_files(w.files)


@pytest.mark.parametrize("method", ["fadvise_dontneed", "cached"])
def test_requested_read_method_is_recorded(tmp_path: Path, method: Any) -> None:
    w = run_io("write", tmp_path, total_bytes=4 * MiB, block_size=BS, keep=True, checksum=True)
    r = run_io(
        "read", tmp_path, total_bytes=4 * MiB, block_size=BS, read_method=method, checksum=True
    )
    assert r.read_method == method
    assert r.processes[0].checksums == w.processes[0].checksums
    remove_files(w.files)


# --------------------------------------------------------------------------- durability


@pytest.mark.parametrize(("fsync", "calls"), [(True, 2), (False, 0)])
def test_write_fsyncs_file_and_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fsync: bool, calls: int
) -> None:
    seen: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        seen.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    result = run_io("write", tmp_path, total_bytes=2 * MiB, block_size=BS, fsync=fsync)
    assert result.in_process and result.fsync is fsync
    assert len(seen) == calls  # one file, then its directory


# --------------------------------------------------------------------------- bad input


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        run_io("write", tmp_path / "nope", total_bytes=MiB, block_size=BS)


def test_path_under_a_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(ValueError, match=r"not a directory|does not exist"):
        run_io("write", tmp_path / "file" / "sub", total_bytes=MiB, block_size=BS)
    with pytest.raises(ValueError, match="is not a directory"):
        run_io("write", tmp_path / "file", total_bytes=MiB, block_size=BS)


def test_not_enough_space(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "statvfs", lambda _: SimpleNamespace(f_bavail=100, f_frsize=4096))
    with pytest.raises(ValueError, match="free"):
        run_io("write", tmp_path, total_bytes=8 * MiB, block_size=BS)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"workers": 0}, "workers must be"),
        ({"block_size": 0}, "block size must be"),
        ({"total_bytes": 3 * BS, "workers": 4}, "less than 4 workers"),
        ({"read_method": "o_direct", "block_size": 1000}, "multiple of the logical block size"),
        ({"layout": "striped"}, "layout must be"),
        ({"name": "a/b"}, "name must be"),
    ],
)
def test_bad_parameters(tmp_path: Path, kwargs: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {"total_bytes": 4 * MiB, "block_size": BS} | kwargs
    with pytest.raises(ValueError, match=message):
        run_io("write", tmp_path, **args)
    assert list(tmp_path.iterdir()) == []


def test_o_direct_read_needs_aligned_block(tmp_path: Path) -> None:
    w = run_io("write", tmp_path, total_bytes=MiB, block_size=1000, keep=True)
    with pytest.raises(ValueError, match="multiple of the logical block size"):
        run_io("read", tmp_path, total_bytes=MiB, block_size=1000, read_method="o_direct")
    r = run_io("read", tmp_path, total_bytes=MiB, block_size=1000)  # auto falls back
    assert r.read_method in ("fadvise_dontneed", "cached")
    remove_files(w.files)


def test_read_without_files(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="is missing"):
        run_io("read", tmp_path, total_bytes=4 * MiB, block_size=BS)


# --------------------------------------------------------------------------- failures


@pytest.mark.parametrize("layout", ["file_per_process", "shared_file"])
def test_worker_failure_cleans_up(tmp_path: Path, layout: Layout) -> None:
    with pytest.raises(IOJobError, match="worker 1 failed: InjectedFaultError: injected fault"):
        run_io(
            "write", tmp_path, total_bytes=16 * MiB, workers=4, block_size=BS, layout=layout,
            keep=True, fault=Fault(rank=1, after_bytes=2 * BS),
        )  # fmt: skip
    assert list(tmp_path.iterdir()) == []
    assert multiprocessing.active_children() == []
    assert _worker_children() == []


def test_in_process_failure_cleans_up(tmp_path: Path) -> None:
    with pytest.raises(IOJobError, match="injected fault"):
        run_io(
            "write", tmp_path, total_bytes=4 * MiB, block_size=BS, keep=True,
            fault=Fault(rank=0, after_bytes=BS),
        )  # fmt: skip
    assert list(tmp_path.iterdir()) == []


def test_failure_before_start_breaks_barrier(tmp_path: Path) -> None:
    present = tmp_path / "present"
    present.write_bytes(bytes(2 * BS))
    chunks = [[Chunk(str(present), 0, BS)], [Chunk(str(tmp_path / "absent"), 0, BS)]]
    with pytest.raises(IOJobError, match="worker 1 failed: FileNotFoundError"):
        run_chunks("read", chunks, block_size=BS)
    assert _worker_children() == []


def test_interrupt_terminates_workers_and_removes_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(self: object, *args: object, **kwargs: object) -> object:
        raise KeyboardInterrupt

    monkeypatch.setattr(multiprocessing.queues.Queue, "get", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_io("write", tmp_path, total_bytes=8 * MiB, workers=2, block_size=BS, keep=True)
    assert list(tmp_path.iterdir()) == []
    assert _worker_children() == []


# --------------------------------------------------------------------------- sources


def test_buffer_source_writes_callers_bytes(tmp_path: Path) -> None:
    data = bytearray(os.urandom(3 * BS + 17))
    target = tmp_path / "state.bin"
    target.touch()
    chunk = Chunk(str(target), 0, len(data), BufferSource(data))
    (report,) = run_chunks("write", [[chunk]], block_size=BS, checksum=True)
    assert target.read_bytes() == bytes(data)
    assert report.checksums == (zlib.crc32(data),)
    assert report.bytes == len(data)


def test_buffer_source_refuses_to_cross_processes() -> None:
    with pytest.raises(TypeError, match="in-process only"):
        pickle.dumps(BufferSource(b"abc"))


def test_pattern_source_is_reproducible_and_pickles_small() -> None:
    a = PatternSource(seed=3, stream=1, pool_bytes=MiB)
    assert a.expected(3 * BS, BS) == PatternSource(3, 1, MiB).expected(3 * BS, BS)
    assert a.expected(BS, BS) != PatternSource(3, 2, MiB).expected(BS, BS)
    assert len(pickle.dumps(a)) < 200


def test_job_files_names(tmp_path: Path) -> None:
    assert job_files(tmp_path, "x", "shared_file", 4) == (str(tmp_path / "x.shared"),)
    assert job_files(tmp_path, "x", "file_per_process", 2) == (
        str(tmp_path / "x.0000"),
        str(tmp_path / "x.0001"),
    )


@pytest.mark.parametrize("workers", [1, 3])
def test_on_start_is_called_once_inside_the_io_window(tmp_path: Path, workers: int) -> None:
    """The hook fires when the workers are released, so a power reading there brackets the I/O
    rather than the process start-up; the window is reported on the monotonic clock."""
    calls: list[float] = []
    before = time.monotonic()
    res = run_io(
        "write",
        tmp_path,
        total_bytes=4 * MiB,
        workers=workers,
        block_size=BS,
        on_start=lambda: calls.append(time.monotonic()),
    )
    after = time.monotonic()
    assert len(calls) == 1
    assert before <= res.start_monotonic_s <= res.end_monotonic_s <= after
    assert before <= calls[0] <= res.end_monotonic_s
    assert res.wall_s == pytest.approx(res.end_monotonic_s - res.start_monotonic_s, abs=1e-6)


def test_on_start_failure_is_raised_and_cleans_up(tmp_path: Path) -> None:
    def boom() -> None:
        raise RuntimeError("meter gone")

    with pytest.raises(RuntimeError, match="meter gone"):
        run_io("write", tmp_path, total_bytes=2 * MiB, workers=2, block_size=BS, on_start=boom)
    assert list(tmp_path.iterdir()) == []

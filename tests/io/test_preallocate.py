"""Blocks reserved before a write: the real call, the ranges the engine asks for, and a
refusal that changes nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from greenckpt.io import Chunk, ConcatSink, ConcatSource, parse_codec, preallocate, run_chunks
from greenckpt.io import worker as worker_module
from greenckpt.io.preallocate import FALLOC_FL_KEEP_SIZE, reserve

MiB = 1 << 20


class Recorder:
    def __init__(self, result: int = 0) -> None:
        self.calls: list[tuple[int, int, int, int]] = []
        self.result = result

    def __call__(self, fd: int, mode: int, offset: int, length: int) -> int:
        self.calls.append((fd, mode, offset, length))
        return self.result


def test_the_real_call_reserves_blocks_and_keeps_the_size(tmp_path: Path) -> None:
    if preallocate._fallocate() is None:
        pytest.skip("no fallocate in this libc")
    path = tmp_path / "f"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        if not reserve(fd, 0, 4 * MiB):
            pytest.skip(f"the file system under {tmp_path} refuses fallocate")
        st = os.fstat(fd)
    finally:
        os.close(fd)
    assert st.st_size == 0  # a reader sees no bytes that were not written
    assert st.st_blocks * 512 >= 4 * MiB


def test_nothing_to_reserve_or_no_call(monkeypatch: pytest.MonkeyPatch) -> None:
    rec = Recorder()
    monkeypatch.setattr(preallocate, "_fallocate", lambda: rec)
    assert reserve(3, 0, 0) is False and rec.calls == []
    assert reserve(3, 5, 7) is True and rec.calls == [(3, FALLOC_FL_KEEP_SIZE, 5, 7)]
    monkeypatch.setattr(preallocate, "_fallocate", lambda: None)
    assert reserve(3, 0, MiB) is False


def _chunks(tmp_path: Path, data: bytes) -> list[Chunk]:
    """Two chunks of one file (written out of order, with a gap) and one of another."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.touch()
    b.touch()
    return [
        Chunk(str(a), 3 * MiB, MiB, ConcatSource([data[:MiB]])),
        Chunk(str(a), MiB, MiB, ConcatSource([data[MiB : 2 * MiB]])),
        Chunk(str(b), 0, 123, ConcatSource([data[:123]])),
    ]


def test_the_engine_reserves_each_files_span(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spans: list[tuple[int, int, int]] = []

    def record(fd: int, offset: int, length: int) -> bool:
        spans.append((fd, offset, length))
        return True

    monkeypatch.setattr(worker_module, "reserve", record)
    data = os.urandom(2 * MiB)
    run_chunks("write", [_chunks(tmp_path, data)])
    assert sorted((off, n) for _fd, off, n in spans) == [(0, 123), (MiB, 3 * MiB)]
    assert len({fd for fd, _off, _n in spans}) == 2  # one call per file
    spans.clear()
    out = bytearray(MiB)
    run_chunks("read", [[Chunk(str(tmp_path / "a"), 3 * MiB, MiB, sink=ConcatSink([out]))]])
    assert spans == [] and bytes(out) == data[:MiB]  # reads reserve nothing
    run_chunks("write", [_chunks(tmp_path, data)], codec=parse_codec("zstd:1"))
    assert spans == []  # a compressed chunk's stored size is not known before


@pytest.mark.parametrize("result", [0, -1])
def test_a_refused_or_granted_reservation_writes_the_same_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, result: int
) -> None:
    rec = Recorder(result)
    monkeypatch.setattr(preallocate, "_fallocate", lambda: rec)
    data = os.urandom(3 * MiB + 4567)
    path = tmp_path / "f"
    path.touch()
    run_chunks("write", [[Chunk(str(path), 0, len(data), ConcatSource([data]))]])
    assert len(rec.calls) == 1 and path.read_bytes() == data

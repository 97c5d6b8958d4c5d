"""Writeback started while writing: which ranges, when, and a refusal that changes nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from greenckpt.io import Chunk, ConcatSink, ConcatSource, parse_codec, run_chunks, writeback
from greenckpt.io.writeback import SYNC_FILE_RANGE_WRITE, Writeback

MiB = 1 << 20


class Recorder:
    def __init__(self, result: int = 0) -> None:
        self.calls: list[tuple[int, int, int, int]] = []
        self.result = result

    def __call__(self, fd: int, offset: int, length: int, flags: int) -> int:
        self.calls.append((fd, offset, length, flags))
        return self.result


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    rec = Recorder()
    monkeypatch.setattr(writeback, "_sync_file_range", lambda: rec)
    return rec


def test_each_full_range_is_flushed_once(recorder: Recorder) -> None:
    wb = Writeback(7, flush_after=4 * MiB)
    for i in range(10):  # 10 MiB in 1 MiB writes
        wb.wrote(i * MiB, MiB)
    assert recorder.calls == [
        (7, 0, 4 * MiB, SYNC_FILE_RANGE_WRITE),
        (7, 4 * MiB, 4 * MiB, SYNC_FILE_RANGE_WRITE),
    ]
    assert wb.started == 8 * MiB  # the last 2 MiB are left to the final fsync


def test_a_jump_starts_a_new_range(recorder: Recorder) -> None:
    wb = Writeback(3, flush_after=2 * MiB)
    wb.wrote(0, MiB)
    wb.wrote(10 * MiB, MiB)  # not contiguous: the first MiB is not merged with it
    wb.wrote(11 * MiB, MiB)
    assert recorder.calls == [(3, 10 * MiB, 2 * MiB, SYNC_FILE_RANGE_WRITE)]


def test_off_and_bad_settings(recorder: Recorder) -> None:
    wb = Writeback(3, flush_after=0)
    for i in range(20):
        wb.wrote(i * MiB, MiB)
    assert recorder.calls == [] and wb.started == 0
    with pytest.raises(ValueError, match="flush_after must be >= 0"):
        Writeback(3, flush_after=-1)


def test_a_refusal_turns_it_off_for_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    refusing = Recorder(result=-1)
    monkeypatch.setattr(writeback, "_sync_file_range", lambda: refusing)
    wb = Writeback(3, flush_after=MiB)
    for i in range(5):
        wb.wrote(i * MiB, MiB)
    assert len(refusing.calls) == 1 and wb.started == 0


def test_the_real_call_starts_writeback(tmp_path: Path) -> None:
    if writeback._sync_file_range() is None:
        pytest.skip("no sync_file_range in this libc")
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        wb = Writeback(fd, flush_after=MiB)
        block = os.urandom(MiB)
        for i in range(3):
            os.pwrite(fd, block, i * MiB)
            wb.wrote(i * MiB, MiB)
        assert wb.started == 3 * MiB
    finally:
        os.close(fd)


@pytest.mark.parametrize("flush_after", [0, MiB])
@pytest.mark.parametrize("codec", [None, "zstd:1"])
def test_engine_writes_the_same_bytes_either_way(
    tmp_path: Path, flush_after: int, codec: str | None
) -> None:
    data = bytearray(os.urandom(3 * MiB + 12345))
    path = tmp_path / "f"
    path.touch()
    (report,) = run_chunks(
        "write",
        [[Chunk(str(path), 0, len(data), ConcatSource([data]))]],
        codec=parse_codec(codec),
        flush_after=flush_after,
    )
    out = bytearray(len(data))
    run_chunks(
        "read",
        [[Chunk(str(path), 0, len(data), sink=ConcatSink([out]))]],
        codec=parse_codec(codec),
    )
    assert out == data and report.bytes == len(data)

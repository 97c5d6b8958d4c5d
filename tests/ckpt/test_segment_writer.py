"""SegmentWriter past the page cache (``cached=False``): O_DIRECT from a background thread,
with the page cache for what O_DIRECT cannot take, and every byte and digest as written."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from greenckpt.ckpt import transfer
from greenckpt.ckpt.transfer import DIRECT_ALIGN, SegmentWriter, aligned_buffer
from greenckpt.io.checksum import digest_bytes

MIB = 1 << 20


def _payload(n: int, seed: int) -> bytes:
    return bytes((i * 131 + seed) % 251 for i in range(256)) * (n // 256) + bytes(n % 256)


@pytest.fixture
def pwrites(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, int]]:
    """Every ``os.pwrite`` the module makes: (fd, offset, length)."""
    calls: list[tuple[int, int, int]] = []
    real = os.pwrite

    def spy(fd: int, data: memoryview, offset: int) -> int:
        calls.append((fd, offset, len(data)))
        return real(fd, data, offset)

    monkeypatch.setattr(transfer.os, "pwrite", spy)
    return calls


def _direct_or_skip(path: Path) -> SegmentWriter:
    writer = SegmentWriter(path, "xxh3_64", cached=False)
    if not writer.direct:
        writer.abandon()
        pytest.skip(f"the file system of {path.parent} refuses O_DIRECT")
    return writer


def _fail_direct_writes(monkeypatch: pytest.MonkeyPatch, writer: SegmentWriter, code: int) -> None:
    """Every write to ``writer``'s O_DIRECT descriptor fails with ``code``."""
    direct_fd = writer._direct
    real = os.pwrite

    def failing(fd: int, data: memoryview, offset: int) -> int:
        if fd == direct_fd:
            raise OSError(code, os.strerror(code))
        return real(fd, data, offset)

    monkeypatch.setattr(transfer.os, "pwrite", failing)


def test_aligned_segments_go_direct_and_the_tail_buffered(
    tmp_path: Path, pwrites: list[tuple[int, int, int]]
) -> None:
    path = tmp_path / "copy"
    writer = _direct_or_skip(path)
    buffered_fd, direct_fd = writer._fd, writer._direct
    first = aligned_buffer(4 * MIB)
    first[:] = _payload(4 * MIB, 1)
    second = _payload(2 * MIB + 1000, 2)  # read-only bytes: through the bounce buffer
    writer.write_at(0, first)
    writer.write_at(4 * MIB, second)
    digest = writer.close()
    whole = bytes(first) + second
    assert path.read_bytes() == whole
    assert digest == digest_bytes("xxh3_64", whole)
    direct = [(off, n) for fd, off, n in pwrites if fd == direct_fd]
    buffered = [(off, n) for fd, off, n in pwrites if fd == buffered_fd]
    assert direct == [(0, 4 * MIB), (4 * MIB, 2 * MIB + 1000 - 1000 % DIRECT_ALIGN)]
    assert buffered == [(6 * MIB + 1000 - 1000 % DIRECT_ALIGN, 1000 % DIRECT_ALIGN)]
    assert all(n % DIRECT_ALIGN == 0 and off % DIRECT_ALIGN == 0 for off, n in direct)


def test_an_unaligned_offset_is_written_buffered(
    tmp_path: Path, pwrites: list[tuple[int, int, int]]
) -> None:
    path = tmp_path / "copy"
    writer = _direct_or_skip(path)
    buffered_fd = writer._fd
    writer.write_at(0, _payload(100, 3))
    writer.write_at(100, _payload(3 * DIRECT_ALIGN, 4))
    digest = writer.close()
    whole = _payload(100, 3) + _payload(3 * DIRECT_ALIGN, 4)
    assert path.read_bytes() == whole
    assert digest == digest_bytes("xxh3_64", whole)
    assert {fd for fd, _, _ in pwrites} == {buffered_fd}


def test_out_of_order_writes_keep_the_bytes_but_give_no_digest(tmp_path: Path) -> None:
    path = tmp_path / "copy"
    writer = SegmentWriter(path, "xxh3_64", cached=False)
    b = _payload(2 * DIRECT_ALIGN, 5)
    a = _payload(2 * DIRECT_ALIGN, 6)
    writer.write_at(len(a), b)
    writer.write_at(0, a)
    assert writer.close() is None
    assert path.read_bytes() == a + b


def test_o_direct_refused_at_write_time_falls_back_to_the_page_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "copy"
    writer = _direct_or_skip(path)
    _fail_direct_writes(monkeypatch, writer, errno.EINVAL)
    parts = [_payload(MIB, k) for k in range(3)]
    for k, part in enumerate(parts):
        writer.write_at(k * MIB, part)
    digest = writer.close()
    assert not writer.direct  # turned buffered for good
    assert path.read_bytes() == b"".join(parts)
    assert digest == digest_bytes("xxh3_64", b"".join(parts))


def test_a_failed_background_write_is_raised_and_abandon_removes_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "copy"
    writer = _direct_or_skip(path)
    _fail_direct_writes(monkeypatch, writer, errno.EIO)
    writer.write_at(0, _payload(MIB, 7))  # handed to the thread: fails there
    with pytest.raises(OSError, match="Input/output error"):
        writer.write_at(MIB, _payload(MIB, 8))
    writer.abandon()
    assert not path.exists()


def test_cached_writers_never_open_o_direct(tmp_path: Path) -> None:
    writer = SegmentWriter(tmp_path / "rebuilt", "xxh3_64")
    assert not writer.direct
    writer.write_at(0, _payload(MIB, 9))
    assert writer.close() == digest_bytes("xxh3_64", _payload(MIB, 9))


def test_a_segment_received_into_the_writers_buffer_is_written_without_a_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "copy"
    writer = _direct_or_skip(path)
    written_from: list[object] = []
    real = os.pwrite

    def spy(fd: int, data: memoryview, offset: int) -> int:
        written_from.append(data.obj)
        return real(fd, data, offset)

    monkeypatch.setattr(transfer.os, "pwrite", spy)
    parts, buffers = [], []
    for k in range(3):
        buffer = writer.buffer(MIB)
        assert len(buffer) >= MIB
        part = _payload(MIB, 10 + k)
        buffer[:MIB] = part  # as a receive fills it
        writer.write_at(k * MIB, memoryview(buffer)[:MIB])
        parts.append(part)
        buffers.append(buffer)
    digest = writer.close()
    assert path.read_bytes() == b"".join(parts)
    assert digest == digest_bytes("xxh3_64", b"".join(parts))
    assert buffers[0] is not buffers[1] and buffers[0] is buffers[2]  # two take turns
    assert written_from == buffers  # each written from the buffer it was received in

"""The level-4 flush's copy (issue 32): in the kernel where it can be, through a buffer where
the kernel refuses or ends early, the same bytes either way, writeback started over the whole
target and the target fsynced before it returns."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from greenckpt.io import copy as copy_module
from greenckpt.io.copy import copy_file

MIB = 1024 * 1024


def _source(tmp_path: Path, size: int) -> tuple[Path, bytes]:
    data = os.urandom(size)
    path = tmp_path / "source.data"
    path.write_bytes(data)
    return path, data


def _copied(tmp_path: Path, size: int) -> bytes:
    """A new source of ``size`` bytes copied to ``target.data``: the count returned and the
    target's bytes checked; the data."""
    source, data = _source(tmp_path, size)
    target = tmp_path / "target.data"
    assert copy_file(source, target) == size
    assert target.read_bytes() == data
    return data


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """The ranges the copy reports to its writeback, in order."""
    ranges: list[tuple[int, int]] = []
    real = copy_module.Writeback.wrote

    def wrote(self: Any, offset: int, length: int) -> None:
        ranges.append((offset, length))
        real(self, offset, length)

    monkeypatch.setattr(copy_module.Writeback, "wrote", wrote)
    return ranges


@pytest.fixture
def fsynced(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the files fsynced through ``os.fsync``."""
    sizes: list[int] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        sizes.append(os.fstat(fd).st_size)
        real(fd)

    monkeypatch.setattr(copy_module.os, "fsync", fsync)
    return sizes


def _whole(ranges: list[tuple[int, int]], size: int) -> bool:
    """Whether ``ranges`` follow each other from 0 to ``size`` without gap or overlap."""
    at = 0
    for offset, length in ranges:
        if offset != at or length <= 0:
            return False
        at += length
    return at == size


@pytest.mark.parametrize("size", [0, 1, 8 * MIB, 8 * MIB + 3, 19 * MIB + 4095])
def test_the_copy_is_the_source_started_and_fsynced(
    tmp_path: Path, size: int, started: list[tuple[int, int]], fsynced: list[int]
) -> None:
    _copied(tmp_path, size)
    assert _whole(started, size)
    assert fsynced == [size]  # the target, complete, before the copy returned


def test_the_kernel_copies_when_it_can(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not hasattr(os, "copy_file_range"):
        pytest.skip("this platform has no copy_file_range")
    calls: list[int] = []
    real = os.copy_file_range

    def counted(src: int, dst: int, count: int) -> int:
        calls.append(count)
        return real(src, dst, count)

    monkeypatch.setattr(copy_module.os, "copy_file_range", counted)
    source, data = _source(tmp_path, 17 * MIB)
    copy_file(source, tmp_path / "t")
    assert (tmp_path / "t").read_bytes() == data
    assert calls and max(calls) <= copy_module._CHUNK  # in chunks, the writeback's size


@pytest.mark.parametrize("refusal", [errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP])
@pytest.mark.parametrize("after", [0, 2])
def test_a_refusal_continues_through_the_buffer_where_the_kernel_stopped(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    started: list[tuple[int, int]],
    refusal: int,
    after: int,
) -> None:
    """``after`` kernel calls succeed, then the kernel refuses: the rest goes through the
    buffer from where it stopped, and the writeback ranges still cover the file once."""
    real = getattr(os, "copy_file_range", None)
    count = [0]

    def refusing(src: int, dst: int, n: int) -> int:
        count[0] += 1
        if count[0] > after or real is None:
            raise OSError(refusal, os.strerror(refusal))
        piece = min(n, 3 * MIB + 1)  # partial copies: the offsets move unevenly
        data = os.pread(src, piece, os.lseek(src, 0, os.SEEK_CUR))
        os.lseek(src, len(data), os.SEEK_CUR)
        return os.write(dst, data)

    monkeypatch.setattr(copy_module.os, "copy_file_range", refusing, raising=False)
    data = _copied(tmp_path, 11 * MIB + 5)
    assert _whole(started, len(data))


def test_an_early_end_of_the_kernel_copy_is_finished_through_the_buffer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, started: list[tuple[int, int]]
) -> None:
    """Some FUSE and pseudo files report the end (0 bytes) before their size."""
    calls = [0]

    def ends_early(src: int, dst: int, n: int) -> int:
        calls[0] += 1
        if calls[0] > 1:
            return 0
        data = os.read(src, MIB)
        return os.write(dst, data)

    monkeypatch.setattr(copy_module.os, "copy_file_range", ends_early, raising=False)
    data = _copied(tmp_path, 5 * MIB + 7)
    assert _whole(started, len(data))


def test_without_the_call_the_buffer_copies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(copy_module.os, "copy_file_range", raising=False)
    source, data = _source(tmp_path, 9 * MIB + 1)
    assert copy_file(source, tmp_path / "t") == len(data)
    assert (tmp_path / "t").read_bytes() == data


def test_a_failing_device_is_raised_not_hidden(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing(src: int, dst: int, n: int) -> int:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(copy_module.os, "copy_file_range", failing, raising=False)
    source, _ = _source(tmp_path, MIB)
    with pytest.raises(OSError, match="Input/output error"):
        copy_file(source, tmp_path / "t")


def test_the_targets_blocks_are_reserved_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[int, int, int]] = []

    def reserve(fd: int, offset: int, length: int) -> bool:
        calls.append((os.fstat(fd).st_size, offset, length))
        return False  # refused: the copy goes on all the same

    monkeypatch.setattr(copy_module, "reserve", reserve)
    size = 3 * MIB + 17
    _copied(tmp_path, size)
    assert calls == [(0, 0, size)]  # before any byte was copied, the whole length

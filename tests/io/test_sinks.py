"""Reads into the caller's buffers, several buffers as one stream, digests of stored bytes.

The checkpoint library writes a rank's protected arrays as one stream and restores them in
place; these tests check that path on the real disk, compressed and not, with block
boundaries that straddle arrays, and that the digest the worker reports is the digest of
exactly the bytes in the file.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from greenckpt.io import (
    BufferSink,
    Chunk,
    CodecSpec,
    ConcatSink,
    ConcatSource,
    IOJobError,
    run_chunks,
    worker,
)
from greenckpt.io.checksum import digest_bytes, file_digest
from greenckpt.io.worker import SINK_READ_BYTES

BS = 64 * 1024


def _arrays(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [
        rng.random(10_000),  # 80 000 B: blocks straddle it and the next
        np.arange(3 * 7 * 11, dtype=np.int32).reshape(3, 7, 11),
        np.zeros(0),  # empty arrays are legal protected data
        rng.integers(0, 255, 200_003, dtype=np.uint8),
    ]


@pytest.mark.parametrize("codec", [None, CodecSpec("zstd"), CodecSpec("lz4")])
@pytest.mark.parametrize("read_method", ["cached", "o_direct"])
def test_arrays_round_trip_in_place_with_digest(
    tmp_path: Path, codec: CodecSpec | None, read_method: str
) -> None:
    src = _arrays(1)
    total = sum(a.nbytes for a in src)
    path = tmp_path / "rank-000000.data"
    path.touch()
    (wr,) = run_chunks(
        "write",
        [[Chunk(str(path), 0, total, ConcatSource(src))]],
        block_size=BS,
        codec=codec,
        digest="xxh3_64",
    )
    assert wr.digests == (file_digest(path, "xxh3_64")[0],)  # digest of what is on disk
    dst = [np.empty_like(a) for a in src]
    (rd,) = run_chunks(
        "read",
        [[Chunk(str(path), 0, total, sink=ConcatSink(dst))]],
        block_size=BS,
        codec=codec,
        digest="xxh3_64",
        read_method=read_method,  # type: ignore[arg-type]
    )
    assert rd.digests == wr.digests
    for a, b in zip(src, dst, strict=True):
        np.testing.assert_array_equal(a, b)


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 300), min_size=1, max_size=6),
    block=st.integers(1, 64),
)
def test_concat_source_and_sink_are_inverse(sizes: list[int], block: int) -> None:
    """Any block size over any split: the stream is the concatenation, and scattering it
    back restores every buffer."""
    bufs = [bytes((i * 31 + j) % 251 for j in range(n)) for i, n in enumerate(sizes)]
    whole = b"".join(bufs)
    src = ConcatSource(bufs)
    src.prepare(len(whole), block)
    stream = b"".join(
        bytes(src.block(p, min(block, len(whole) - p))) for p in range(0, len(whole), block)
    )
    assert stream == whole
    outs = [bytearray(n) for n in sizes]
    sink = ConcatSink(outs, checksum="xxh3_64")
    for p in range(0, len(whole), block):
        piece = whole[p : p + block]
        view = sink.view(p, len(piece))
        if view is not None:
            view[:] = piece
        else:
            sink.put(p, piece)
        sink.filled(p, piece)
    assert [bytes(o) for o in outs] == bufs
    # each buffer's digest, computed block by block as the bytes landed
    assert sink.digests() == [digest_bytes("xxh3_64", b) for b in bufs]


def test_sink_digests_need_the_whole_stream_in_order() -> None:
    sink = ConcatSink([bytearray(4), bytearray(4)], checksum="crc32")
    sink.filled(0, b"abcd")
    with pytest.raises(ValueError, match="only 4 of 8 bytes were read"):
        sink.digests()
    with pytest.raises(ValueError, match="got the block at 6 while expecting 4"):
        sink.filled(6, b"gh")
    with pytest.raises(ValueError, match="computes no digests"):
        ConcatSink([bytearray(1)]).digests()


def test_sink_refuses_read_only_and_short_buffers(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="read-only"):
        BufferSink(b"immutable")
    with pytest.raises(ValueError, match="not C-contiguous"):
        ConcatSink([np.zeros((4, 4))[:, 1]])
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    with pytest.raises(IOJobError, match="BufferSink holds 10 bytes, chunk has 100"):
        run_chunks("read", [[Chunk(str(path), 0, 100, sink=BufferSink(bytearray(10)))]])


def test_crc32_digest_matches_the_file(tmp_path: Path) -> None:
    data = bytes(range(256)) * 1000
    path = tmp_path / "f"
    path.touch()
    (wr,) = run_chunks(
        "write", [[Chunk(str(path), 0, len(data), ConcatSource([data]))]], digest="crc32"
    )
    assert wr.digests == (digest_bytes("crc32", data),)


def test_reads_into_a_sink_use_cache_sized_requests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With 1 MiB blocks, a buffered read into the caller's buffers asks for at most
    SINK_READ_BYTES at a time (the piece is still in cache when the digest reads it) and
    still restores every byte, pieces straddling buffers included; a read with no sink keeps
    block-sized requests."""
    block = 1024 * 1024
    rng = np.random.default_rng(7)
    src = [rng.random(300_001), rng.integers(0, 255, 1_500_007, dtype=np.uint8)]
    total = sum(a.nbytes for a in src)
    path = tmp_path / "rank-000000.data"
    path.touch()
    run_chunks("write", [[Chunk(str(path), 0, total, ConcatSource(src))]], block_size=block)
    asked: list[int] = []
    real = os.preadv

    def counting(fd: int, buffers: list[memoryview], offset: int) -> int:
        asked.append(sum(len(b) for b in buffers))
        return real(fd, buffers, offset)

    monkeypatch.setattr(worker.os, "preadv", counting)
    dst = [np.empty_like(a) for a in src]
    (rd,) = run_chunks(
        "read",
        [[Chunk(str(path), 0, total, sink=ConcatSink(dst))]],
        block_size=block,
        digest="xxh3_64",
    )
    assert max(asked) == SINK_READ_BYTES and sum(asked) == total
    assert rd.digests == (file_digest(path, "xxh3_64")[0],)
    for a, b in zip(src, dst, strict=True):
        np.testing.assert_array_equal(a, b)
    asked.clear()
    run_chunks("read", [[Chunk(str(path), 0, total)]], block_size=block)
    assert max(asked) == block and sum(asked) == total

"""Compressed I/O: codec names, the frame format, and compressed jobs on the real disk.

What must hold: a compressed write read back gives the same logical bytes (CRC per chunk) for
every codec, in-process and with several workers; incompressible blocks are stored raw (never
grow by more than a header); the stored size is what is on disk; damaged or truncated streams
are reported, never returned as data; and a layout that cannot hold frames is refused first.
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from greenckpt.io import (
    BufferSource,
    Chunk,
    CodecError,
    CodecSpec,
    FieldSource,
    IOJobError,
    PatternSource,
    parse_codec,
    remove_files,
    run_chunks,
    run_io,
)
from greenckpt.io.codec import FRAME_HEADER, RAW_FLAG, BlockCodec

MiB = 1024 * 1024
BS = 256 * 1024


@pytest.mark.parametrize(
    ("text", "label"),
    [
        ("zstd", "zstd:3"),
        ("ZSTD:19", "zstd:19"),
        ("lz4", "lz4"),
        ("zlib", "zlib:6"),
        ("zlib:0", "zlib:0"),
        (" zstd:1 ", "zstd:1"),
    ],
)
def test_parse_codec_gives_canonical_labels(text: str, label: str) -> None:
    spec = parse_codec(text)
    assert spec is not None
    assert spec.label == label
    again = parse_codec(spec.label)  # the label round-trips
    assert again is not None and again.label == label


@pytest.mark.parametrize("text", [None, "none", "NONE", "off", ""])
def test_parse_codec_none_means_uncompressed(text: str | None) -> None:
    assert parse_codec(text) is None


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("gzip", "unknown codec 'gzip': use one of zstd, lz4, zlib"),
        ("zstd:0", "zstd level 0 is out of range: use 1 to 22"),
        ("zstd:23", "out of range"),
        ("zlib:x", "not a whole number: use zlib:0..zlib:9"),
        ("lz4:3", "codec lz4 takes no level"),
    ],
)
def test_parse_codec_refuses_bad_names_in_one_line(text: str, fragment: str) -> None:
    with pytest.raises(CodecError) as err:
        parse_codec(text)
    assert fragment in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("codec", ["zstd:3", "lz4", "zlib:6"])
@settings(max_examples=25, deadline=None)
@given(block=st.binary(min_size=1, max_size=4096))
def test_frame_round_trip_any_block(codec: str, block: bytes) -> None:
    spec = parse_codec(codec)
    assert spec is not None
    bc = BlockCodec(spec)
    header, payload = bc.encode(memoryview(block))
    stored, raw_len, raw = bc.decode_header(header, "test")
    assert raw_len == len(block)
    assert stored == len(payload)
    assert stored <= len(block)  # never grows beyond the header
    assert bytes(bc.decode_payload(memoryview(bytes(payload)), raw_len, raw, "test")) == block


def test_incompressible_block_is_stored_raw_and_compressible_one_shrinks() -> None:
    bc = BlockCodec(CodecSpec("zstd"))
    noise = os.urandom(64 * 1024)
    header, payload = bc.encode(memoryview(noise))
    assert FRAME_HEADER.unpack(header)[0] & RAW_FLAG
    assert bytes(payload) == noise
    header, payload = bc.encode(memoryview(bytes(64 * 1024)))
    assert not FRAME_HEADER.unpack(header)[0] & RAW_FLAG
    assert len(payload) < 1024


def test_field_data_compresses_like_simulation_state_and_random_does_not() -> None:
    """The two generated data kinds sit where documented: random ≈ 1.0, field 1.1–1.5."""
    field, noise = FieldSource(0, 0), PatternSource(0, 0)
    field.prepare(8 * MiB, MiB)
    noise.prepare(8 * MiB, MiB)
    bc = BlockCodec(CodecSpec("zstd"))

    def ratio(src: PatternSource) -> float:
        stored = 0
        for pos in range(0, 8 * MiB, MiB):
            header, payload = bc.encode(src.block(pos, MiB))
            stored += len(header) + len(payload)
        return 8 * MiB / stored

    assert 1.1 < ratio(field) < 1.5
    assert 0.99 < ratio(noise) <= 1.0


@pytest.mark.parametrize("codec", ["zstd:1", "lz4", "zlib:1"])
@pytest.mark.parametrize("workers", [1, 2])
def test_compressed_job_reads_back_what_it_wrote(tmp_path: Path, codec: str, workers: int) -> None:
    w = run_io(
        "write",
        tmp_path,
        total_bytes=6 * MiB + 12345,
        workers=workers,
        block_size=BS,
        keep=True,
        codec=codec,
        data="field",
        checksum=True,
    )
    r = run_io(
        "read",
        tmp_path,
        total_bytes=6 * MiB + 12345,
        workers=workers,
        block_size=BS,
        codec=codec,
        data="field",
        checksum=True,
    )
    remove_files(r.files)
    assert w.codec == r.codec == parse_codec(codec).label  # type: ignore[union-attr]
    assert [p.checksums for p in w.processes] == [p.checksums for p in r.processes]
    assert w.total_bytes == r.total_bytes == 6 * MiB + 12345
    # what the result calls stored is what is on disk, and field data did shrink
    assert w.stored_bytes == r.stored_bytes
    assert w.stored_bytes < w.total_bytes
    assert w.compression_ratio > 1.1


def test_compressed_sizes_on_disk_match_the_reports(tmp_path: Path) -> None:
    w = run_io(
        "write", tmp_path, total_bytes=4 * MiB, workers=2, block_size=BS, keep=True, codec="lz4"
    )
    on_disk = sum(os.path.getsize(f) for f in w.files)
    remove_files(w.files)
    assert on_disk == w.stored_bytes


def test_expected_crc_of_compressed_buffer_write(tmp_path: Path) -> None:
    """A caller's buffer (the checkpoint library's path) compressed in-process: the CRC the
    worker reports is that of the caller's logical bytes, and reading restores them."""
    data = bytes(range(256)) * 4096 + b"tail"
    path = tmp_path / "buf.z"
    path.touch()
    (wr,) = run_chunks(
        "write",
        [[Chunk(str(path), 0, len(data), BufferSource(data))]],
        block_size=BS,
        checksum=True,
        codec=CodecSpec("zstd"),
    )
    assert wr.checksums == (zlib.crc32(data),)
    assert wr.stored_bytes == path.stat().st_size < len(data)
    (rd,) = run_chunks(
        "read",
        [[Chunk(str(path), 0, len(data))]],
        block_size=BS,
        checksum=True,
        codec=CodecSpec("zstd"),
    )
    assert rd.checksums == wr.checksums
    assert rd.chunk_stored == wr.chunk_stored


def _write_compressed(tmp_path: Path) -> tuple[Path, int]:
    data = b"checkpoint " * 200_000
    path = tmp_path / "c.z"
    path.touch()
    run_chunks(
        "write",
        [[Chunk(str(path), 0, len(data), BufferSource(data))]],
        block_size=BS,
        codec=CodecSpec("zlib"),
    )
    return path, len(data)


def test_damaged_frame_is_reported_not_returned(tmp_path: Path) -> None:
    path, length = _write_compressed(tmp_path)
    raw = bytearray(path.read_bytes())
    raw[FRAME_HEADER.size + 5] ^= 0xFF  # inside the first zlib payload
    path.write_bytes(raw)
    with pytest.raises(IOJobError, match="corrupt compressed stream"):
        run_chunks("read", [[Chunk(str(path), 0, length)]], block_size=BS, codec=CodecSpec("zlib"))


def test_damaged_header_is_reported(tmp_path: Path) -> None:
    path, length = _write_compressed(tmp_path)
    raw = bytearray(path.read_bytes())
    raw[4:8] = (length * 4).to_bytes(4, "little")  # raw length beyond the chunk
    path.write_bytes(raw)
    with pytest.raises(IOJobError, match="corrupt compressed stream"):
        run_chunks("read", [[Chunk(str(path), 0, length)]], block_size=BS, codec=CodecSpec("zlib"))


def test_truncated_stream_is_reported(tmp_path: Path) -> None:
    path, length = _write_compressed(tmp_path)
    with path.open("r+b") as f:
        f.truncate(path.stat().st_size - 3)
    with pytest.raises(IOJobError, match="compressed stream ends"):
        run_chunks("read", [[Chunk(str(path), 0, length)]], block_size=BS, codec=CodecSpec("zlib"))


def test_codec_with_shared_file_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="a codec needs layout file_per_process"):
        run_io(
            "write",
            tmp_path,
            total_bytes=2 * MiB,
            workers=2,
            block_size=BS,
            layout="shared_file",
            codec="zstd",
        )
    assert list(tmp_path.iterdir()) == []


def test_unknown_codec_and_data_kind_are_refused(tmp_path: Path) -> None:
    with pytest.raises(CodecError, match="unknown codec"):
        run_io("write", tmp_path, total_bytes=MiB, block_size=BS, codec="brotli")
    with pytest.raises(ValueError, match="data must be one of random, field"):
        run_io("write", tmp_path, total_bytes=MiB, block_size=BS, data="zeros")  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []

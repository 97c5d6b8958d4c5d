"""Checksums: known values, streaming equals one-shot, zero-copy buffers, files, bad names."""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import xxhash
from hypothesis import given
from hypothesis import strategies as st

from greenckpt.io.checksum import (
    CHECKSUMS,
    DEFAULT_CHECKSUM,
    ChecksumError,
    check_checksum_name,
    digest_bytes,
    digest_hex_length,
    file_digest,
    new_hasher,
)


def test_names_and_default() -> None:
    assert CHECKSUMS == ("xxh3_64", "crc32")
    assert DEFAULT_CHECKSUM == "xxh3_64"
    assert new_hasher().name == "xxh3_64"
    assert new_hasher("crc32").name == "crc32"


def test_crc32_check_value() -> None:
    # The standard CRC-32 check value.
    assert digest_bytes("crc32", b"123456789") == "cbf43926"


def test_crc32_of_nothing_is_zero_padded() -> None:
    assert digest_bytes("crc32", b"") == "00000000"


@pytest.mark.parametrize("data", [b"", b"a", b"123456789", bytes(range(256)) * 1000])
def test_xxh3_matches_xxhash(data: bytes) -> None:
    assert digest_bytes("xxh3_64", data) == xxhash.xxh3_64_hexdigest(data)


@pytest.mark.parametrize("name", CHECKSUMS)
def test_digest_has_fixed_hex_length(name: str) -> None:
    for data in (b"", b"\x00", b"x" * 1000):
        d = digest_bytes(name, data)
        assert len(d) == digest_hex_length(name)
        assert d == d.lower()
        int(d, 16)


@pytest.mark.parametrize("name", CHECKSUMS)
@given(data=st.binary(max_size=4096), cuts=st.lists(st.integers(0, 4096), max_size=8))
def test_streaming_equals_one_shot(name: str, data: bytes, cuts: list[int]) -> None:
    bounds = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    hasher = new_hasher(name)
    view = memoryview(data)
    for lo, hi in itertools.pairwise(bounds):
        hasher.update(view[lo:hi])
    assert hasher.hexdigest() == digest_bytes(name, data)


@pytest.mark.parametrize("name", CHECKSUMS)
def test_hexdigest_does_not_reset(name: str) -> None:
    hasher = new_hasher(name)
    hasher.update(b"abc")
    first = hasher.hexdigest()
    assert hasher.hexdigest() == first
    hasher.update(b"def")
    assert hasher.hexdigest() == digest_bytes(name, b"abcdef")


@pytest.mark.parametrize("name", CHECKSUMS)
@pytest.mark.parametrize(
    "array",
    [
        np.arange(1000, dtype="<f8"),
        np.arange(24, dtype="<i4").reshape(2, 3, 4),
        np.zeros((0, 5), dtype="<f4"),
        np.array(7, dtype="<u2"),
    ],
)
def test_numpy_arrays_hash_their_bytes(name: str, array: np.ndarray) -> None:
    assert digest_bytes(name, array) == digest_bytes(name, array.tobytes())
    hasher = new_hasher(name)
    hasher.update(array)
    assert hasher.hexdigest() == digest_bytes(name, array.tobytes())


@pytest.mark.parametrize("name", CHECKSUMS)
def test_non_contiguous_array_is_refused(name: str) -> None:
    a = np.arange(20.0).reshape(4, 5)
    with pytest.raises(ValueError, match=r"non-C-contiguous.*ascontiguousarray"):
        digest_bytes(name, a[:, ::2])
    with pytest.raises(ValueError, match="non-C-contiguous"):
        digest_bytes(name, np.asfortranarray(a))


@pytest.mark.parametrize("name", CHECKSUMS)
@pytest.mark.parametrize("size", [0, 1, 1000, 10_000])
@pytest.mark.parametrize("block_size", [1, 7, 4096, 4 * 1024 * 1024])
def test_file_digest(tmp_path: Path, name: str, size: int, block_size: int) -> None:
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    path = tmp_path / "f.dat"
    path.write_bytes(data)
    assert file_digest(path, name, block_size=block_size) == (digest_bytes(name, data), size)


def test_file_digest_default_is_xxh3(tmp_path: Path) -> None:
    path = tmp_path / "f.dat"
    path.write_bytes(b"hello")
    assert file_digest(path) == (xxhash.xxh3_64_hexdigest(b"hello"), 5)
    assert file_digest(str(path), "crc32") == (f"{zlib.crc32(b'hello'):08x}", 5)


def test_file_digest_rejects_bad_block_size(tmp_path: Path) -> None:
    path = tmp_path / "f.dat"
    path.write_bytes(b"x")
    with pytest.raises(ValueError, match="block_size must be >= 1"):
        file_digest(path, block_size=0)


def test_file_digest_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        file_digest(tmp_path / "absent")


@pytest.mark.parametrize(
    "call",
    [
        lambda: new_hasher("sha1"),
        lambda: digest_bytes("md5", b""),
        lambda: digest_hex_length("XXH3_64"),
        lambda: check_checksum_name(""),
    ],
)
def test_unknown_name(call: Callable[[], object]) -> None:
    with pytest.raises(ChecksumError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message
    assert "unknown checksum" in message
    assert "expected one of xxh3_64, crc32" in message


def test_unknown_name_in_file_digest(tmp_path: Path) -> None:
    path = tmp_path / "f.dat"
    path.write_bytes(b"x")
    with pytest.raises(ChecksumError, match="'sha256'"):
        file_digest(path, "sha256")
    assert issubclass(ChecksumError, ValueError)

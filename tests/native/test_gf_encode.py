"""libgreenckpt_gf's one-pass encoder (``gce_encode``) writes zfec's parity byte for byte.

Why these cases: the kernel keeps up to six parity rows in registers and works in 32-byte
vectors over stretches where the same inputs are present, so what can go wrong is at the
edges: lengths around the vector (0, 1, 31, 32, 33) and the chunk (4095, 1 MiB + 7), inputs
shorter than the output (zero beyond), up to and past the rows one pass holds (m = 5, 6,
7), a single row of ones (k = 1: the XOR loop) and one that is not (5 + 1), pointers that are
not aligned, and outputs that are not zeroed first (filled with garbage here, so a byte the
kernel skips shows). Both the AVX2 loop and the portable one."""

from __future__ import annotations

import random
from collections.abc import Iterator

import numpy as np
import pytest
import zfec

from greenckpt.ckpt.redundancy.erasure import _ONE, ErasureCode, _row_tables
from greenckpt.errors import InvalidValueError
from greenckpt.native import gf
from tests.ckpt.test_erasure_native import _built

pytestmark = pytest.mark.skipif(not _built(), reason="libgreenckpt_gf not built (no cc)")

LENGTHS = (0, 1, 31, 32, 33, 4095, (1 << 20) + 7)
CODES = ((1, 1), (5, 1), (1, 2), (2, 2), (4, 2), (8, 2), (8, 4), (3, 5), (10, 6), (5, 7))


@pytest.fixture(params=["avx2", "portable"])
def loop(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "avx2" and gf.simd() != "avx2":
        pytest.skip("this CPU has no AVX2")
    gf.force_portable(request.param == "portable")
    yield request.param
    gf.force_portable(False)


def _pieces(rng: random.Random, lengths: list[int]) -> list[np.ndarray]:
    """Random pieces, each at an odd offset of its own buffer (unaligned pointers)."""
    out = []
    for n in lengths:
        skew = rng.randrange(1, 32)
        buffer = np.frombuffer(rng.randbytes(n + skew), dtype=np.uint8)
        out.append(buffer[skew:])
    return out


def _zfec(k: int, m: int, pieces: list[np.ndarray], length: int) -> list[bytes]:
    padded = [p.tobytes() + bytes(length - len(p)) for p in pieces]
    return list(zfec.Encoder(k, k + m).encode(padded, tuple(range(k, k + m))))


def _encode(
    k: int, m: int, pieces: list[np.ndarray], length: int, out: list[bytearray] | None = None
) -> list[bytes]:
    tables = _row_tables(k, k + m, tuple(range(k, k + m)))
    made = gf.encode(
        [p.ctypes.data for p in pieces], [len(p) for p in pieces], tables, m, length, out
    )
    return [bytes(o) for o in made]


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize(("k", "m"), CODES)
def test_parity_is_zfecs(k: int, m: int, length: int, loop: str) -> None:
    rng = random.Random(f"{k}+{m}/{length}/{loop}")
    pieces = _pieces(rng, [length] * k)
    assert _encode(k, m, pieces, length) == _zfec(k, m, pieces, length)


@pytest.mark.parametrize(("k", "m"), CODES)
def test_shorter_inputs_count_as_zero(k: int, m: int, loop: str) -> None:
    rng = random.Random(f"{k}+{m}/uneven/{loop}")
    length = (1 << 20) + 7
    lengths = [rng.choice([0, 1, 31, 32, 33, 4095, 70_001, length - 1]) for _ in range(k)]
    pieces = _pieces(rng, lengths)
    assert _encode(k, m, pieces, length) == _zfec(k, m, pieces, length)
    # Longer than every input: the parity's end is zero.
    longer = length + 100
    assert _encode(k, m, pieces, longer) == _zfec(k, m, pieces, longer)


@pytest.mark.parametrize("length", [33, 4095, (4 << 20) + 3])
def test_outputs_given_are_overwritten_whole(length: int, loop: str) -> None:
    """Outputs full of garbage come back as the parity: no byte relies on a zeroing pass
    (4 MiB + 3: the size from which the outputs are asked for huge pages)."""
    k, m = 6, 3
    rng = random.Random(length)
    pieces = _pieces(rng, [length, length - 1, length, 7, length, 0])
    given = [bytearray(b"\xa5" * length) for _ in range(m)]
    made = _encode(k, m, pieces, length, given)
    assert made == _zfec(k, m, pieces, length)
    assert [bytes(o) for o in given] == made


def test_an_output_may_be_any_writable_buffer() -> None:
    k, m, length = 4, 2, 1000
    pieces = _pieces(random.Random(3), [length] * k)
    backing = np.full(m * length + 1, 0x5A, dtype=np.uint8)
    views = [memoryview(backing[1 + r * length : 1 + (r + 1) * length]) for r in range(m)]
    tables = _row_tables(k, k + m, tuple(range(k, k + m)))
    gf.encode([p.ctypes.data for p in pieces], [length] * k, tables, m, length, views)
    assert [bytes(v) for v in views] == _zfec(k, m, pieces, length)
    assert backing[0] == 0x5A  # nothing written before the first output


def test_xor_of_more_than_256_inputs(loop: str) -> None:
    """The XOR scheme has no 256-piece limit (k = 300); its tables are coefficient 1's."""
    rng = random.Random(300)
    lengths = [rng.choice([0, 5, 64, 1000, 1001]) for _ in range(300)]
    pieces = _pieces(rng, lengths)
    expected = np.zeros(1001, dtype=np.uint8)
    for p in pieces:
        expected[: len(p)] ^= p
    (made,) = gf.encode([p.ctypes.data for p in pieces], lengths, _ONE * 300, 1, 1001)
    assert bytes(made) == expected.tobytes()
    assert ErasureCode(300).encode([p.tobytes() for p in pieces]) == [expected.tobytes()]


def test_wrong_arguments_are_refused() -> None:
    piece = np.zeros(10, dtype=np.uint8)
    tables = _row_tables(2, 4, (2, 3))
    address = piece.ctypes.data
    with pytest.raises(InvalidValueError, match="longer than the output"):
        gf.encode([address, address], [10, 10], tables, 2, 9)
    with pytest.raises(InvalidValueError, match="table bytes"):
        gf.encode([address, address], [10, 10], tables[:-1], 2, 10)
    with pytest.raises(InvalidValueError, match="2 output buffers"):
        gf.encode([address, address], [10, 10], tables, 2, 10, [bytearray(10)])
    with pytest.raises(InvalidValueError, match="writable"):
        gf.encode([address, address], [10, 10], tables, 2, 10, [memoryview(bytes(10))] * 2)
    with pytest.raises(InvalidValueError, match="10 bytes"):
        gf.encode([address, address], [10, 10], tables, 2, 10, [bytearray(10), bytearray(9)])

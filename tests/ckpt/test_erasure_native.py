"""Level 3's native parity encoder (libgreenckpt_gf) writes zfec's parity byte for byte.

Codes of every shape the layouts use (XOR and Reed–Solomon, k and m from 1 to 6), pieces of
uneven lengths (shorter ones count as zero-padded) and lengths that are not multiples of the
32-byte vector, with the AVX2 loop and with the portable one; and the parity decodes."""

from __future__ import annotations

import random
from collections.abc import Iterator

import numpy as np
import pytest
import zfec

from greenckpt.ckpt.redundancy import erasure
from greenckpt.ckpt.redundancy.erasure import ErasureCode
from greenckpt.native import BuildError, gf, library_dir


def _built() -> bool:
    """Build the libraries as ``greenckpt config`` does (an encode never builds them)."""
    try:
        library_dir()
    except BuildError:
        return False
    gf._library.cache_clear()
    return gf.available()


pytestmark = pytest.mark.skipif(not _built(), reason="libgreenckpt_gf not built (no cc)")


@pytest.fixture(params=["simd", "portable"])
def loop(request: pytest.FixtureRequest) -> Iterator[str]:
    gf.force_portable(request.param == "portable")
    yield request.param
    gf.force_portable(False)


def _zfec_parity(k: int, m: int, pieces: list[bytes]) -> list[bytes]:
    length = max(len(p) for p in pieces)
    padded = [p + bytes(length - len(p)) for p in pieces]
    if m == 1 and k >= 1:  # XOR by hand: the scheme xor is not zfec's
        acc = np.zeros(length, dtype=np.uint8)
        for p in padded:
            acc ^= np.frombuffer(p, dtype=np.uint8)
        return [acc.tobytes()]
    return list(zfec.Encoder(k, k + m).encode(padded, tuple(range(k, k + m))))


@pytest.mark.parametrize(("k", "m"), [(1, 1), (3, 1), (2, 2), (4, 2), (3, 3), (6, 2), (5, 6)])
def test_native_parity_is_zfecs(k: int, m: int, loop: str) -> None:
    rng = random.Random(k * 100 + m)
    lengths = [rng.choice([0, 1, 31, 33, 4096, 70_001, 131_072]) for _ in range(k)]
    lengths[0] = 131_073  # longer than one 64 KiB block, not a multiple of 32
    pieces = [rng.randbytes(n) for n in lengths]
    code = ErasureCode(k, m, "xor" if m == 1 else "reed-solomon")
    assert code.encode(pieces) == _zfec_parity(k, m, pieces)
    for j in range(m):
        assert code.encode(pieces, only=j) == [_zfec_parity(k, m, pieces)[j]]


def test_native_parity_decodes_and_matches_the_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(7)
    pieces = [rng.randbytes(50_000), rng.randbytes(49_999), rng.randbytes(12)]
    code = ErasureCode(3, 2, "reed-solomon")
    native = code.encode(pieces)
    monkeypatch.setattr(erasure.native_gf, "available", lambda: False)
    assert code.encode(pieces) == native  # zfec's own path
    present = {1: pieces[1], 3: native[0], 4: native[1]}  # two data pieces lost
    assert code.decode(present, [len(p) for p in pieces]) == pieces


def test_the_simd_loop_is_used_where_the_cpu_has_it() -> None:
    flags = open("/proc/cpuinfo").read().split()  # noqa: SIM115 - one read
    assert gf.simd() == ("avx2" if "avx2" in flags else "portable")

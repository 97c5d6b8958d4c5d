"""``ConcatSource(checksum=)`` hashes each block as it is served: every buffer's digest and the
whole stream's, equal to hashing them apart, whatever the block size (blocks straddling
buffers, empty buffers); blocks asked for out of order are refused."""

from __future__ import annotations

import pytest

from greenckpt.io import ConcatSource
from greenckpt.io.checksum import digest_bytes


@pytest.mark.parametrize("checksum", ["xxh3_64", "crc32"])
@pytest.mark.parametrize("block", [1, 7, 64, 1000, 5000])
def test_digests_equal_hashing_each_buffer_and_the_stream_apart(checksum: str, block: int) -> None:
    buffers = [bytes(range(256)) * 9, b"", bytes(reversed(range(200))), b"x" * 333, b""]
    source = ConcatSource(buffers, checksum=checksum)
    served = bytearray()
    for pos in range(0, source.length, block):
        served += source.block(pos, min(block, source.length - pos))
    own, stream = source.digests()
    assert bytes(served) == b"".join(buffers)
    assert own == [digest_bytes(checksum, b) for b in buffers]
    assert stream == digest_bytes(checksum, b"".join(buffers))


def test_blocks_out_of_order_or_unfinished_are_refused() -> None:
    source = ConcatSource([b"a" * 100], checksum="xxh3_64")
    source.block(0, 10)
    with pytest.raises(ValueError, match="only 10 of 100 bytes were served"):
        source.digests()
    with pytest.raises(ValueError, match="asked for the block at 50 while expecting 10"):
        source.block(50, 10)
    with pytest.raises(ValueError, match="computes no digests"):
        ConcatSource([b"a"]).digests()

"""The manifest entries a rank's protected data produce: offsets and digests.

The checkpoint compares the stream digest with the data file's digest and recovery checks
every variable's digest, so each must be the digest of exactly its own bytes, whichever
variable shares its hashing with the stream.
"""

from __future__ import annotations

import numpy as np
import pytest

from greenckpt.ckpt.protect import STATE_NAME, Protected
from greenckpt.io.checksum import CHECKSUMS, digest_bytes


@pytest.mark.parametrize("checksum", CHECKSUMS)
@pytest.mark.parametrize("sizes", [(700_001, 3), (0, 5_000), (300_000,)])
def test_every_digest_is_of_its_own_bytes(checksum: str, sizes: tuple[int, ...]) -> None:
    rng = np.random.default_rng(sum(sizes))
    protected = Protected()
    for i, n in enumerate(sizes):
        protected.add(f"v{i}", rng.integers(0, 255, n, dtype=np.uint8))
    protected.state["it"] = 17
    slots = protected.slots(for_write=True)
    variables, stream = protected.variables(slots, checksum)
    views = [bytes(s.view) for s in slots]
    assert [v.name for v in variables] == [*(f"v{i}" for i in range(len(sizes))), STATE_NAME]
    assert [v.digest for v in variables] == [digest_bytes(checksum, b) for b in views]
    assert [v.offset for v in variables] == list(np.cumsum([0] + [len(b) for b in views[:-1]]))
    assert stream == digest_bytes(checksum, b"".join(views))

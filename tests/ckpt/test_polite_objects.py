"""Object collectives completed politely (greenckpt.ckpt.polite_objects): the frames, the slot
size per communicator size, and allgather / bcast / gather under ``mpiexec -n 4`` with small
objects, objects longer than the first collective carries, and both mixed."""

from __future__ import annotations

import pickle
import textwrap
from pathlib import Path

import pytest

from greenckpt.ckpt.comm import find_mpiexec
from greenckpt.ckpt.polite_objects import (
    FIRST_ROUND_BYTES,
    MAX_SLOT,
    MIN_SLOT,
    frame,
    lengths,
    slot_bytes,
    unframe,
)
from tests.ckpt.mpi_script import run_ranks


def test_the_slot_shrinks_with_the_communicator_within_its_bounds() -> None:
    assert slot_bytes(1) == slot_bytes(4) == MAX_SLOT
    assert slot_bytes(10**6) == MIN_SLOT
    mid = 8192
    assert MIN_SLOT < slot_bytes(mid) < MAX_SLOT
    assert (slot_bytes(mid) + 8) * mid <= FIRST_ROUND_BYTES


def test_frames_carry_the_length_and_the_head() -> None:
    objs = [None, "x" * 10, {"a": list(range(300))}, b"\0" * 70]
    pickles = [pickle.dumps(o, protocol=pickle.HIGHEST_PROTOCOL) for o in objs]
    slot = 64
    frames = bytearray().join(frame(p, slot) for p in pickles)
    assert len(frames) == (8 + slot) * len(objs)
    assert lengths(frames, slot) == [len(p) for p in pickles]
    rests = b"".join(p[slot:] for p in pickles)  # the second collective's bytes, in rank order
    assert unframe(frames, slot, rests) == objs


SCRIPT = textwrap.dedent(
    """
    import json, sys
    from mpi4py import MPI
    from greenckpt.ckpt.comm import MPIComm
    from greenckpt.ckpt.polite_objects import MAX_SLOT

    comm = MPIComm()
    me, n = comm.rank, comm.size
    big = "y" * (3 * MAX_SLOT)

    def obj(rank, long):
        return {"rank": rank, "tail": big + str(rank) if long else None}

    checks = {}
    for case, long in (("small", set()), ("one long", {2}), ("all long", set(range(n)))):
        got = comm.allgather(obj(me, me in long))
        checks["allgather " + case] = got == [obj(r, r in long) for r in range(n)]
        for root in (0, n - 1):
            got = comm.gather(obj(me, me in long), root)
            want = [obj(r, r in long) for r in range(n)] if me == root else None
            checks[f"gather {case} to {root}"] = got == want
            got = comm.bcast(obj(me, root in long), root)
            checks[f"bcast {case} from {root}"] = got == obj(root, root in long)
    checks["allgather empty"] = comm.allgather(None) == [None] * n
    everyone = MPI.COMM_WORLD.gather(checks, root=0)
    if me == 0:
        print(json.dumps(everyone))
    """
)


@pytest.mark.skipif(find_mpiexec() is None, reason="no mpiexec: pip install '.[mpi]'")
def test_object_collectives_under_mpi(tmp_path: Path) -> None:
    everyone = run_ranks(tmp_path, SCRIPT)
    assert len(everyone) == 4
    for rank, checks in enumerate(everyone):
        assert len(checks) == 16
        assert all(checks.values()), f"rank {rank}: {checks}"

"""The bulk exchanges of levels 2 and 3 (``sendrecv_into``, ``alltoall_into``): one process,
and four MPI ranks with pieces of every size, missing pieces (-1) and empty ones."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from greenckpt.ckpt.comm import SelfComm, find_mpiexec
from greenckpt.errors import InvalidValueError
from tests.ckpt.mpi_script import run_ranks


def test_self_sendrecv_into_copies_into_the_start_of_the_buffer() -> None:
    out = bytearray(b"x" * 8)
    assert SelfComm().sendrecv_into(memoryview(b"abc"), 0, out, 0) == 3
    assert out == b"abcxxxxx"
    with pytest.raises(InvalidValueError, match="do not fit"):
        SelfComm().sendrecv_into(b"123456789", 0, out, 0)
    with pytest.raises(InvalidValueError, match="only exchange data with itself"):
        SelfComm().sendrecv_into(b"1", 1, out, 0)


def test_self_alltoall_into_gives_its_own_piece_back() -> None:
    recv = bytearray(4)
    assert SelfComm().alltoall_into(bytearray(b"hi.."), [2], recv) == [2]
    assert recv[:2] == b"hi"
    assert SelfComm().alltoall_into(bytearray(4), [-1], recv) == [-1]  # no piece: said so
    recv = bytearray(4)
    assert SelfComm().alltoall_into(memoryview(b"..hi"), [2], recv, [2]) == [2]
    assert recv[:2] == b"hi"  # from where it lies


# Rank r sends rank d the bytes of (r, d) repeated r + d times (-1, nothing, when r + d == 3;
# b"" when r == d == 0), and a shifted copy of 5 MiB to rank r + 1 by sendrecv_into.
SCRIPT = textwrap.dedent(
    """
    import json, sys
    from greenckpt.ckpt.comm import world
    comm = world()
    me, n = comm.rank, comm.size

    def piece(r, d):
        return None if r + d == 3 else bytes([r, d]) * (r + d)

    send, counts, at = bytearray(64), [], 0
    for d in range(n):
        p = piece(me, d)
        counts.append(-1 if p is None else len(p))
        if p is not None:
            send[at : at + len(p)] = p
            at += len(p)
    recv = bytearray(64)
    got = comm.alltoall_into(send, counts, recv)
    ok, at = True, 0
    for r in range(n):
        want = piece(r, me)
        if want is None:
            ok = ok and got[r] == -1
            continue
        ok = ok and got[r] == len(want) and bytes(recv[at : at + got[r]]) == want
        at += max(got[r], 0)
    # the same pieces sent from where they lie in a larger buffer (displacements, no packing)
    spread, displs = bytearray(256), []
    for d in range(n):
        p, at = piece(me, d), 200 - 40 * d  # out of order, with gaps
        displs.append(at)
        if p is not None:
            spread[at : at + len(p)] = p
    again = bytearray(64)
    ok = ok and comm.alltoall_into(memoryview(spread), counts, again, displs) == got
    ok = ok and again == recv
    big = bytes([me]) * (5 << 20)
    out = bytearray(6 << 20)
    count = comm.sendrecv_into(big, (me + 1) % n, out, (me - 1) % n)
    ok = ok and count == 5 << 20 and out[:count] == bytes([(me - 1) % n]) * count
    # a receive buffer too small on rank 1 only: rank 1 is refused, every rank's exchange
    # completes (nobody is left waiting), and the next collectives run on every rank
    from greenckpt.errors import InvalidValueError
    small = bytearray(3 if me == 1 else 64)
    try:
        comm.alltoall_into(send, counts, small)
        refused = False
    except InvalidValueError:
        refused = True
    ok = ok and refused == (me == 1)
    try:
        comm.sendrecv_into(big, (me + 1) % n, bytearray(10 if me == 1 else 6 << 20), (me - 1) % n)
        refused = False
    except InvalidValueError:
        refused = True
    ok = ok and refused == (me == 1)
    ok = ok and comm.alltoall_into(send, counts, again) == got and again == recv
    oks = comm.allgather(ok)
    if me == 0:
        print(json.dumps(oks))
    """
)


@pytest.mark.skipif(find_mpiexec() is None, reason="no mpiexec: pip install '.[mpi]'")
def test_bulk_exchanges_under_mpi(tmp_path: Path) -> None:
    assert run_ranks(tmp_path, SCRIPT) == [True] * 4

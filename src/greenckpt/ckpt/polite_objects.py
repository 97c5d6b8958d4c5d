"""Object collectives (allgather, bcast, gather) in which no rank spins: nonblocking MPI
collectives of pickled bytes, each completed politely (:mod:`greenckpt.ckpt.wait`).

Why not a polite barrier followed by mpi4py's ``allgather`` (what :class:`MPIComm` did until
2026-12): MPICH busy-polls inside every blocking collective, and the barrier's end reaches
the ranks at different times — each notices it at its next poll, after a pause of up to 1 ms —
so on a node with more ranks than cores the first ranks out spun in the blocking ``allgather``
until the scheduler ran the others. The library agrees three times per checkpoint; a profile
of 4 ranks on 2 cores put 1.4–2.3 ms of CPU per rank and checkpoint in that spin. Here every
wait is a test-and-sleep of a nonblocking request, and one collective does the work of the
barrier and of the exchange: the ranks meet in it.

How: an object is pickled, and the first collective carries, for every rank, a fixed-size
frame — the length of its pickle and its first :func:`slot_bytes` bytes. Small objects (flags,
ids, errors, most manifest entries) are then complete after one collective. Only where some
rank's pickle is longer (every rank reads every length from the frames, so all take the same
branch) a second collective moves the rest of the long ones (``Iallgatherv`` / ``Ibcast``). A
gather's non-root ranks cannot see the others' lengths, so a gather is always two collectives
(the lengths, then ``Igatherv``), the shape of mpi4py's own. The frame shrinks as the
communicator grows (:data:`FIRST_ROUND_BYTES` in all), so a job of a hundred thousand ranks
moves no more in the first collective than a few MiB.
"""

from __future__ import annotations

import pickle
import struct
from collections.abc import Sequence
from typing import Any, TypeVar

from greenckpt.ckpt.wait import complete

__all__ = [
    "FIRST_ROUND_BYTES",
    "MAX_SLOT",
    "MIN_SLOT",
    "MPIRequest",
    "allgather",
    "bcast",
    "gather",
    "offsets",
    "slot_bytes",
]

T = TypeVar("T")

_LENGTH = struct.Struct("<q")
MIN_SLOT = 56
"""Bytes of a pickle carried in the first collective, at the least (a frame of 64 bytes)."""
MAX_SLOT = 1016
"""... and at the most (a frame of 1 KiB): a manifest entry of a rank with a few variables."""
FIRST_ROUND_BYTES = 4 << 20
"""The frames of all ranks together, where the communicator is large enough to reach it."""


def slot_bytes(size: int) -> int:
    """Bytes of each rank's pickle that ride in the first collective of ``size`` ranks."""
    per_rank = FIRST_ROUND_BYTES // max(size, 1) - _LENGTH.size
    return max(MIN_SLOT, min(MAX_SLOT, per_rank))


def frame(data: bytes, slot: int) -> bytearray:
    """``data``'s length, then its first ``slot`` bytes, zero-padded to ``8 + slot`` bytes."""
    out = bytearray(_LENGTH.size + slot)
    _LENGTH.pack_into(out, 0, len(data))
    head = data[:slot]
    out[_LENGTH.size : _LENGTH.size + len(head)] = head
    return out


def lengths(frames: bytes | bytearray, slot: int) -> list[int]:
    """The pickle lengths recorded in consecutive frames of ``slot`` bytes each."""
    step = _LENGTH.size + slot
    return [_LENGTH.unpack_from(frames, at)[0] for at in range(0, len(frames), step)]


def unframe(frames: bytearray, slot: int, rests: bytes | bytearray = b"") -> list[Any]:
    """The objects whose frames lie one after the other in ``frames``, the part of each pickle
    beyond ``slot`` taken in turn from ``rests``."""
    step, out, at = _LENGTH.size + slot, [], 0
    view = memoryview(frames)
    for i, n in enumerate(lengths(frames, slot)):
        head = view[i * step + _LENGTH.size : i * step + _LENGTH.size + min(n, slot)]
        if n <= slot:
            out.append(pickle.loads(head))
        else:
            out.append(pickle.loads(bytes(head) + rests[at : at + n - slot]))
            at += n - slot
    return out


def _dumps(obj: object) -> bytes:
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


class MPIRequest:
    """An mpi4py ``Request`` seen as :func:`complete` expects (``test`` -> (done, None))."""

    def __init__(self, request: Any) -> None:
        self._request = request

    def test(self) -> tuple[bool, None]:
        return bool(self._request.Test()), None

    def wait(self) -> None:
        self._request.Wait()


def offsets(counts: Sequence[int]) -> list[int]:
    """Where each of ``counts`` starts when packed one after the other."""
    out, at = [], 0
    for n in counts:
        out.append(at)
        at += n
    return out


def allgather(comm: Any, obj: T) -> list[T]:
    """Every rank's ``obj`` on every rank, in rank order (``comm``: an mpi4py intracomm)."""
    from mpi4py import MPI  # noqa: PLC0415 - MPI only when the job runs under it

    size = comm.Get_size()
    slot = slot_bytes(size)
    data = _dumps(obj)
    frames = bytearray((_LENGTH.size + slot) * size)
    complete(MPIRequest(comm.Iallgather([frame(data, slot), MPI.BYTE], [frames, MPI.BYTE])))
    beyond = [max(0, n - slot) for n in lengths(frames, slot)]
    rests = bytearray(sum(beyond))
    if rests:  # every rank read the same lengths: all of them are here
        mine = bytearray(data[slot:])
        complete(
            MPIRequest(
                comm.Iallgatherv(
                    [mine, len(mine), MPI.BYTE],
                    [rests, (beyond, offsets(beyond)), MPI.BYTE],
                )
            )
        )
    return unframe(frames, slot, rests)


def bcast(comm: Any, obj: T, root: int = 0) -> T:
    """``root``'s ``obj`` on every rank."""
    from mpi4py import MPI  # noqa: PLC0415 - see allgather

    slot = MAX_SLOT
    data = _dumps(obj) if comm.Get_rank() == root else b""
    head = frame(data, slot) if data else bytearray(_LENGTH.size + slot)
    complete(MPIRequest(comm.Ibcast([head, MPI.BYTE], root=root)))
    (n,) = lengths(head, slot)
    rest = bytearray(data[slot:]) if data else bytearray(max(0, n - slot))
    if rest:
        complete(MPIRequest(comm.Ibcast([rest, MPI.BYTE], root=root)))
    result: T = unframe(head, slot, rest)[0]
    return result


def gather(comm: Any, obj: T, root: int) -> list[T] | None:
    """Every rank's ``obj`` on ``root`` (in rank order); None on the other ranks."""
    from mpi4py import MPI  # noqa: PLC0415 - see allgather

    size, me = comm.Get_size(), comm.Get_rank()
    data = _dumps(obj)
    mine = bytearray(_LENGTH.pack(len(data)))
    every = bytearray(_LENGTH.size * size if me == root else 0)
    complete(MPIRequest(comm.Igather([mine, MPI.BYTE], [every, MPI.BYTE], root=root)))
    counts = lengths(every, 0) if me == root else []
    got = bytearray(sum(counts))
    receive = [got, (counts, offsets(counts)), MPI.BYTE] if me == root else None
    complete(MPIRequest(comm.Igatherv([bytearray(data), len(data), MPI.BYTE], receive, root=root)))
    if me != root:
        return None
    view = memoryview(got)
    return [pickle.loads(view[at : at + n]) for at, n in zip(offsets(counts), counts, strict=True)]

"""``ThreadComm``: a job of several ranks in one process, one thread per rank (SYNTHETIC).

Why: a level whose redundancy lives on other nodes (a partner copy, an erasure group) cannot be
checkpointed by one rank, and its contract (:mod:`greenckpt.testing.levels`) should run inside
pytest, without ``mpiexec``. :func:`run_ranks` runs a function on ``n`` ranks, each its own
thread holding a :class:`ThreadComm`; every collective of
:class:`~greenckpt.ckpt.comm.Comm` meets at a barrier, so the ranks step through the same
collectives as MPI ranks would. A rank that raises breaks the barriers, so the others raise too
instead of waiting for it, and :func:`run_ranks` re-raises the first rank's exception.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from greenckpt.ckpt.comm import BytesLike, Comm, Writable
from greenckpt.errors import InvalidValueError

__all__ = ["ThreadComm", "run_ranks"]

T = TypeVar("T")

TIMEOUT_S = 120.0
"""How long a rank waits for the others at a collective before it gives up (a hung test)."""


@dataclass
class _Group:
    """What the ranks of one communicator share."""

    size: int
    job: _Job
    barrier: threading.Barrier = field(init=False)
    slots: list[Any] = field(init=False)
    mail: dict[tuple[int, int], queue.Queue[bytes]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.barrier = threading.Barrier(self.size, timeout=TIMEOUT_S)
        self.slots = [None] * self.size
        self.job.groups.append(self)

    def box(self, source: int, dest: int) -> queue.Queue[bytes]:
        with self.job.lock:
            return self.mail.setdefault((source, dest), queue.Queue())


@dataclass
class _Job:
    """Every communicator of one :func:`run_ranks` call (to break them all on a failure)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    groups: list[_Group] = field(default_factory=list)
    splits: dict[tuple[int, int], _Group] = field(default_factory=dict)

    def abort(self) -> None:
        with self.lock:
            groups = list(self.groups)
        for group in groups:
            group.barrier.abort()


class ThreadComm:
    """One rank of a job whose ranks are threads of this process (a :class:`Comm`)."""

    def __init__(self, group: _Group, rank: int) -> None:
        self._group = group
        self.rank = rank
        self.size = group.size
        self._splits = 0

    def barrier(self) -> None:
        """Wait for every rank."""
        self._group.barrier.wait()

    def allgather(self, obj: T) -> list[T]:
        """Every rank's ``obj``, by rank."""
        group = self._group
        group.slots[self.rank] = obj
        group.barrier.wait()
        out: list[T] = list(group.slots)
        group.barrier.wait()  # nobody writes the next collective's slot before all read
        return out

    def bcast(self, obj: T, root: int = 0) -> T:
        """``root``'s ``obj``."""
        return self.allgather(obj)[root]

    def gather(self, obj: T, root: int) -> list[T] | None:
        """Every rank's ``obj`` on ``root``; None elsewhere."""
        everyone = self.allgather(obj)
        return everyone if self.rank == root else None

    def sendrecv_into(self, data: BytesLike, dest: int, out: Writable, source: int) -> int:
        """Send ``data`` to ``dest`` and receive ``source``'s into ``out``: bytes received."""
        self._group.box(self.rank, dest).put(bytes(memoryview(data).cast("B")))
        got = self._group.box(source, self.rank).get(timeout=TIMEOUT_S)
        if len(got) > len(out):
            raise InvalidValueError(f"{len(got)} bytes do not fit a {len(out)}-byte buffer")
        out[: len(got)] = got
        return len(got)

    def alltoall_into(
        self,
        send: BytesLike,
        counts: list[int],
        recv: bytearray,
        displs: Sequence[int] | None = None,
    ) -> list[int]:
        """Piece i of ``send`` (``counts[i]`` bytes, packed, or at ``displs[i]``) to rank i;
        what every rank sent this one, in rank order, into ``recv``: the counts received."""
        if len(counts) != self.size:
            raise InvalidValueError(f"alltoall_into takes {self.size} counts, got {len(counts)}")
        pieces, at, view = [], 0, memoryview(send).cast("B")
        for i, n in enumerate(counts):
            start = at if displs is None else displs[i]
            pieces.append(bytes(view[start : start + max(n, 0)]))
            at += max(n, 0)
        everyone = self.allgather(pieces)
        mine = [everyone[r][self.rank] for r in range(self.size)]
        if sum(map(len, mine)) > len(recv):
            raise InvalidValueError(f"{sum(map(len, mine))} bytes arrive, more than {len(recv)}")
        at = 0
        for piece in mine:
            recv[at : at + len(piece)] = piece
            at += len(piece)
        return [len(p) for p in mine]

    def split(self, color: int, key: int) -> Comm:
        """The ranks of the same ``color``, ordered by ``key`` then rank."""
        self._splits += 1
        everyone = self.allgather((color, key))
        members = sorted((k, r) for r, (c, k) in enumerate(everyone) if c == color)
        job = self._group.job
        with job.lock:
            group = job.splits.get((self._splits, color))
            if group is None:
                group = _Group(len(members), job)
                job.splits[(self._splits, color)] = group
        return ThreadComm(group, [r for _, r in members].index(self.rank))

    def host(self) -> str:
        """A host per rank: each rank is a node unless ``ranks_per_node`` groups them."""
        return f"thread-rank-{self.rank}"


def run_ranks(size: int, work: Callable[[Comm], T]) -> list[T]:
    """``work(comm)`` on ``size`` ranks, each in its own thread: every rank's result, by rank.
    The first rank's exception (by rank) is raised once every thread has ended."""
    job = _Job()
    group = _Group(size, job)
    results: list[Any] = [None] * size
    errors: list[BaseException | None] = [None] * size

    def one(rank: int) -> None:
        try:
            results[rank] = work(ThreadComm(group, rank))
        except BaseException as exc:
            errors[rank] = exc
            job.abort()

    threads = [threading.Thread(target=one, args=(r,), name=f"rank-{r}") for r in range(size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # the cause, not the broken barriers it left on the other ranks
    causes = [
        e for e in errors if e is not None and not isinstance(e, threading.BrokenBarrierError)
    ]
    first = next(iter(causes), next((e for e in errors if e is not None), None))
    if first is not None:
        raise first
    return results

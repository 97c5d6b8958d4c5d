"""The few collective operations the checkpoint library needs, with or without MPI.

Why a small interface instead of mpi4py everywhere: the library must work in a single process
(no MPI installed, a laptop, a serial code) exactly as under ``mpiexec``, and its protocol —
agree, commit, verify, choose — is easiest to test when the communicator is swappable.
:class:`SelfComm` is the one-process case; :class:`MPIComm` wraps an mpi4py communicator
(imported only when used). Objects exchanged are small (manifest entries, flags, ids):
pickled collectives are fine. Bulk data (partner copies, parity) goes through
:meth:`Comm.sendrecv_into` in bounded segments, from and into reused buffers.
"""

from __future__ import annotations

import mmap
import os
import shutil
import socket
import sys
from array import array
from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

from greenckpt.ckpt import polite_objects
from greenckpt.ckpt.polite_objects import MPIRequest, offsets
from greenckpt.ckpt.wait import complete
from greenckpt.errors import InvalidValueError

__all__ = ["Comm", "MPIComm", "SelfComm", "find_mpiexec", "world"]

T = TypeVar("T")
BytesLike = bytes | bytearray | memoryview
Writable = bytearray | mmap.mmap
"""A buffer a bulk receive lands in (an anonymous mapping when it must be page-aligned)."""


class Comm(Protocol):
    """A communicator: rank, size and blocking collectives over picklable objects."""

    @property
    def rank(self) -> int:
        """This process's rank (0-based)."""
        ...

    @property
    def size(self) -> int:
        """Number of ranks."""
        ...

    def barrier(self) -> None:
        """Wait for every rank."""
        ...

    def allgather(self, obj: T) -> list[T]:
        """Every rank's ``obj``, in rank order, on every rank."""
        ...

    def bcast(self, obj: T, root: int = 0) -> T:
        """``root``'s ``obj`` on every rank."""
        ...

    def sendrecv_into(self, data: BytesLike, dest: int, out: Writable, source: int) -> int:
        """Send the bytes of ``data`` to ``dest`` and receive what ``source`` sends into the
        start of ``out`` (at most ``len(out)`` bytes): how many arrived. The bulk path: no
        pickling, no new buffers. Where more arrive than ``out`` holds it raises
        :class:`~greenckpt.errors.InvalidValueError`, once the exchange is complete on both
        ends (no peer is left waiting in it)."""
        ...

    def gather(self, obj: T, root: int) -> list[T] | None:
        """Every rank's ``obj`` in rank order on ``root``; None elsewhere."""
        ...

    def alltoall_into(
        self,
        send: BytesLike,
        counts: list[int],
        recv: bytearray,
        displs: Sequence[int] | None = None,
    ) -> list[int]:
        """The bulk all-to-all: ``counts[r]`` bytes for rank r, packed in rank order at the
        start of ``send`` (-1: nothing, and rank r learns that it got nothing, not an empty
        piece), or at ``displs[r]`` in ``send`` when given (pieces sent from where they lie,
        no packing); what every rank sent lands packed in rank order in ``recv``. Returns
        the counts received (-1 likewise). Where more bytes arrive than ``recv`` holds it
        raises :class:`~greenckpt.errors.InvalidValueError`, once the exchange is complete on
        every rank (no rank is left waiting in it; the caller makes it this rank's error and
        keeps taking part in what follows)."""
        ...

    def split(self, color: int, key: int) -> Comm:
        """A sub-communicator of the ranks with the same ``color``, ordered by ``key``
        (collective: every rank calls it)."""
        ...

    def host(self) -> str:
        """The name of the node this rank runs on."""
        ...


class SelfComm:
    """One process: every collective is the identity."""

    rank = 0
    size = 1

    def barrier(self) -> None:
        """Nothing to wait for."""

    def allgather(self, obj: T) -> list[T]:
        """A list of one."""
        return [obj]

    def bcast(self, obj: T, root: int = 0) -> T:
        """The object itself."""
        return obj

    def sendrecv_into(self, data: BytesLike, dest: int, out: Writable, source: int) -> int:
        """Only to itself: ``data`` copied into ``out``."""
        view = memoryview(data).cast("B")
        if dest != 0 or source != 0:
            raise InvalidValueError("a single process can only exchange data with itself")
        if len(view) > len(out):
            raise InvalidValueError(f"{len(view)} bytes do not fit a {len(out)}-byte buffer")
        out[: len(view)] = view
        return len(view)

    def gather(self, obj: T, root: int) -> list[T] | None:
        """A list of one (the only rank is the root)."""
        if root != 0:
            raise InvalidValueError(f"a single process has only rank 0, not root {root}")
        return [obj]

    def alltoall_into(
        self,
        send: BytesLike,
        counts: list[int],
        recv: bytearray,
        displs: Sequence[int] | None = None,
    ) -> list[int]:
        """What it sends itself, copied."""
        if len(counts) != 1:
            raise InvalidValueError(f"a single process exchanges 1 piece, not {len(counts)}")
        n, at = max(counts[0], 0), 0 if displs is None else displs[0]
        recv[:n] = memoryview(send).cast("B")[at : at + n]
        return list(counts)

    def split(self, color: int, key: int) -> Comm:
        """Itself: one process is its own group."""
        return self

    def host(self) -> str:
        """This machine's host name."""
        return socket.gethostname()


class MPIComm:
    """An mpi4py communicator (``MPI.COMM_WORLD`` by default).

    Every wait for another rank to arrive is polite (:mod:`greenckpt.ckpt.wait`): a barrier
    is a nonblocking barrier completed with sleeps; the object collectives are nonblocking
    collectives of pickled bytes completed the same way
    (:mod:`greenckpt.ckpt.polite_objects`); a bulk exchange first waits politely for the
    partner's message (or every rank's counts). Bulk data then move under MPI's own blocking
    calls: a large message goes in pieces that advance only while both ends poll MPI (shared
    memory without CMA, most networks), and a sleep between polls throttles the transfer —
    measured here with CMA off, a 4-rank level-2 checkpoint of 64 MiB each took 7.8 s with
    polite waits against 0.73 s with MPI's (benchmarks/bench_levels.py;
    docs/design/waiting.md)."""

    def __init__(self, comm: Any = None) -> None:
        if comm is None:
            from mpi4py import MPI  # noqa: PLC0415 - MPI only when the job runs under it

            comm = MPI.COMM_WORLD
        self._comm = comm

    @property
    def rank(self) -> int:
        """This process's rank."""
        return int(self._comm.Get_rank())

    @property
    def size(self) -> int:
        """Number of ranks."""
        return int(self._comm.Get_size())

    def barrier(self) -> None:
        """MPI barrier (nonblocking, completed politely)."""
        complete(self._comm.Ibarrier())

    def allgather(self, obj: T) -> list[T]:
        """Allgather of pickled objects, polite (:mod:`greenckpt.ckpt.polite_objects`)."""
        return polite_objects.allgather(self._comm, obj)

    def bcast(self, obj: T, root: int = 0) -> T:
        """Broadcast of a pickled object, polite."""
        return polite_objects.bcast(self._comm, obj, root)

    def sendrecv_into(self, data: BytesLike, dest: int, out: Writable, source: int) -> int:
        """``Isend`` of the buffer, a polite probe for ``source``'s message (its size), then
        ``Recv`` straight into ``out`` (paired: no deadlock whatever the ranks' order)."""
        from mpi4py import MPI  # noqa: PLC0415 - see __init__

        view = memoryview(data).cast("B")
        sent = self._comm.Isend([view, MPI.BYTE], dest=dest, tag=_BULK_TAG)
        status = MPI.Status()
        complete(_Probe(self._comm, source, _BULK_TAG, status))
        count = int(status.Get_count(MPI.BYTE))
        # too much for ``out``: received all the same, so that the sender is not left
        # waiting for a receive that never comes, then refused
        into = out if count <= len(out) else bytearray(count)
        self._comm.Recv([memoryview(into)[:count], MPI.BYTE], source=source, tag=_BULK_TAG)
        sent.Wait()  # MPI's own wait: see the class on bulk data
        if into is not out:
            raise InvalidValueError(
                f"rank {source} sent {count} bytes, more than the {len(out)}-byte buffer"
            )
        return count

    def gather(self, obj: T, root: int) -> list[T] | None:
        """Gather of pickled objects, polite."""
        return polite_objects.gather(self._comm, obj, root)

    def alltoall_into(
        self,
        send: BytesLike,
        counts: list[int],
        recv: bytearray,
        displs: Sequence[int] | None = None,
    ) -> list[int]:
        """The counts by a nonblocking ``Ialltoall`` completed politely (where ranks meet),
        then the bytes by ``Alltoallv`` (see the class on bulk data): no pickling, no new
        buffers."""
        from mpi4py import MPI  # noqa: PLC0415 - see __init__

        size = self.size
        if len(counts) != size:
            raise InvalidValueError(f"alltoall_into takes {size} counts, got {len(counts)}")
        if displs is not None and len(displs) != size:
            raise InvalidValueError(f"alltoall_into takes {size} displacements, got {len(displs)}")
        mine = array("q", counts)
        theirs = array("q", bytes(8 * size))
        complete(MPIRequest(self._comm.Ialltoall([mine, MPI.INT64_T], [theirs, MPI.INT64_T])))
        send_n = [max(c, 0) for c in counts]
        recv_n = [max(c, 0) for c in theirs]
        # too much for ``recv``: received all the same, so that no rank waits in the
        # Alltoallv for one that left it, then refused
        into = recv if sum(recv_n) <= len(recv) else bytearray(sum(recv_n))
        at = (
            offsets(send_n)
            if displs is None
            else [d if n else 0 for d, n in zip(displs, send_n, strict=True)]
        )
        self._comm.Alltoallv(  # every rank is here (all counts arrived): MPI's own speed
            [send, (send_n, at), MPI.BYTE],
            [into, (recv_n, offsets(recv_n)), MPI.BYTE],
        )
        if into is not recv:
            raise InvalidValueError(
                f"{sum(recv_n)} bytes arrived, more than the {len(recv)}-byte buffer"
            )
        return list(theirs)

    def split(self, color: int, key: int) -> Comm:
        """``MPI_Comm_split``."""
        return MPIComm(self._comm.Split(color, key))

    def host(self) -> str:
        """``MPI.Get_processor_name()``."""
        from mpi4py import MPI  # noqa: PLC0415 - see __init__

        return str(MPI.Get_processor_name())


_BULK_TAG = 7302  # sendrecv_into's messages, apart from anything else on the communicator


class _Probe:
    """A request that completes when a message from ``source`` has arrived (to wait for it
    politely before the receive); ``status`` (when given) then says its size."""

    def __init__(self, comm: Any, source: int, tag: int, status: Any = None) -> None:
        self._comm, self._source, self._tag, self._status = comm, source, tag, status

    def test(self) -> tuple[bool, None]:
        found = self._comm.iprobe(source=self._source, tag=self._tag, status=self._status)
        return bool(found), None

    def wait(self) -> None:
        self._comm.probe(source=self._source, tag=self._tag, status=self._status)


def world() -> Comm:
    """``MPIComm()`` when this process runs under an MPI launcher with more than one rank
    (or mpi4py is already initialised), else :class:`SelfComm`.

    Why the care: importing mpi4py initialises MPI, which a serial program should not pay for
    or depend on; launchers announce themselves through environment variables.
    """

    launched = any(
        k in os.environ
        for k in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS")
    )
    if "mpi4py.MPI" in sys.modules or launched:
        try:
            comm = MPIComm()
        except ImportError:
            return SelfComm()
        return comm
    return SelfComm()


def find_mpiexec() -> str | None:
    """The MPI launcher that matches this Python: the one next to the interpreter (the MPICH
    wheel installs it into the virtual environment), else the first on ``PATH``."""
    here = shutil.which("mpiexec", path=os.path.dirname(sys.executable))
    return here or shutil.which("mpiexec")

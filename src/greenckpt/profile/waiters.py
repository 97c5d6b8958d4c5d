"""What runs inside the profiler's waiter processes: the library's wait on a stand-in request.

Why its own module: each waiter is a spawned Python process that imports only this (and the
wait loop it is handed), so starting a node's worth of them costs little memory and time; the
measuring side (meters, the sweep) lives in :mod:`greenckpt.profile.waiting`.

A waiter waits exactly as a rank of the checkpoint library waits for a request — the loop
is :func:`greenckpt.ckpt.wait.complete` itself, handed in by the caller — on a
:class:`DeadlineRequest`, a stand-in that completes at a deadline. In polite mode the loop
tests it for 200 µs and then sleeps between tests; in spin mode the loop calls the request's
``wait()``, which here busy-tests it, as MPI's blocking waits poll their progress engine. The
stand-in's ``test()`` reads a clock; a real ``MPI_Test`` also runs MPI's progress engine
(about a microsecond per call), which is not included (docs/design/profiler.md).
"""

from __future__ import annotations

import os
import resource
import signal
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

__all__ = ["DeadlineRequest", "WaitLoop", "waiter_main"]

WaitLoop = Callable[[Any], object]
"""The library's wait: finishes a request with ``test()``/``wait()``
(:func:`greenckpt.ckpt.wait.complete`)."""


class DeadlineRequest:
    """A stand-in for a nonblocking MPI request that completes at ``deadline``
    (:func:`time.monotonic` seconds, the same clock in every process of the node)."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.tests = 0

    def test(self) -> tuple[bool, None]:
        """Whether it completed (a clock read), as ``MPI_Test`` answers."""
        self.tests += 1
        return time.monotonic() >= self.deadline, None

    def wait(self) -> None:
        """Busy-test until it completes: MPI's own blocking wait, which polls."""
        while not self.test()[0]:
            pass


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def waiter_main(loop: WaitLoop, env_name: str, conn: Connection) -> None:
    """A waiter process: say ready, then for every ``(mode, deadline)`` received wait on a
    :class:`DeadlineRequest` with ``env_name`` set to ``mode`` (how the loop reads its mode)
    and send back the CPU-seconds the wait used (``getrusage`` of this process around it);
    ``None`` or a closed connection ends it.

    SIGINT is ignored: an interrupt at the terminal reaches every process of the group, and
    the parent, not each waiter, decides what happens (it stops them).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn.send("ready")
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message is None:
            return
        mode, deadline = message
        os.environ[env_name] = mode
        before = _cpu_seconds()
        loop(DeadlineRequest(deadline))
        conn.send(_cpu_seconds() - before)

"""The notification socket's native front: phase calls answered in microseconds.

Why: the runtime reads every meter, decides and accounts at each begin and end, a few hundred
microseconds of Python; a C, C++ or Fortran code that announces its phases should not wait for
that (issue 16: < 50 µs a call). ``libgreenckpt_front`` (native/c/front.c) serves the socket from
a thread that holds no Python lock: a begin it has seen answered before (the same request line
from the same process) gets that answer again at once, a begin joining an open phase gets the
open phase's answer, a well-formed end of an open phase gets "ok"; every line is queued in
arrival order for :class:`~greenckpt.runtime.notify.NotifyServer`, which accounts it just after
and checks the answer that was sent. This module only binds the library (ctypes, which releases
the GIL during each call). Design notes: docs/design/runtime.md ("The native front").
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence
from dataclasses import dataclass

from greenckpt.errors import GreenckptError
from greenckpt.native import library_dir

__all__ = [
    "ANSWERED",
    "CLOSED",
    "CLOSED_PENDING",
    "LIBRARY",
    "PARTIAL",
    "PENDING",
    "FrontError",
    "FrontEvent",
    "NativeFront",
]

LIBRARY = "libgreenckpt_front.so"

ANSWERED = 1
"""A request the front answered itself; ``sent`` holds the answer."""
PENDING = 2
"""A request waiting for :meth:`NativeFront.reply` (and every later one waits behind it)."""
CLOSED = 3
"""A connection closed; the front released its connection-scoped phases."""
CLOSED_PENDING = 4
"""A connection closed behind waiting requests: answer it with ``reply(conn, b"", False, ...)``."""
PARTIAL = 5
"""The client closed in the middle of a line; ``line`` holds the bytes it sent."""


class FrontError(GreenckptError, OSError):
    """The native front could not start, or broke (one line)."""


class _Event(ctypes.Structure):
    _fields_ = (
        ("conn", ctypes.c_uint64),
        ("type", ctypes.c_int32),
        ("pad", ctypes.c_int32),
        ("t", ctypes.c_double),
        ("line_len", ctypes.c_uint64),
        ("sent_len", ctypes.c_uint64),
    )


@dataclass(frozen=True)
class FrontEvent:
    """One queued event: ``conn`` (the connection's id), ``type`` (ANSWERED ... PARTIAL), ``t``
    (``time.monotonic()`` seconds when the line was complete), the ``line`` and what was
    ``sent``."""

    conn: int
    type: int
    t: float
    line: bytes
    sent: bytes


@functools.cache
def _library() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(library_dir() / LIBRARY), use_errno=True)
    vp, u64, size = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t
    lib.gcf_start.argtypes = (ctypes.c_int, size, ctypes.c_char_p, ctypes.c_char_p,
                              ctypes.c_char_p, ctypes.c_int)  # fmt: skip
    lib.gcf_start.restype = vp
    lib.gcf_next.argtypes = (vp, ctypes.POINTER(_Event), ctypes.c_char_p, size, ctypes.c_int)
    lib.gcf_next.restype = ctypes.c_int
    lib.gcf_reply.argtypes = (vp, u64, ctypes.c_char_p, size, ctypes.c_int,
                              ctypes.POINTER(ctypes.c_int32))  # fmt: skip
    lib.gcf_reply.restype = ctypes.c_int
    lib.gcf_cache_put.argtypes = (vp, ctypes.c_char_p, size, ctypes.c_char_p, size)
    lib.gcf_cache_put.restype = ctypes.c_int
    lib.gcf_cache_clear.argtypes = (vp,)
    lib.gcf_cache_clear.restype = None
    lib.gcf_counts.argtypes = (vp, ctypes.POINTER(u64), ctypes.POINTER(u64), ctypes.POINTER(u64))
    lib.gcf_counts.restype = None
    lib.gcf_stop.argtypes = (vp,)
    lib.gcf_stop.restype = None
    lib.gcf_free.argtypes = (vp,)
    lib.gcf_free.restype = None
    return lib


class NativeFront:
    """The front serving ``listen_fd`` (a listening Unix socket the caller keeps and closes).

    ``kinds``: the wire format's phase kinds, in the order of the open counts passed to
    :meth:`reply`; ``end_reply``/``long_reply``: the answers to an accepted end and to a line
    over ``max_line`` bytes; ``fast``: answer at once what can be (False: every line waits
    for :meth:`reply`, for a target whose decisions may not repeat). Raises
    :class:`OSError` (or greenckpt's ``BuildError``) when the library cannot be built, loaded
    or started: the caller serves the socket itself then.
    """

    def __init__(
        self,
        listen_fd: int,
        *,
        kinds: Sequence[str],
        end_reply: bytes,
        long_reply: bytes,
        max_line: int,
        fast: bool,
    ) -> None:
        self._lib = _library()
        handle = self._lib.gcf_start(
            listen_fd, max_line, ",".join(kinds).encode(), end_reply, long_reply, int(fast)
        )
        if not handle:
            errno = ctypes.get_errno()
            raise FrontError(errno, "the native front did not start")
        self._handle: int | None = handle
        self._stopped = False
        self._nkinds = len(kinds)
        self._buffer = ctypes.create_string_buffer(2 * max_line + 64)
        self._event = _Event()

    def next(self, timeout_ms: int) -> FrontEvent | bool | None:
        """The next event; None when none came within ``timeout_ms``; False once the front
        has stopped and every event has been taken."""
        got = self._lib.gcf_next(
            self._handle, ctypes.byref(self._event), self._buffer, len(self._buffer), timeout_ms
        )
        if got == 0:
            return None
        if got == -2:  # cannot happen: lines and answers are both within max_line
            raise FrontError("a native front event is larger than its buffer")
        if got < 0:
            return False
        ev = self._event
        raw = self._buffer.raw[: ev.line_len + ev.sent_len]
        return FrontEvent(ev.conn, ev.type, ev.t, raw[: ev.line_len], raw[ev.line_len :])

    def reply(self, conn: int, data: bytes, ok: bool, open_counts: Sequence[int]) -> bool:
        """Answer the oldest waiting request, ``conn``'s, with ``data``; ``open_counts``: the
        runtime's open phases per kind after it. False if ``conn``'s was not the oldest."""
        counts = (ctypes.c_int32 * self._nkinds)(*open_counts)
        return self._lib.gcf_reply(self._handle, conn, data, len(data), int(ok), counts) == 0  # type: ignore[no-any-return]

    def cache_put(self, line: bytes, reply: bytes) -> None:
        """Answer ``line`` with ``reply`` at once from now on (while no phase of its kind is
        open; then the open phase's answer is given)."""
        self._lib.gcf_cache_put(self._handle, line, len(line), reply, len(reply))

    def cache_clear(self) -> None:
        """Forget every remembered answer."""
        self._lib.gcf_cache_clear(self._handle)

    def counts(self) -> tuple[int, int, int]:
        """Requests answered at once, requests that waited for the runtime, and events
        queued (every line, closed connection and cut-short line), so far."""
        answered, waited, queued = ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_uint64()
        self._lib.gcf_counts(
            self._handle, ctypes.byref(answered), ctypes.byref(waited), ctypes.byref(queued)
        )
        return answered.value, waited.value, queued.value

    def stop(self) -> None:
        """Stop accepting and reading, close every connection; events still queue."""
        if self._handle is not None and not self._stopped:
            self._stopped = True
            self._lib.gcf_stop(self._handle)

    def free(self) -> None:
        """Release the front (after :meth:`stop` and once the queue is drained)."""
        if self._handle is not None:
            self.stop()
            self._lib.gcf_free(self._handle)
            self._handle = None

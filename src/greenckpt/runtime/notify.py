"""The runtime's notification socket: other processes announce their phases here.

Why: the settings of :mod:`greenckpt.runtime` help only if the runtime learns exactly when a
checkpoint, flush or restart starts and ends. greenckpt's own library tells it through a
:class:`~greenckpt.ckpt.hooks.PhaseHook`; an application in another process — one that uses
FTI, SCR, VeloC or DMTCP, or greenckpt's library under ``greenckpt run`` — tells it through
this server, with :class:`greenckpt.ckpt.notify_client.SocketHook` from Python or
``greenckpt notify`` from a job script. The wire format is defined (and documented) once, in
:mod:`greenckpt.ckpt.notify_client`; this module only serves it: a private Unix socket, one
thread per connection, every call into the runtime under one lock, and nothing lost
silently. Where libgreenckpt_front can be loaded the socket is served by it instead
(:mod:`greenckpt.runtime.front`: repeated phases answered in microseconds, every line still
accounted here, in order). Details: docs/design/runtime.md ("The notification socket").
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import socket
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from types import TracebackType
from typing import Any, Literal

from greenckpt import __version__
from greenckpt.ckpt.notify_client import (
    IO_KINDS,
    MAX_LINE_BYTES,
    PROTOCOL_VERSION,
    SOCKET_ENV,
    BeginRequest,
    EndRequest,
    NotifyError,
    PingRequest,
    ProtocolError,
    WireKind,
    decode,
    encode,
    error_reply,
    one_line,
    parse_request,
)
from greenckpt.errors import GreenckptError, InvalidValueError, UsageError
from greenckpt.phases import WIRE_KINDS
from greenckpt.platform.root import PlatformError
from greenckpt.platform.threads import quiet_thread, start_quiet
from greenckpt.runtime import front as native
from greenckpt.runtime.notify_socket import bind_socket, unlink_own
from greenckpt.runtime.notify_target import NotifyTarget, settings_note, settings_to_wire

__all__ = ["FRONT_ENV", "SOCKET_NAME", "FrontChoice", "NotifyServer"]

FrontChoice = Literal["auto", "native", "python"]
FRONT_ENV = "GREENCKPT_NOTIFY_FRONT"
"""Overrides an ``auto`` front choice: ``python`` serves the socket from Python threads only
(a troubleshooting switch), ``native`` requires libgreenckpt_front."""
_LATE_NOTE_S = 0.05  # accounted this much after arrival: said in the report

SOCKET_NAME = "runtime.sock"
"""File name of the socket in the temporary directory made when no path is given."""
_CONNECTIONS_PER_CPU = 8


def _default_backlog() -> int:
    """Room for every rank of a large node connecting at once: the system's maximum
    (``SOMAXCONN``; the kernel caps ``listen`` at ``net.core.somaxconn`` anyway) and never
    fewer than a few connections per logical CPU, since each rank may connect."""
    return max(socket.SOMAXCONN, _CONNECTIONS_PER_CPU * (os.cpu_count() or 1))


_JOIN_SECONDS = 5.0
_POLL_MS = 200


_TOO_LONG = f"request longer than {MAX_LINE_BYTES} bytes: closing the connection"


def _encode_reply(reply: dict[str, Any]) -> bytes:
    """``reply`` as a line; one that cannot be encoded (too long) becomes an error reply."""
    try:
        return encode(reply)
    except ProtocolError as exc:
        return encode(error_reply(exc))


class NotifyServer:
    """Serves the notification wire format for ``target`` on a Unix socket (see the module
    docstring). ``socket_path``: where to create the socket; ``None`` makes a new private
    temporary directory for it (removed again by :meth:`close`).

    Use as a context manager, or call :meth:`start` and :meth:`close`. Give the application
    :meth:`environ` (``GREENCKPT_RUNTIME_SOCKET``) so its hooks find the socket.
    """

    def __init__(
        self,
        target: NotifyTarget,
        socket_path: str | os.PathLike[str] | None = None,
        *,
        backlog: int | None = None,
        front: FrontChoice = "auto",
    ) -> None:
        if front not in ("auto", "native", "python"):
            raise InvalidValueError(f"front must be auto, native or python, got {front!r}")
        if backlog is not None and (isinstance(backlog, bool) or backlog < 1):
            raise InvalidValueError(
                f"backlog must be a positive number of connections, got {backlog!r}"
            )
        self.target = target
        self.backlog = _default_backlog() if backlog is None else backlog
        self._incidents: list[str] = []
        self._tempdir: str | None = None
        self._path = None if socket_path is None else os.path.abspath(os.fspath(socket_path))
        self._lock = threading.Lock()  # every call into target, and the open phases
        self._open: dict[WireKind, int] = {}  # begins served minus ends served, per kind
        self._conns_lock = threading.Lock()
        self._conns: dict[socket.socket, threading.Thread] = {}
        self._listener: socket.socket | None = None
        self._identity: tuple[int, int] | None = None
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self._closing = threading.Event()
        self._closed = False
        self._front_choice: FrontChoice = front
        self._front: native.NativeFront | None = None
        self._front_reason = ""
        self._drainer: threading.Thread | None = None
        self._late_s = 0.0  # the longest an event waited to be accounted (native front)
        self._processed = 0  # events of the native front accounted
        self._drained = threading.Condition()
        self._heard = 0  # well-formed requests served (ping, begin, end)

    # ------------------------------------------------------------------ public

    @property
    def socket_path(self) -> str:
        """The socket's absolute path (known once :meth:`start` has run when none was given)."""
        if self._path is None:
            raise UsageError("the notification socket has no path before start()")
        return self._path

    def environ(self) -> dict[str, str]:
        """The environment variable that points clients at this server."""
        return {SOCKET_ENV: self.socket_path}

    @property
    def incidents(self) -> tuple[str, ...]:
        """Notifications that were lost or cut short (a request the client closed in the
        middle of, phases still open when the server closed): one line each. They are also
        passed to the target's ``note`` when it has one (the runtime's report notes)."""
        with self._lock:
            return tuple(self._incidents)

    @property
    def heard(self) -> int:
        """How many well-formed requests (``ping``, ``begin``, ``end``) reached this socket:
        0 when no notifier ever announced anything to it (a node no rank ran on)."""
        with self._conns_lock:
            return self._heard

    def open_phases(self) -> dict[WireKind, int]:
        """Phases begun through this socket and not ended yet: kind -> how many begins."""
        with self._lock:
            return dict(self._open)

    def start(self) -> NotifyServer:
        """Create the socket and start serving; :class:`NotifyError` (one line) if the path is
        unusable or a live server already listens there."""
        if self._listener is not None or self._closed:
            raise UsageError("a NotifyServer can be started only once")
        if self._path is None:
            self._tempdir = tempfile.mkdtemp(prefix="greenckpt-")
            self._path = os.path.join(self._tempdir, SOCKET_NAME)
        try:
            self._listener = self._bind(self._path)
        except BaseException:
            self._remove_tempdir()
            raise
        try:
            self._front = self._start_front()
        except BaseException:
            self._listener.close()
            self._unlink_own_socket()
            self._remove_tempdir()
            raise
        if self._front is not None:
            self._drainer = quiet_thread(self._drain_loop, "greenckpt-notify-front")
            return self
        self._wake_r, self._wake_w = socket.socketpair()
        self._acceptor = quiet_thread(self._accept_loop, "greenckpt-notify-accept")
        return self

    @property
    def front(self) -> str:
        """Who serves the socket: ``native`` (libgreenckpt_front) or ``python``, with the
        reason when the native front was wanted and could not start."""
        if self._front is not None:
            return "native"
        return f"python ({self._front_reason})" if self._front_reason else "python"

    def front_counts(self) -> tuple[int, int]:
        """Requests the native front answered at once, and requests that waited for the
        runtime (0, 0 when Python serves the socket)."""
        if self._front is None:
            return (0, 0)
        answered, waited, _ = self._front.counts()
        return answered, waited

    def settle(self, timeout: float = _JOIN_SECONDS) -> bool:
        """Wait until every line received so far has been accounted (the native front
        answers repeated phases before the runtime accounts them); False on timeout."""
        if self._front is None:
            return True
        queued = self._front.counts()[2]
        with self._drained:
            return self._drained.wait_for(lambda: self._processed >= queued, timeout)

    def close(self) -> None:
        """Stop serving, end phases left open (``ok=False``) and remove the socket file.

        Safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        self._closing.set()
        if self._front is not None:
            self._front.stop()  # connections closed; what they sent is still queued
            if self._drainer is not None:
                # no time limit: every line received is accounted before the report, and the
                # front may not be freed while the drainer still takes from it
                self._drainer.join()
            self._front.free()
            self._front = None
            self._note_late()
        if self._wake_w is not None:
            with contextlib.suppress(OSError):
                self._wake_w.send(b"x")
        if self._acceptor is not None:
            self._acceptor.join(_JOIN_SECONDS)
        with self._conns_lock:
            conns = dict(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for thread in conns.values():
            thread.join(_JOIN_SECONDS)
        self._end_open_phases()
        for sock in (self._listener, self._wake_r, self._wake_w):
            if sock is not None:
                sock.close()
        self._unlink_own_socket()
        self._remove_tempdir()

    def __enter__(self) -> NotifyServer:
        if self._listener is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def handle(self, line: bytes | str, held: dict[WireKind, int] | None = None) -> dict[str, Any]:
        """The reply to one request line (what a connection's thread sends back). ``held``:
        the connection's phases of scope ``connection`` still open, kept up to date here."""
        return self._serve_line(line, held)[1]

    def _serve_line(
        self, line: bytes | str, held: dict[WireKind, int] | None
    ) -> tuple[BeginRequest | EndRequest | PingRequest | None, dict[str, Any]]:
        """The request ``line`` holds (None if malformed) and the reply to it."""
        try:
            request = parse_request(decode(line))
        except ProtocolError as exc:
            return None, error_reply(exc)
        with self._conns_lock:
            self._heard += 1
        if isinstance(request, PingRequest):
            reply = {"v": PROTOCOL_VERSION, "ok": True, "runtime": f"greenckpt {__version__}"}
            return request, reply
        try:
            if isinstance(request, BeginRequest):
                reply = self._begin(request)
                if held is not None and request.scope == "connection":
                    held[request.kind] = held.get(request.kind, 0) + 1
                return request, reply
            reply = self._end(request)
            if held is not None and held.get(request.kind, 0) > 0:
                held[request.kind] -= 1
            return request, reply
        except (ValueError, OSError, PlatformError) as exc:  # the target refused the request
            return request, error_reply(exc)
        except Exception as exc:  # a bug in the target: tell the client, keep serving
            return request, error_reply(f"{type(exc).__name__}: {exc}")

    # ------------------------------------------------------------------ phases

    def _begin(self, request: BeginRequest) -> dict[str, Any]:
        with self._lock:
            settings = self.target.begin(
                request.kind,
                path=request.path or None,
                size=request.size,
                level=request.level,
                node=request.node,
                pid=request.pid or None,  # 0: the notifier did not say
            )
            self._open[request.kind] = self._open.get(request.kind, 0) + 1
        if settings is None:
            return {
                "v": PROTOCOL_VERSION,
                "ok": True,
                "io_processes": None,
                "writer_cpus": [],
                "note": f"{request.kind} phase accounted (no I/O advice for it)",
                "settings": None,
            }
        return {
            "v": PROTOCOL_VERSION,
            "ok": True,
            "io_processes": settings.io_processes if request.kind in IO_KINDS else None,
            "writer_cpus": list(settings.writer_cpus) if request.kind in IO_KINDS else [],
            "note": settings_note(settings),
            "settings": settings_to_wire(settings),
        }

    def _end(self, request: EndRequest) -> dict[str, Any]:
        with self._lock:
            # 0 s is the wire format's default: "not given"
            seconds = request.seconds if request.seconds > 0 else None
            self.target.end(request.kind, ok=request.ok, node=request.node, seconds=seconds)
            held = self._open.get(request.kind, 0)
            if held > 1:
                self._open[request.kind] = held - 1
            else:
                self._open.pop(request.kind, None)
        return {"v": PROTOCOL_VERSION, "ok": True}

    def _report(self, incident: str) -> None:
        """Keep ``incident`` and hand it to the target's ``note``, if it takes notes."""
        with self._lock:
            self._incidents.append(incident)
            note = getattr(self.target, "note", None)
            if callable(note):
                with contextlib.suppress(Exception):
                    note(f"notification socket: {incident}")

    def _end_open_phases(self) -> None:
        with self._lock:
            left = list(self._open.items())
            self._open.clear()
        for kind, n in left:
            self._report(
                f"{n} {kind} phase(s) begun through the socket had no end when it closed: "
                "ended there as failed"
            )
        with self._lock:
            for kind, n in left:
                for _ in range(n):
                    try:
                        self.target.end(kind, ok=False)
                    except Exception as exc:
                        warnings.warn(
                            f"greenckpt: could not end the {kind} phase left open at "
                            f"{self._path}: {one_line(exc)}",
                            RuntimeWarning,
                            stacklevel=3,
                        )

    # ------------------------------------------------------------------ native front

    def _start_front(self) -> native.NativeFront | None:
        """The native front on the listening socket, or None (with the reason kept) where
        Python serves it: chosen so, or libgreenckpt_front unavailable in ``auto``."""
        choice: str = self._front_choice
        if choice == "auto":
            env = os.environ.get(FRONT_ENV, "").strip().lower()
            choice = env if env in ("native", "python") else "auto"
        if choice == "python":
            return None
        assert self._listener is not None
        try:
            return native.NativeFront(
                self._listener.fileno(),
                kinds=WIRE_KINDS,
                end_reply=encode({"v": PROTOCOL_VERSION, "ok": True}),
                long_reply=encode(error_reply(_TOO_LONG)),
                max_line=MAX_LINE_BYTES,
                fast=self._decisions_repeat(),
            )
        except (OSError, GreenckptError) as exc:
            if choice == "native":
                raise NotifyError(f"the native front cannot start: {one_line(exc)}") from None
            self._front_reason = f"libgreenckpt_front unavailable: {one_line(exc, 200)}"
            self._note(f"notification socket served by Python: {self._front_reason}")
            return None

    def _drain_loop(self) -> None:
        """Account, in arrival order, every event the native front queued (until it stops)."""
        assert self._front is not None
        front = self._front
        helds: dict[int, dict[WireKind, int]] = {}
        while True:
            try:
                event = front.next(_POLL_MS)
            except OSError as exc:  # cannot happen (see NativeFront.next); never hang close()
                self._report(f"the native front failed: {exc}; later notifications are lost")
                return
            if event is None:
                continue
            if event is False:
                return
            assert isinstance(event, native.FrontEvent)
            self._late_s = max(self._late_s, time.monotonic() - event.t)
            try:
                self._on_front_event(front, event, helds)
            except Exception as exc:  # never leave a client waiting, never stop draining
                self._report(f"an event could not be accounted: {type(exc).__name__}: {exc}")
                if event.type in (native.PENDING, native.CLOSED_PENDING):
                    reply = encode(error_reply(f"{type(exc).__name__}: {exc}"))
                    front.reply(event.conn, reply, False, self._open_counts())
            finally:
                with self._drained:
                    self._processed += 1
                    self._drained.notify_all()

    def _on_front_event(
        self,
        front: native.NativeFront,
        event: native.FrontEvent,
        helds: dict[int, dict[WireKind, int]],
    ) -> None:
        if event.type in (native.CLOSED, native.CLOSED_PENDING):
            self._end_held(helds.pop(event.conn, {}))
            if event.type == native.CLOSED_PENDING:
                front.reply(event.conn, b"", False, self._open_counts())
            return
        if event.type == native.PARTIAL:
            self._report(
                "a client closed its connection in the middle of a request "
                f"({one_line(event.line.decode('utf-8', 'replace'), 80)!r}): not executed"
            )
            return
        request, reply = self._serve_line(event.line, helds.setdefault(event.conn, {}))
        data = _encode_reply(reply)
        ok = reply.get("ok") is True
        cacheable = ok and isinstance(request, BeginRequest) and self._decisions_repeat()
        if event.type == native.PENDING:
            if cacheable:  # before the answer: the client's next begin may come at once
                front.cache_put(event.line, data)
            front.reply(event.conn, data, ok, self._open_counts())
            return
        if not ok:
            what = one_line(event.line.decode("utf-8", "replace"), 80)
            self._report(
                f"a request answered at once ({what!r}) was then refused by the runtime: "
                f"{reply.get('error')}"
            )
            return
        if isinstance(request, BeginRequest) and data != event.sent:
            self._report(
                f"the answer sent at once to a {request.kind} begin differed from the runtime's "
                "decision for it (its settings changed): later begins get the new one"
            )
        if cacheable:
            front.cache_put(event.line, data)

    def _decisions_repeat(self) -> bool:
        return bool(getattr(self.target, "decisions_repeat", False))

    def _open_counts(self) -> list[int]:
        with self._lock:
            return [self._open.get(kind, 0) for kind in WIRE_KINDS]

    def _note(self, text: str) -> None:
        note = getattr(self.target, "note", None)
        if callable(note):
            with contextlib.suppress(Exception):
                note(text)

    def _note_late(self) -> None:
        if self._late_s > _LATE_NOTE_S:
            self._note(
                f"notification socket: phase boundaries were accounted up to "
                f"{self._late_s * 1e3:.0f} ms after the application announced them (the "
                "runtime was busy); the application was answered at once"
            )

    # ------------------------------------------------------------------ socket

    def _bind(self, path: str) -> socket.socket:
        sock, self._identity = bind_socket(path, self.backlog)
        return sock

    def _unlink_own_socket(self) -> None:
        """Remove the socket file, unless someone has replaced it with their own."""
        if self._path is not None and self._identity is not None:
            unlink_own(self._path, self._identity)
        self._identity = None

    def _remove_tempdir(self) -> None:
        if self._tempdir is not None:
            shutil.rmtree(self._tempdir, ignore_errors=True)
            self._tempdir = None

    # ------------------------------------------------------------------ threads

    def _accept_loop(self) -> None:
        assert self._listener is not None and self._wake_r is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self._listener, selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            while not self._closing.is_set():
                for key, _ in selector.select():
                    if key.fileobj is not self._listener or self._closing.is_set():
                        continue
                    try:
                        conn, _ = self._listener.accept()
                    except OSError:
                        continue
                    self._serve_in_thread(conn)

    def _serve_in_thread(self, conn: socket.socket) -> None:
        conn.setblocking(True)
        thread = threading.Thread(
            target=self._serve, args=(conn,), name="greenckpt-notify-conn", daemon=True
        )
        with self._conns_lock:
            self._conns[conn] = thread
        start_quiet(thread)

    def _serve(self, conn: socket.socket) -> None:
        held: dict[WireKind, int] = {}  # phases this connection began with scope "connection"
        try:
            for line in self._lines(conn):
                if line is None:  # too long: cannot find the next message
                    conn.sendall(encode(error_reply(_TOO_LONG)))
                    break
                if not line.endswith(b"\n"):  # the client closed in the middle of a line
                    self._report(
                        "a client closed its connection in the middle of a request "
                        f"({one_line(line.decode('utf-8', 'replace'), 80)!r}): not executed"
                    )
                    break
                conn.sendall(_encode_reply(self.handle(line, held)))
        except OSError:
            pass  # the client went away
        finally:
            with self._conns_lock:
                self._conns.pop(conn, None)
            conn.close()
            self._end_held(held)

    def _end_held(self, held: dict[WireKind, int]) -> None:
        """End, as failed, the phases a closed connection began with scope ``connection``
        and did not end: its process died or gave up in the middle of them, and an open
        phase would otherwise absorb every later phase of its kind. Not while the server
        closes: :meth:`close` ends what is left open, once."""
        for kind, n in held.items():
            if n <= 0 or self._closing.is_set():
                continue
            self._report(
                f"a client's connection closed with {n} {kind} phase(s) it had begun still "
                "open (its process died or gave up): ended there as failed"
            )
            for _ in range(n):
                with contextlib.suppress(Exception), self._lock:
                    self.target.end(kind, ok=False)
                    held_now = self._open.get(kind, 0)
                    if held_now > 1:
                        self._open[kind] = held_now - 1
                    else:
                        self._open.pop(kind, None)

    @staticmethod
    def _lines(conn: socket.socket) -> Iterator[bytes | None]:
        """The connection's request lines, newline included (a last one without it is
        incomplete); ``None`` for one over the length limit."""
        with conn.makefile("rb") as reader:
            while True:
                line = reader.readline(MAX_LINE_BYTES + 1)
                if not line:
                    return
                if len(line) > MAX_LINE_BYTES:
                    yield None
                    return
                yield line

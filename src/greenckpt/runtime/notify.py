"""The runtime's notification socket: other processes announce their phases here.

Why: the settings of :mod:`greenckpt.runtime` help only if the runtime learns exactly when a
checkpoint, flush or restart starts and ends. greenckpt's own library tells it through a
:class:`~greenckpt.ckpt.hooks.PhaseHook`; an application in another process — one that uses
FTI, SCR, VeloC or DMTCP, or greenckpt's library under ``greenckpt run`` — tells it through
this server, with :class:`greenckpt.ckpt.notify_client.SocketHook` from Python or
``greenckpt notify`` from a job script. The wire format is defined (and documented) once, in
:mod:`greenckpt.ckpt.notify_client`; this module only serves it: a private Unix socket, one
thread per connection, every call into the runtime under one lock, and nothing lost
silently. How it works in detail: docs/design/runtime.md ("The notification socket").
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import selectors
import shutil
import socket
import stat
import tempfile
import threading
import warnings
from collections.abc import Iterator
from types import TracebackType
from typing import Any, Protocol

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
from greenckpt.errors import InvalidValueError, UsageError
from greenckpt.platform.root import PlatformError
from greenckpt.runtime.settings import Settings

__all__ = ["SOCKET_NAME", "NotifyServer", "NotifyTarget", "settings_to_wire"]

SOCKET_NAME = "runtime.sock"
"""File name of the socket in the temporary directory made when no path is given."""
_LIVE_PROBE_SECONDS = 1.0
_CONNECTIONS_PER_CPU = 8


def _default_backlog() -> int:
    """Room for every rank of a large node connecting at once: the system's maximum
    (``SOMAXCONN``; the kernel caps ``listen`` at ``net.core.somaxconn`` anyway) and never
    fewer than a few connections per logical CPU, since each rank may connect."""
    return max(socket.SOMAXCONN, _CONNECTIONS_PER_CPU * (os.cpu_count() or 1))


_JOIN_SECONDS = 5.0


class NotifyTarget(Protocol):
    """What the server drives: the runtime (``greenckpt.runtime.session.Runtime``) or a fake.

    ``begin`` returns the settings it applied for the phase (``None``: nothing to advise, e.g.
    for ``compute``) and may raise to refuse the phase (a ``ValueError`` for a bad request);
    ``end`` closes the phase and raises (a ``ValueError``) when none of that kind is open; its
    return value is not used. Overlapping phases of one kind are the target's to count.
    """

    def begin(
        self,
        kind: WireKind,
        *,
        path: str | None,
        size: int,
        level: int | None,
        codec: str | None = None,
        node: int | None = None,
    ) -> Settings | None:
        """A ``kind`` phase starts on ``node``."""
        ...

    def end(
        self, kind: WireKind, *, ok: bool, node: int | None = None, seconds: float | None = None
    ) -> object:
        """The ``kind`` phase is over on ``node``; ``ok`` False when it failed; ``seconds``
        the notifier's own timing (None: not given)."""
        ...


def settings_to_wire(settings: Settings) -> dict[str, Any]:
    """:class:`Settings` as the ``settings`` object of a ``begin`` reply (SI units, plus the
    one-line ``label``). The fields are flat, so a shallow copy (``dataclasses.asdict`` deep
    copies, at about a third of a begin's cost in the server)."""
    doc = {field.name: getattr(settings, field.name) for field in dataclasses.fields(settings)}
    doc["notes"] = list(settings.notes)
    doc["label"] = settings.label
    return doc


def _note(settings: Settings) -> str:
    parts = [f"{settings.label} ({settings.source})", *settings.notes]
    return one_line("; ".join(parts), limit=1000)


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
    ) -> None:
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
        self._wake_r, self._wake_w = socket.socketpair()
        self._acceptor = threading.Thread(
            target=self._accept_loop, name="greenckpt-notify-accept", daemon=True
        )
        self._acceptor.start()
        return self

    def close(self) -> None:
        """Stop serving, end phases left open (``ok=False``) and remove the socket file.

        Safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        self._closing.set()
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
        try:
            request = parse_request(decode(line))
        except ProtocolError as exc:
            return error_reply(exc)
        if isinstance(request, PingRequest):
            return {"v": PROTOCOL_VERSION, "ok": True, "runtime": f"greenckpt {__version__}"}
        try:
            if isinstance(request, BeginRequest):
                reply = self._begin(request)
                if held is not None and request.scope == "connection":
                    held[request.kind] = held.get(request.kind, 0) + 1
                return reply
            reply = self._end(request)
            if held is not None and held.get(request.kind, 0) > 0:
                held[request.kind] -= 1
            return reply
        except (ValueError, OSError, PlatformError) as exc:  # the target refused the request
            return error_reply(exc)
        except Exception as exc:  # a bug in the target: tell the client, keep serving
            return error_reply(f"{type(exc).__name__}: {exc}")

    # ------------------------------------------------------------------ phases

    def _begin(self, request: BeginRequest) -> dict[str, Any]:
        with self._lock:
            settings = self.target.begin(
                request.kind,
                path=request.path or None,
                size=request.size,
                level=request.level,
                node=request.node,
            )
            self._open[request.kind] = self._open.get(request.kind, 0) + 1
        if settings is None:
            return {
                "v": PROTOCOL_VERSION,
                "ok": True,
                "io_processes": None,
                "note": f"{request.kind} phase accounted (no I/O advice for it)",
                "settings": None,
            }
        return {
            "v": PROTOCOL_VERSION,
            "ok": True,
            "io_processes": settings.io_processes if request.kind in IO_KINDS else None,
            "note": _note(settings),
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

    # ------------------------------------------------------------------ socket

    def _bind(self, path: str) -> socket.socket:
        if os.path.lexists(path):
            self._replace_stale(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(path)
            os.chmod(path, 0o600)  # before listen(): nobody can connect until then
            st = os.stat(path)
            self._identity = (st.st_dev, st.st_ino)
            sock.listen(self.backlog)
        except OSError as exc:
            sock.close()
            if self._identity is not None:
                with contextlib.suppress(OSError):
                    os.unlink(path)
                self._identity = None
            reason = exc.strerror or str(exc)
            if exc.errno == errno.EADDRINUSE:
                reason = "another process created it meanwhile"
            raise NotifyError(
                f"cannot create the runtime socket {path}: {one_line(reason)}"
            ) from None
        return sock

    @staticmethod
    def _replace_stale(path: str) -> None:
        """Remove a stale socket at ``path``; refuse a live one or a file that is no socket."""
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(mode):
            raise NotifyError(
                f"cannot create the runtime socket {path}: the path exists and is not a socket"
            )
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(_LIVE_PROBE_SECONDS)
        try:
            probe.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            pass  # stale: nobody listens
        except OSError as exc:
            raise NotifyError(
                f"cannot create the runtime socket {path}: it exists and cannot be probed "
                f"({one_line(exc.strerror or exc)})"
            ) from None
        else:
            raise NotifyError(
                f"cannot create the runtime socket {path}: another running greenckpt runtime "
                "listens there (stop it, or give another socket path)"
            )
        finally:
            probe.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    def _unlink_own_socket(self) -> None:
        """Remove the socket file, unless someone has replaced it with their own."""
        if self._path is None or self._identity is None:
            return
        try:
            st = os.lstat(self._path)
            if (st.st_dev, st.st_ino) == self._identity:
                os.unlink(self._path)
        except FileNotFoundError:
            pass
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
        thread.start()

    def _serve(self, conn: socket.socket) -> None:
        held: dict[WireKind, int] = {}  # phases this connection began with scope "connection"
        try:
            for line in self._lines(conn):
                if line is None:  # too long: cannot find the next message
                    reply = error_reply(
                        f"request longer than {MAX_LINE_BYTES} bytes: closing the connection"
                    )
                    conn.sendall(encode(reply))
                    break
                if not line.endswith(b"\n"):  # the client closed in the middle of a line
                    self._report(
                        "a client closed its connection in the middle of a request "
                        f"({one_line(line.decode('utf-8', 'replace'), 80)!r}): not executed"
                    )
                    break
                conn.sendall(encode(self.handle(line, held)))
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

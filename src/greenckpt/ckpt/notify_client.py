"""Client of the energy-aware runtime's notification socket, and the wire format it speaks.

Why a socket: the runtime (:mod:`greenckpt.runtime`) can apply its settings for exactly the
span of a checkpoint, flush or restart only if it is *told* when that span starts and ends
(mills2013 section 3: explicit notification beats a governor that must first detect the I/O).
Inside greenckpt's library that is a :class:`~greenckpt.ckpt.hooks.PhaseHook` call; a process
that uses another checkpoint tool (FTI, SCR, VeloC, DMTCP), or merely runs under ``greenckpt
run``, tells the runtime through a local Unix socket instead (``GREENCKPT_RUNTIME_SOCKET``):
from Python with :class:`SocketHook`, from a job script with ``greenckpt notify``.

The wire format (version 1: newline-delimited JSON objects, one reply per request, ``begin``,
``end`` and ``ping``) is defined here, once; the server
(:class:`greenckpt.runtime.notify.NotifyServer`) imports it. This module depends only on the
standard library and the lowest parts of :mod:`greenckpt.ckpt` (hooks, the level registry),
because the checkpoint library sits below the runtime. The whole protocol, field by field:
docs/design/levels-and-config.md.
"""

from __future__ import annotations

import json
import math
import os
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Literal

from greenckpt.ckpt.hooks import HookKind, PhaseAdvice, PhaseHook
from greenckpt.ckpt.levels import BUILTIN_LEVELS, level_numbers, numbers_text
from greenckpt.errors import GreenckptError, InvalidValueError
from greenckpt.phases import IO_KINDS, WIRE_KINDS, WireKind

__all__ = [
    "IO_KINDS",
    "MAX_LEVEL",
    "MAX_LINE_BYTES",
    "NODE_ENV",
    "NODE_PLACEHOLDER",
    "PROTOCOL_VERSION",
    "SOCKET_ENV",
    "WIRE_KINDS",
    "BeginRequest",
    "EndRequest",
    "NotifyError",
    "PingRequest",
    "ProtocolError",
    "Request",
    "SocketHook",
    "WireKind",
    "advice_from_reply",
    "check_version",
    "decode",
    "encode",
    "error_reply",
    "hook_from_env",
    "one_line",
    "parse_request",
]

SOCKET_ENV: Final = "GREENCKPT_RUNTIME_SOCKET"
"""Environment variable that holds the path of the runtime's notification socket."""
NODE_PLACEHOLDER: Final = "{node}"
"""In the socket path: replaced by the caller's node index (emulated nodes on one host)."""
NODE_ENV: Final = "GREENCKPT_NODE"
"""This process's node index when a call names none (``ping``; libgreenckpt's default)."""
PROTOCOL_VERSION: Final = 1
"""The wire format's version (the ``v`` field of every message)."""
MAX_LINE_BYTES: Final = 64 * 1024
"""Longest accepted message line, newline included."""
MAX_LEVEL: Final = max(spec.number for spec in BUILTIN_LEVELS)
"""The highest built-in checkpoint level (L4 global file system), for code that imported it; a
``begin`` may name any level registered when it is checked (:func:`_check_level`)."""


_EVENTS = ("begin", "end", "ping")
Scope = Literal["job", "connection"]
SCOPES: tuple[Scope, ...] = ("job", "connection")
"""A begin's ``scope``: ``job`` (default) — the phase lasts until its end arrives, from any
connection (``greenckpt notify begin`` and ``end`` are two commands); ``connection`` — it also
ends, as failed, when the connection that began it closes first (the process died or gave up
in the middle of the phase), so a killed rank never leaves its phase open."""
_CONNECT_FIRST_PAUSE_S = 0.001
_CONNECT_MAX_PAUSE_S = 0.05
_MAX_INT = 2**63 - 1
_MAX_TEXT = 300


class ProtocolError(GreenckptError, ValueError):
    """A message does not follow the wire format; the text is one line naming the problem."""


class NotifyError(GreenckptError, RuntimeError):
    """The runtime could not be reached, broke the connection, or refused the request.

    The message is one line and names the socket path. The checkpoint library reports it as a
    warning and goes on with its configured settings; ``greenckpt notify`` prints it and exits
    with status 2.
    """


def one_line(text: object, limit: int = _MAX_TEXT) -> str:
    """``text`` as a single line of at most ``limit`` characters (for error fields and notes)."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


# ------------------------------------------------------------------------------ encoding


def encode(message: Mapping[str, Any]) -> bytes:
    """One message as a line of compact JSON (UTF-8, newline-terminated).

    Raises :class:`ProtocolError` for a non-finite number or a value JSON cannot hold, and
    for a line longer than :data:`MAX_LINE_BYTES`.
    """
    try:
        text = json.dumps(dict(message), separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ProtocolError(f"cannot encode message: {one_line(exc)}") from None
    data = text.encode("utf-8") + b"\n"
    if len(data) > MAX_LINE_BYTES:
        raise ProtocolError(
            f"message of {len(data)} bytes is longer than the {MAX_LINE_BYTES} bytes allowed"
        )
    return data


def _no_constant(name: str) -> Any:
    raise InvalidValueError(f"{name} is not a finite number")


def decode(line: bytes | str) -> dict[str, Any]:
    """One line of the wire format as a JSON object; :class:`ProtocolError` if it is not one."""
    if isinstance(line, bytes):
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("message is not UTF-8 text") from None
    line = line.strip()
    if not line:
        raise ProtocolError("empty message: send one JSON object per line")
    try:
        message = json.loads(line, parse_constant=_no_constant)
    except RecursionError:
        raise ProtocolError("message is nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, too many digits, NaN/Infinity
        raise ProtocolError(f"message is not valid JSON: {one_line(exc)}") from None
    if not isinstance(message, dict):
        raise ProtocolError(f"message must be a JSON object, got {type(message).__name__}")
    return message


def _version_of(message: Mapping[str, Any]) -> int:
    v = message.get("v")
    if isinstance(v, bool) or not isinstance(v, int):
        raise ProtocolError(f'message needs "v": {PROTOCOL_VERSION} (the protocol version)')
    return v


def check_version(message: Mapping[str, Any]) -> None:
    """:class:`ProtocolError` naming both versions unless ``message`` is of this version."""
    v = _version_of(message)
    if v != PROTOCOL_VERSION:
        raise ProtocolError(
            f"notification protocol version {v} is not supported: this side speaks version "
            f"{PROTOCOL_VERSION}"
        )


def error_reply(text: object) -> dict[str, Any]:
    """The reply to a request that failed, with ``text`` made one line."""
    return {"v": PROTOCOL_VERSION, "ok": False, "error": one_line(text) or "unknown error"}


# ------------------------------------------------------------------------------ requests


def _check_int(name: str, value: object, *, low: int) -> None:
    """An integer field: at least ``low`` and no more than a signed 64-bit integer holds (what
    a C or Fortran client can send)."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= _MAX_INT:
        raise ProtocolError(f'"{name}" must be an integer >= {low}, got {value!r:.40}')


def _check_level(level: object) -> None:
    """A ``begin``'s level: null or a level registered now (:mod:`greenckpt.ckpt.levels`), so a
    level added by ``register_level`` may be announced like the built-in ones."""
    known = level_numbers()
    if level is None or (isinstance(level, int) and not isinstance(level, bool) and level in known):
        return
    if known == tuple(range(known[0], known[-1] + 1)):
        span = f"from {known[0]} to {known[-1]}"
    else:
        span = f"of {numbers_text(known)}"
    raise ProtocolError(f'"level" must be an integer {span} or null, got {level!r:.40}')


def _check_kind(kind: object) -> None:
    if kind not in WIRE_KINDS:
        raise ProtocolError(f'"kind" must be one of {", ".join(WIRE_KINDS)}, got {kind!r:.40}')


@dataclass(frozen=True)
class BeginRequest:
    """A phase of ``kind`` starts (see the module docstring for the fields).

    Construction validates every field (:class:`ProtocolError`), whether the values come from
    a caller or from a decoded message.
    """

    kind: WireKind
    level: int | None = None
    path: str = ""
    size: int | None = 0
    node: int = 0
    pid: int = 0
    scope: Scope = "job"

    def __post_init__(self) -> None:
        _check_kind(self.kind)
        if self.scope not in SCOPES:
            raise ProtocolError(
                f'"scope" must be one of {", ".join(SCOPES)}, got {self.scope!r:.40}'
            )
        _check_level(self.level)
        if not isinstance(self.path, str):
            raise ProtocolError(f'"path" must be a string, got {self.path!r:.40}')
        if "\0" in self.path:
            raise ProtocolError('"path" must not contain NUL characters')
        if self.size is not None or self.kind not in IO_KINDS:  # null: an I/O phase's unknown
            _check_int("size", self.size, low=0)
        _check_int("node", self.node, low=0)
        _check_int("pid", self.pid, low=0)

    def to_wire(self) -> dict[str, Any]:
        """The request as a message."""
        return {
            "v": PROTOCOL_VERSION,
            "event": "begin",
            "kind": self.kind,
            "level": self.level,
            "path": self.path,
            "size": self.size,
            "node": self.node,
            "pid": self.pid,
            "scope": self.scope,
        }


@dataclass(frozen=True)
class EndRequest:
    """The phase of ``kind`` is over on ``node`` after ``seconds``; ``ok`` False if it failed."""

    kind: WireKind
    node: int = 0
    ok: bool = True
    seconds: float = 0.0

    def __post_init__(self) -> None:
        _check_kind(self.kind)
        _check_int("node", self.node, low=0)
        if not isinstance(self.ok, bool):
            raise ProtocolError(f'"ok" must be true or false, got {self.ok!r:.40}')
        seconds: object = self.seconds
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not (math.isfinite(seconds) and seconds >= 0)
        ):
            raise ProtocolError(f'"seconds" must be a finite number >= 0, got {seconds!r:.40}')
        object.__setattr__(self, "seconds", float(seconds))

    def to_wire(self) -> dict[str, Any]:
        """The request as a message."""
        return {
            "v": PROTOCOL_VERSION,
            "event": "end",
            "kind": self.kind,
            "node": self.node,
            "ok": self.ok,
            "seconds": self.seconds,
        }


@dataclass(frozen=True)
class PingRequest:
    """Is a runtime listening, and which?"""

    def to_wire(self) -> dict[str, Any]:
        """The request as a message."""
        return {"v": PROTOCOL_VERSION, "event": "ping"}


Request = BeginRequest | EndRequest | PingRequest


def parse_request(message: Mapping[str, Any]) -> Request:
    """Validate a decoded request; :class:`ProtocolError` with a one-line reason if invalid.

    Absent optional fields take their defaults; unknown fields are ignored.
    """
    check_version(message)
    event = message.get("event")
    kind: Any = message.get("kind")  # validated when the request is constructed
    if event == "ping":
        return PingRequest()
    if event == "begin":
        return BeginRequest(
            kind,
            level=message.get("level"),
            path=message.get("path", ""),
            size=message.get("size", 0),
            node=message.get("node", 0),
            pid=message.get("pid", 0),
            scope=message.get("scope", "job"),
        )
    if event == "end":
        return EndRequest(
            kind,
            node=message.get("node", 0),
            ok=message.get("ok", True),
            seconds=message.get("seconds", 0.0),
        )
    raise ProtocolError(f'"event" must be one of {", ".join(_EVENTS)}, got {event!r:.40}')


# ------------------------------------------------------------------------------ replies


def advice_from_reply(reply: Mapping[str, Any]) -> PhaseAdvice:
    """The :class:`PhaseAdvice` in a successful ``begin`` reply (:class:`ProtocolError` if the
    reply is malformed)."""
    io = reply.get("io_processes")
    if io is not None and (isinstance(io, bool) or not isinstance(io, int) or io < 1):
        raise ProtocolError(f'"io_processes" must be an integer >= 1 or null, got {io!r:.40}')
    note = reply.get("note", "")
    if not isinstance(note, str):
        raise ProtocolError(f'"note" must be a string, got {note!r:.40}')
    cpus = reply.get("writer_cpus", [])  # absent: a runtime from before the per-core split
    if not isinstance(cpus, list) or any(
        isinstance(c, bool) or not isinstance(c, int) or c < 0 for c in cpus
    ):
        raise ProtocolError(f'"writer_cpus" must be a list of CPU numbers, got {cpus!r:.40}')
    return PhaseAdvice(io_processes=io, note=one_line(note, limit=1000), writer_cpus=tuple(cpus))


# ------------------------------------------------------------------------------ client


class _RetryError(GreenckptError):
    """The connection broke before the runtime answered: reconnect and send again (once)."""


class SocketHook:
    """A :class:`~greenckpt.ckpt.hooks.PhaseHook` that notifies a runtime over its socket.

    Connects on first use and keeps that one connection for every later request (calls from
    several threads are serialised). If the connection turns out to be broken when a request
    is sent — the runtime restarted, say — it reconnects and sends the request again, once.
    A runtime that cannot be reached, breaks the connection again, does not answer within
    ``timeout`` seconds or answers with an error raises :class:`NotifyError` naming the socket.

    ``scope``: that of its begins (:data:`SCOPES`); the checkpoint library's hook
    (:func:`hook_from_env`) uses ``connection``, so a rank killed in the middle of a phase
    does not leave it open.

    Emulated nodes on one host each have their own agent: every ``{node}`` in ``path`` is
    replaced by the node index of the call (``ping``: ``$GREENCKPT_NODE``, else 0); each
    node's connection is kept open while calls go to another node's.
    """

    def __init__(self, path: str, timeout: float = 5.0, *, scope: Scope = "job") -> None:
        if scope not in SCOPES:
            raise InvalidValueError(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")
        if not isinstance(path, str) or not path:
            raise InvalidValueError(f"runtime socket path must be a non-empty string, got {path!r}")
        if not (math.isfinite(timeout) and timeout > 0):
            raise InvalidValueError(
                f"timeout must be a finite number of seconds > 0, got {timeout!r}"
            )
        self.socket_path = path
        self.timeout = timeout
        self.scope: Scope = scope
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._buffer = b""
        self._linked = path  # the resolved path of the connection (or of the next one)
        self._parked: dict[str, tuple[socket.socket, bytes]] = {}  # other nodes' connections

    def __repr__(self) -> str:
        return f"SocketHook({self.socket_path!r}, timeout={self.timeout!r})"

    # -- the PhaseHook protocol

    def begin(
        self, kind: HookKind, *, level: int | None, path: str, size: int, node: int
    ) -> PhaseAdvice:
        """Tell the runtime that a ``kind`` phase starts; return its advice."""
        request = BeginRequest(kind, level, path, size, node, os.getpid(), scope=self.scope)
        reply = self.request(request)
        try:
            return advice_from_reply(reply)
        except ProtocolError as exc:
            raise self._error(f"sent a malformed reply: {exc}") from None

    def end(self, kind: HookKind, *, node: int, ok: bool, seconds: float) -> None:
        """Tell the runtime that the ``kind`` phase is over on ``node``."""
        self.request(EndRequest(kind, node, ok, seconds))

    # -- the rest of the wire format

    def ping(self) -> str:
        """The runtime's name and version, e.g. ``greenckpt 0.1.0``."""
        runtime = self.request(PingRequest()).get("runtime")
        if not isinstance(runtime, str):
            raise self._error('sent a ping reply without "runtime"')
        return runtime

    def resolved_path(self, node: int | None = None) -> str:
        """The socket of ``node``: :attr:`socket_path` with every ``{node}`` replaced by its
        index (None: ``$GREENCKPT_NODE`` when it is a number >= 0, else 0)."""
        if NODE_PLACEHOLDER not in self.socket_path:
            return self.socket_path
        if node is None:
            text = os.environ.get(NODE_ENV, "").strip()
            node = int(text) if text.isdigit() else 0
        return self.socket_path.replace(NODE_PLACEHOLDER, str(node))

    def request(self, request: Request) -> dict[str, Any]:
        """Send one request and return the runtime's successful reply (a decoded object)."""
        data = encode(request.to_wire())
        target = self.resolved_path(getattr(request, "node", None))
        with self._lock:
            if target != self._linked:  # another node's agent: switch to its connection
                self._switch(target)
            try:
                line = self._exchange(data)
            except _RetryError:
                try:
                    line = self._exchange(data)
                except _RetryError as exc:
                    raise self._error(f"closed the connection twice ({exc})") from None
        try:
            reply = decode(line)
            check_version(reply)
        except ProtocolError as exc:
            raise self._error(f"sent a reply this client cannot use: {exc}") from None
        ok = reply.get("ok")
        if ok is True:
            return reply
        what = request.to_wire()
        action = " ".join(str(what[k]) for k in ("event", "kind") if k in what)
        reason = reply.get("error") if ok is False else 'a reply without "ok"'
        raise self._error(f"refused the {action}: {one_line(reason)}")

    def close(self) -> None:
        """Close the connection (the next request opens a new one)."""
        with self._lock:
            self._drop()
            for sock, _ in self._parked.values():
                sock.close()
            self._parked.clear()

    def __enter__(self) -> SocketHook:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- internals (called with the lock held)

    def _error(self, what: str) -> NotifyError:
        return NotifyError(f"greenckpt runtime at {self._linked} {what}")

    def _drop(self) -> None:
        if self._sock is not None:
            self._sock.close()
        self._sock = None
        self._buffer = b""

    def _switch(self, target: str) -> None:
        """Make ``target``'s connection the current one, keeping the other open: closing it
        would end that node's phases of scope ``connection`` as failed."""
        if self._sock is not None:
            self._parked[self._linked] = (self._sock, self._buffer)
        self._sock, self._buffer = self._parked.pop(target, (None, b""))
        self._linked = target

    def _connect(self) -> socket.socket:
        """A connection to the runtime, waiting up to ``timeout`` for room in its backlog.

        Why the retry: with a timeout set, the socket is non-blocking, and a Unix-socket
        ``connect`` into a full backlog fails at once with EAGAIN instead of waiting (every
        rank of a large node announcing the same checkpoint at once fills it); each retry
        waits a little longer, up to the timeout.
        """
        deadline = time.monotonic() + self.timeout
        pause = _CONNECT_FIRST_PAUSE_S
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            try:
                sock.connect(self._linked)
            except BlockingIOError:  # EAGAIN: the server's backlog is full right now
                sock.close()
                left = deadline - time.monotonic()
                if left <= 0:
                    raise NotifyError(
                        f"greenckpt runtime at {self._linked} did not accept a connection "
                        f"within {self.timeout:g} s (its backlog stayed full)"
                    ) from None
                time.sleep(min(pause, left))
                pause = min(pause * 2, _CONNECT_MAX_PAUSE_S)
                continue
            except FileNotFoundError:
                sock.close()
                raise NotifyError(
                    f"no greenckpt runtime at {self._linked}: the socket does not exist "
                    f"(is greenckpt run active, and is {SOCKET_ENV} right?)"
                ) from None
            except ConnectionRefusedError:
                sock.close()
                raise NotifyError(
                    f"no greenckpt runtime at {self._linked}: connection refused "
                    "(a stale socket of a runtime that has ended?)"
                ) from None
            except TimeoutError:
                sock.close()
                raise NotifyError(
                    f"greenckpt runtime at {self._linked} did not accept a connection "
                    f"within {self.timeout:g} s"
                ) from None
            except OSError as exc:
                sock.close()
                raise NotifyError(
                    f"cannot reach the greenckpt runtime at {self._linked}: "
                    f"{one_line(exc.strerror or exc)}"
                ) from None
            return sock

    def _exchange(self, data: bytes) -> bytes:
        """Send ``data`` and return the reply line; :class:`_RetryError` if the connection was
        found broken before any reply, :class:`NotifyError` for anything else."""
        fresh = self._sock is None
        if self._sock is None:
            self._sock = self._connect()
        sock = self._sock
        try:
            sock.sendall(data)
            while b"\n" not in self._buffer:
                chunk = sock.recv(65536)
                if not chunk:
                    partial = bool(self._buffer)
                    self._drop()
                    if partial or fresh:
                        raise self._error("closed the connection in the middle of a reply")
                    raise _RetryError("connection closed by the runtime")
                self._buffer += chunk
                if len(self._buffer) > MAX_LINE_BYTES and b"\n" not in self._buffer:
                    self._drop()
                    raise self._error(f"sent a reply longer than {MAX_LINE_BYTES} bytes")
        except TimeoutError:
            self._drop()
            raise self._error(f"did not answer within {self.timeout:g} s") from None
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError) as exc:
            self._drop()
            if fresh:
                raise self._error(f"broke the connection: {one_line(exc.strerror)}") from None
            raise _RetryError(exc.strerror or type(exc).__name__) from None
        except OSError as exc:
            self._drop()
            raise self._error(f"connection failed: {one_line(exc.strerror or exc)}") from None
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line


def hook_from_env(env: Mapping[str, str] = os.environ) -> PhaseHook | None:
    """A :class:`SocketHook` for the socket named in ``GREENCKPT_RUNTIME_SOCKET``, or None
    when that variable is unset or empty. Nothing is connected until the first phase."""
    path = env.get(SOCKET_ENV, "").strip()
    return SocketHook(path, scope="connection") if path else None

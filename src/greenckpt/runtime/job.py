"""The job leader's view of every node: one TCP listener that the nodes' agents report to.

Why: a job's energy is the sum of its nodes', and no node may speak for another (DESIGN.md).
Each node's agent (:mod:`greenckpt.runtime.agent`) accounts its own node and sends the leader
a ``hello``, a bounded ``progress`` snapshot every few seconds and, when told to ``stop``, its
``final`` summary. :class:`JobCollector` keeps, per node, its state (starting, running,
finished, died, unmanaged), its last progress and the totals of its final summary — never
its raw records: they are merged into job phases keyed by (kind, n-th phase of that kind on a
node) as they arrive and dropped, so memory grows with nodes plus phases, not with their
product. One thread serves every connection with a selector; a message over the size limit
is refused with one note. An agent whose connection breaks before its final is ``died``: its
last progress is kept and says where its accounting ends. Wire format and design:
docs/design/cluster.md.
"""

from __future__ import annotations

import contextlib
import copy
import hmac
import json
import math
import selectors
import socket
import threading
import time
from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from greenckpt.errors import GreenckptError, InvalidValueError, UsageError
from greenckpt.platform.threads import quiet_thread
from greenckpt.runtime.job_bounds import (
    MAX_SERIES_POINTS,
    bounded_progress,
    bounded_series,
    node_summary,
)
from greenckpt.runtime.job_phase import JobPhase

__all__ = [
    "JOB_PROTOCOL",
    "MAX_MESSAGE_BYTES",
    "MAX_PROGRESS_PHASES",
    "TOKEN_ENV",
    "JobCollector",
    "JobError",
    "JobPhase",
    "NodeState",
    "NodeView",
    "decode_message",
    "encode_message",
]

JOB_PROTOCOL: Final = 1
"""Version of the agent <-> leader messages (the ``v`` field)."""
MAX_MESSAGE_BYTES: Final = 4 << 20
"""Longest message line accepted from an agent (a final summary with its phases)."""
MAX_JOB_PHASES: Final = 100_000
"""Job phases kept; later ones are counted in the node totals only (a note says so)."""
MAX_PROGRESS_PHASES: Final = 500
"""I/O phases one progress message carries (an agent sends the rest with the next ones) and
the leader takes from one at most."""
TOKEN_ENV: Final = "GREENCKPT_JOB_TOKEN"
"""Environment variable that gives an agent the job's token (never on the command line)."""

NodeState = Literal["starting", "running", "finished", "died", "unmanaged"]


class JobError(GreenckptError, RuntimeError):
    """The job's collector or an agent could not do its part; one line naming the node."""


def encode_message(message: Mapping[str, Any]) -> bytes:
    """One message as a JSON line (``v`` added); JobError when it is over the size limit."""
    data = json.dumps({"v": JOB_PROTOCOL, **message}, separators=(",", ":"), allow_nan=False)
    raw = data.encode("utf-8") + b"\n"
    if len(raw) > MAX_MESSAGE_BYTES:
        raise JobError(f"message of {len(raw)} bytes is over the {MAX_MESSAGE_BYTES} allowed")
    return raw


def decode_message(line: bytes) -> dict[str, Any]:
    """One JSON-line message; InvalidValueError when it is not an object of this protocol."""
    try:
        doc = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise InvalidValueError(f"not a JSON message ({type(exc).__name__})") from None
    if not isinstance(doc, dict) or doc.get("v") != JOB_PROTOCOL:
        raise InvalidValueError(f"not a job message of protocol version {JOB_PROTOCOL}")
    return doc


@dataclass
class NodeView:
    """What the leader knows of one node (bounded: totals, never its records)."""

    node: int
    state: NodeState = "starting"
    host: str = ""
    host_id: str | None = None
    """Which machine the node is (``platform.hostid``); None: its own (a fake tree)."""
    pid: int | None = None
    socket: str = ""
    power_source: str | None = None
    control: bool | None = None
    shared_with: str | None = None
    """Another session controlled this node when its agent started (it ran control off)."""
    reason: str = ""
    progress: dict[str, Any] | None = None
    progress_unix: float | None = None
    summary: dict[str, Any] | None = None
    series: dict[str, Any] | None = None
    t0_unix: float | None = None
    told: bool = False
    """Whether the agent itself sent the reason it is unmanaged (an ``unable`` message)."""
    merged: dict[str, int] = field(default_factory=dict)
    """I/O phases per kind merged from progress messages (its final skips as many)."""
    energy_t: array[float] = field(default_factory=lambda: array("d"))
    energy_j: array[float] = field(default_factory=lambda: array("d"))
    """The node's energy since its runtime started, at each progress (at most
    MAX_SERIES_POINTS, thinned by dropping every other: cumulative, so no energy is lost):
    the power series of a node that dies before its final summary."""

    def add_energy_point(self, t_s: Any, energy_j: Any) -> None:
        """One progress reading (ignored without a node figure or out of order)."""
        if not isinstance(t_s, int | float) or not isinstance(energy_j, int | float):
            return
        if not (math.isfinite(t_s) and math.isfinite(energy_j)):
            return
        if self.energy_t and t_s <= self.energy_t[-1]:
            return
        self.energy_t.append(float(t_s))
        self.energy_j.append(float(energy_j))
        if len(self.energy_t) > MAX_SERIES_POINTS:
            del self.energy_t[1::2], self.energy_j[1::2]

    def progress_series(self) -> dict[str, Any] | None:
        """The node's mean power between its progress readings (None: fewer than two), at
        the end of each interval, as a final summary's series; labelled with its source."""
        t, e = self.energy_t, self.energy_j
        if len(t) < 2:
            return None
        power = array("d", ((e[i] - e[i - 1]) / (t[i] - t[i - 1]) for i in range(1, len(t))))
        return {"t_s": array("d", t[1:]), "power_w": power, "source": self.power_source}

    def ends_at(self) -> str:
        """Where a died node's accounting ends (its last progress), in words."""
        if self.progress is None:
            return "no progress was received: nothing of this node is accounted"
        t = float(self.progress.get("t_s", 0.0))
        return (
            f"its accounting ends at its last progress, {t:.1f} s after it started "
            f"({len(self.progress.get('by_kind', {}))} kind(s) of phase so far)"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "state": self.state,
            "host": self.host,
            "host_id": self.host_id,
            "pid": self.pid,
            "socket": self.socket,
            "power_source": self.power_source,
            "control": self.control,
            "shared_with": self.shared_with,
            "reason": self.reason,
            "accounting_ends": self.ends_at() if self.state == "died" else None,
            "progress": self.progress,
            "summary": self.summary,
        }


@dataclass(eq=False)  # hashed by identity (the loop's set of writers)
class _Conn:
    sock: socket.socket
    buffer: bytearray = field(default_factory=bytearray)
    node: int | None = None
    out: bytearray = field(default_factory=bytearray)


class JobCollector:
    """The leader's listener (see the module docstring): ``nodes`` agents 0..nodes-1 report
    to it with ``token``. Use as a context manager, or :meth:`start` and :meth:`close`."""

    def __init__(
        self,
        job_id: str,
        nodes: int,
        token: str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        max_message: int = MAX_MESSAGE_BYTES,
    ) -> None:
        if nodes < 1:
            raise InvalidValueError(f"a job has at least one node, got {nodes}")
        if not token:
            raise InvalidValueError("the job token must not be empty")
        self.job_id = job_id
        self.token = token
        self.max_message = max_message
        self._bind = (host, port)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._nodes = {k: NodeView(k) for k in range(nodes)}
        self._phases: dict[tuple[str, int], JobPhase] = {}
        self._notes: list[str] = []
        self._listener: socket.socket | None = None
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._conns: dict[socket.socket, _Conn] = {}
        self._writers: set[_Conn] = set()
        self._thread: threading.Thread | None = None
        self._closing = False
        self.started_unix = time.time()

    # ------------------------------------------------------------------ lifecycle

    @property
    def address(self) -> str:
        """``host:port`` the agents connect to."""
        if self._listener is None:
            raise UsageError("the collector has no address before start()")
        host, port = self._listener.getsockname()[:2]
        return f"{host}:{port}"

    def start(self) -> JobCollector:
        listener = socket.create_server(self._bind, backlog=socket.SOMAXCONN)
        listener.setblocking(False)
        self._listener = listener
        self._selector.register(listener, selectors.EVENT_READ, None)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._thread = quiet_thread(self._loop, "greenckpt-job")
        return self

    def close(self) -> None:
        """Stop serving; nodes still running are marked died (their connection is gone)."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self._thread is not None:
            self._thread.join(5.0)
        for conn in list(self._conns.values()):
            self._drop(conn, "the leader closed before this node's final summary")
        for sock in (self._listener, self._wake_r, self._wake_w):
            if sock is not None:
                sock.close()
        self._selector.close()

    def __enter__(self) -> JobCollector:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ leader's calls

    def wait_for(self, states: set[str], timeout: float, nodes: Iterable[int] = ()) -> bool:
        """Wait (at most ``timeout`` s) until every node (or ``nodes``) is in ``states``."""
        wanted = list(nodes) or list(self._nodes)
        deadline = time.monotonic() + timeout
        with self._changed:
            while not all(self._nodes[k].state in states for k in wanted):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
        return True

    def mark_unmanaged(self, node: int, reason: str) -> None:
        """``node`` has no agent (it could not start): the job runs without it."""
        with self._changed:
            view = self._nodes[node]
            if view.state in ("starting", "died"):
                view.state, view.reason = "unmanaged", reason
                self._changed.notify_all()

    def go_all(self) -> None:
        """Send ``go`` to every connected agent: the job's command starts now (their
        start-up ends; what follows is the application's time)."""
        self._broadcast("go")

    def stop_all(self) -> None:
        """Send ``stop`` to every connected agent (they close and send their final)."""
        self._broadcast("stop")

    def _broadcast(self, kind: str) -> None:
        data = encode_message({"type": kind})
        with self._lock:
            for conn in self._conns.values():
                if conn.node is not None:
                    conn.out += data
                    self._writers.add(conn)
        with contextlib.suppress(OSError):
            self._wake_w.send(b"s")

    def note(self, text: str) -> None:
        with self._lock:
            if text not in self._notes:
                self._notes.append(text)

    def nodes(self) -> list[NodeView]:
        """A copy of every node's view, by node index."""
        with self._lock:
            return [
                NodeView(**{f: copy.copy(getattr(v, f)) for f in v.__dataclass_fields__})
                for v in self._nodes.values()
            ]  # its own containers: the thread goes on appending to the live ones

    def phases(self) -> list[JobPhase]:
        with self._lock:
            return sorted(self._phases.values(), key=lambda p: (p.start_unix, p.kind, p.ordinal))

    @property
    def notes(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(self._notes)

    # ------------------------------------------------------------------ the thread

    def _loop(self) -> None:
        while True:
            with self._lock:
                if self._closing:
                    return
                # Only the connections given output since the last turn: a turn costs
                # O(events), not O(connections) (which made 1,000 agents O(n^2)).
                writers, self._writers = self._writers, set()
            for conn in writers:
                self._watch(conn, write=True)
            for key, mask in self._selector.select(1.0):
                if key.fileobj is self._wake_r:
                    with contextlib.suppress(OSError):
                        self._wake_r.recv(4096)
                elif key.fileobj is self._listener:
                    self._accept()
                else:
                    self._service(key.data, mask)

    def _watch(self, conn: _Conn, *, write: bool) -> None:
        """Select ``conn`` for reading, and for writing while it has output."""
        mask = selectors.EVENT_READ | (selectors.EVENT_WRITE if write else 0)
        with contextlib.suppress(KeyError, ValueError, OSError):  # dropped meanwhile
            self._selector.modify(conn.sock, mask, conn)

    def _accept(self) -> None:
        assert self._listener is not None
        try:
            sock, _ = self._listener.accept()
        except OSError:
            return
        sock.setblocking(False)
        conn = _Conn(sock)
        with self._lock:
            self._conns[sock] = conn
        self._selector.register(sock, selectors.EVENT_READ, conn)

    def _service(self, conn: _Conn, mask: int) -> None:
        try:
            if mask & selectors.EVENT_WRITE:
                with self._lock:
                    sent = conn.sock.send(conn.out) if conn.out else 0
                    del conn.out[:sent]
                    drained = not conn.out
                if drained:
                    self._watch(conn, write=False)
            if mask & selectors.EVENT_READ:
                chunk = conn.sock.recv(1 << 16)
                if not chunk:
                    self._drop(conn, "its connection closed before its final summary")
                    return
                conn.buffer += chunk
                self._lines(conn)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._drop(conn, f"its connection broke ({exc.strerror or exc})")

    def _lines(self, conn: _Conn) -> None:
        while True:
            end = conn.buffer.find(b"\n")
            if end < 0:
                if len(conn.buffer) > self.max_message:
                    self._refuse(conn, f"a message over {self.max_message} bytes")
                return
            line = bytes(conn.buffer[:end])
            del conn.buffer[: end + 1]
            if len(line) > self.max_message:
                self._refuse(conn, f"a message over {self.max_message} bytes")
                return
            try:
                self._handle(conn, decode_message(line))
            except (InvalidValueError, KeyError, TypeError, ValueError) as exc:
                self._refuse(conn, f"a malformed message ({exc})")
                return
            if conn.sock.fileno() < 0:
                return

    def _refuse(self, conn: _Conn, what: str) -> None:
        who = "an unknown agent" if conn.node is None else f"node {conn.node}'s agent"
        self.note(f"refused {what} from {who}: connection closed")
        self._drop(conn, f"the leader refused {what}")

    def _drop(self, conn: _Conn, why: str) -> None:
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._selector.unregister(conn.sock)
        conn.sock.close()
        with self._changed:
            self._conns.pop(conn.sock, None)
            if conn.node is not None:
                view = self._nodes[conn.node]
                if view.state in ("starting", "running"):
                    view.state, view.reason = "died", why
                    view.series = view.progress_series()
                self._changed.notify_all()

    # ------------------------------------------------------------------ messages

    def _handle(self, conn: _Conn, msg: dict[str, Any]) -> None:
        kind = msg.get("type")
        if conn.node is None:
            if kind == "unable":
                self._unable(conn, msg)
                return
            if kind != "hello":
                raise InvalidValueError(f"{kind!r} before hello")
            self._hello(conn, msg)
            return
        if kind == "progress":
            with self._changed:
                view = self._nodes[conn.node]
                view.progress = bounded_progress(msg)
                view.progress_unix = time.time()
                view.add_energy_point(msg.get("run_s"), msg.get("node_energy_j"))
                self._merge(conn.node, msg.get("phases") or [])
        elif kind == "final":
            self._final(conn.node, msg["summary"])
        else:
            raise InvalidValueError(f"unknown message type {kind!r}")

    def _member(self, msg: Mapping[str, Any]) -> int:
        """The node a first message (hello, unable) is from, after its token is checked."""
        kind = msg.get("type")
        token = str(msg.get("token", ""))
        if not hmac.compare_digest(token.encode(), self.token.encode()):
            raise InvalidValueError(f"{kind} with a wrong job token")
        node = msg["node"]
        if not isinstance(node, int) or isinstance(node, bool) or node not in self._nodes:
            raise InvalidValueError(f"{kind} from node {node!r}, not a node of this job")
        return node

    def _unable(self, conn: _Conn, msg: Mapping[str, Any]) -> None:
        """An agent that cannot take part says why: its node is unmanaged with that reason
        at once (the leader prints it), and the connection is closed."""
        node = self._member(msg)
        reason = " ".join(str(msg.get("reason", "")).split())[:1000] or "no reason given"
        with self._changed:
            view = self._nodes[node]
            if view.state == "starting":
                view.state, view.reason, view.told = "unmanaged", reason, True
                view.host = str(msg.get("host", ""))[:200]
                self._changed.notify_all()
        self._drop(conn, "")

    def _hello(self, conn: _Conn, msg: Mapping[str, Any]) -> None:
        node = self._member(msg)
        with self._changed:
            view = self._nodes[node]
            if view.state != "starting":
                raise InvalidValueError(f"a second hello for node {node} ({view.state})")
            conn.node = node
            view.state = "running"
            view.host = str(msg.get("host", ""))[:200]
            view.host_id = str(msg["host_id"])[:64] if msg.get("host_id") else None
            view.pid = int(msg["pid"]) if isinstance(msg.get("pid"), int) else None
            view.socket = str(msg.get("socket", ""))[:1000]
            view.power_source = msg.get("power_source")
            view.control = bool(msg.get("control", False))
            shared = msg.get("shared_with")
            view.shared_with = str(shared)[:500] if shared else None
            view.t0_unix = float(msg.get("t0_unix", time.time()))
            self._changed.notify_all()

    def _merge(self, node: int, records: list[Any]) -> None:
        """I/O phases a node's progress carried (those that ended since its last one): merged
        into the job's phases now, counted so that its final summary does not add them again
        (under the lock)."""
        view = self._nodes[node]
        for record in records[:MAX_PROGRESS_PHASES]:
            kind = str(record["kind"])
            ordinal = view.merged.get(kind, 0)
            view.merged[kind] = ordinal + 1
            if self._room(kind, ordinal):
                self._phase(kind, ordinal).add(record, view.t0_unix)

    def _final(self, node: int, summary: Mapping[str, Any]) -> None:
        records = summary.get("records") or []
        with self._changed:
            view = self._nodes[node]
            t0 = summary.get("t0_unix", view.t0_unix)
            t0 = None if t0 is None else float(t0)
            ordinals: dict[str, int] = {}
            for record in records:
                kind = str(record["kind"])
                ordinal = ordinals.get(kind, 0)
                ordinals[kind] = ordinal + 1
                if ordinal < view.merged.get(kind, 0):
                    continue  # merged from a progress message already
                if self._room(kind, ordinal):
                    self._phase(kind, ordinal).add(record, t0)
            view.summary = node_summary(summary)
            view.series = bounded_series(summary.get("series"))
            view.t0_unix = t0
            view.state = "finished"
            self._changed.notify_all()

    def _room(self, kind: str, ordinal: int) -> bool:
        if (kind, ordinal) in self._phases or len(self._phases) < MAX_JOB_PHASES:
            return True
        text = f"more than {MAX_JOB_PHASES} job phases: later ones are in the node totals only"
        if text not in self._notes:
            self._notes.append(text)
        return False

    def _phase(self, kind: str, ordinal: int) -> JobPhase:
        key = (kind, ordinal)
        phase = self._phases.get(key)
        if phase is None:
            phase = self._phases[key] = JobPhase(kind, ordinal)
        return phase

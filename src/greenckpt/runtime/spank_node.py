"""A node's agent under the Slurm plugin: one per job and node, held by the job's steps.

Why: with the SPANK plugin (``greenckpt_spank.so``, docs/admin-guide.md) there is no leader
process in the job script: ``slurmstepd`` starts, as root, one agent per node for each job step
that asked for greenckpt, before the step's tasks start. Two steps of one job may run on a
node at once (``srun ... &``), so the first step *starts* the node's agent and later ones
*join* it; each step *holds* it until the step ends, and when the last hold is released the
agent restores the node, writes the node's report and exits — so every step ends with its
node restored and reported, as the issue asks. The agent is the existing
:class:`~greenckpt.runtime.agent.NodeAgent` (the same runtime, socket, progress and final
summary as under ``greenckpt run --launcher slurm``); what this module adds is the plumbing
around it on one node:

- :class:`JobSpool`: the job's node-local, root-only folder (``/run/greenckpt-spank/job-<id>``,
  mode 0711): the control socket, the agent's socket for the ranks (owned by the job's user,
  mode 0600, so only that user's processes can connect), the agent's progress and log.
- :class:`LocalLeader`: stands in for the job's leader inside the agent's process (a loopback
  listener checked by a random token): it receives the agent's ``hello``, ``progress`` and
  ``final`` and turns them into files — the progress into the spool (root, node-local: what a
  died agent's record is made from), the hello and final summary into the user's report
  folder, *as the user* (:mod:`greenckpt.runtime.user_files`).
- :class:`ControlServer`: the steps' requests (``hold``, ``release``, ``status``) on the spool's
  control socket, and a watch that releases a step whose ``slurmstepd`` vanished without
  saying so.
- :func:`control_request`: the client side, used by the plugin's ``join`` and ``release``.

Design and the files written: docs/admin-guide.md ("What the plugin does on a node").
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import socket
import stat
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from greenckpt.durable import write_atomic
from greenckpt.errors import InvalidValueError
from greenckpt.runtime.job import (
    MAX_JOB_PHASES,
    decode_message,
    encode_message,
)
from greenckpt.runtime.job_bounds import MAX_SERIES_POINTS
from greenckpt.runtime.user_files import UserFilesError, Writer, write_as_user

__all__ = [
    "DEFAULT_SPOOL",
    "ControlServer",
    "JobSpool",
    "LocalLeader",
    "SessionPlace",
    "control_request",
    "pid_alive",
]

DEFAULT_SPOOL = Path("/run/greenckpt-spank")
"""Where agents keep their node-local job folders (``/run``: cleared at reboot)."""
CONTROL_SECONDS = 5.0
"""How long a control request waits for an answer (release: see :data:`RELEASE_SECONDS`)."""
RELEASE_SECONDS = 120.0
"""How long the last release waits for the node to be restored and its report written."""
WATCH_SECONDS = 1.0
"""How often the agent checks that the ``slurmstepd`` of every holding step still lives."""


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[-1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def _root_folder(path: Path, mode: int) -> None:
    """``path`` as a real folder owned by this process's user with ``mode`` (made if missing);
    InvalidValueError when it is a link, not a folder, or someone else's."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, mode)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise InvalidValueError(
            f"{path} is not a folder of uid {os.geteuid()} (a link, a file, or another "
            "user's): the plugin's spool must be root's own"
        )
    if stat.S_IMODE(st.st_mode) != mode:
        os.chmod(path, mode)


@dataclass(frozen=True)
class JobSpool:
    """The node-local folder of one job's agent (see the module docstring)."""

    folder: Path

    @classmethod
    def create(cls, base: Path, job_id: str) -> JobSpool:
        """The job's folder under ``base`` (both made 0711, checked to be this user's)."""
        if not job_id.replace("_", "").isdigit():
            raise InvalidValueError(f"job id {job_id!r} is not a Slurm job id")
        _root_folder(base, 0o711)
        folder = base / f"job-{job_id}"
        _root_folder(folder, 0o711)
        return cls(folder)

    @property
    def control(self) -> str:
        return str(self.folder / "control.sock")

    @property
    def socket(self) -> str:
        """The ranks' socket (``GREENCKPT_RUNTIME_SOCKET``)."""
        return str(self.folder / "agent.sock")

    @property
    def lock(self) -> Path:
        return self.folder / "lock"

    @property
    def log(self) -> Path:
        return self.folder / "agent.log"

    @property
    def state(self) -> Path:
        """The agent's record: pid, session place, hello, last progress (root's, JSON)."""
        return self.folder / "agent.json"

    @property
    def stage(self) -> Path:
        """Where the agent writes the node's report files before they are copied as the user."""
        return self.folder / "stage"

    def read_state(self) -> dict[str, Any]:
        try:
            doc = json.loads(self.state.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return doc if isinstance(doc, dict) else {}

    def write_state(self, doc: Mapping[str, Any]) -> None:
        write_atomic(self.state, json.dumps(doc) + "\n")

    def last_log_line(self) -> str:
        try:
            lines = self.log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        except OSError:
            return ""
        return lines[-1].strip() if lines else ""


@dataclass(frozen=True)
class SessionPlace:
    """Where a session's files go: ``<report>/nodes/node<K>/step<S>/``, written as ``writer``.

    A *session* is one life of a node's agent: from the step that started it to the release
    of its last holder. Steps that run one after the other on a node give one session each."""

    report: str
    node: int
    step: str
    writer: Writer

    @property
    def parts(self) -> tuple[str, str, str]:
        return ("nodes", f"node{self.node}", f"step{self.step}")

    @property
    def folder(self) -> str:
        return os.path.join(self.report, *self.parts)

    def write(self, files: Mapping[str, bytes]) -> list[str]:
        """Write ``files`` into the session folder as the user (UserFilesError on failure)."""
        return write_as_user(self.writer, self.report, self.parts, files)

    def write_json(self, name: str, doc: Mapping[str, Any]) -> list[str]:
        return self.write({name: (json.dumps(doc, indent=1) + "\n").encode()})

    def to_dict(self) -> dict[str, Any]:
        w = self.writer
        return {
            "report": self.report,
            "node": self.node,
            "step": self.step,
            "writer": {"uid": w.uid, "gid": w.gid, "groups": list(w.groups), "python": w.python},
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> SessionPlace:
        w = doc["writer"]
        writer = Writer(
            int(w["uid"]), int(w["gid"]), tuple(int(g) for g in w["groups"]), w["python"]
        )
        return cls(str(doc["report"]), int(doc["node"]), str(doc["step"]), writer)


def control_request(path: str, message: Mapping[str, Any], timeout: float) -> dict[str, Any]:
    """One request to an agent's control socket and its answer; OSError when nobody answers."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(path)
        sock.sendall(encode_message(message))
        buffer = b""
        while b"\n" not in buffer:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionResetError("the agent closed the connection without an answer")
            buffer += chunk
    try:
        return decode_message(buffer.partition(b"\n")[0])
    except InvalidValueError as exc:
        raise ConnectionResetError(f"the agent's answer is malformed: {exc}") from None


# ---------------------------------------------------------------------- inside the agent


@dataclass
class _Status:
    ready: bool = False
    hello: dict[str, Any] | None = None
    final_files: list[str] | None = None
    final_error: str | None = None
    done: threading.Event = field(default_factory=threading.Event)


class LocalLeader:
    """The agent's leader in its own process (see the module docstring). ``on_hello``
    runs once the agent's socket exists (the caller hands it to the user there)."""

    def __init__(
        self,
        spool: JobSpool,
        place: SessionPlace,
        token: str,
        *,
        on_hello: Callable[[dict[str, Any]], None],
    ) -> None:
        self.spool = spool
        self.place = place
        self.token = token
        self.on_hello = on_hello
        self.status = _Status()
        self._server = socket.create_server(("127.0.0.1", 0))
        self._conn: socket.socket | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve, name="greenckpt-spank-leader")
        self._thread.daemon = True

    @property
    def address(self) -> str:
        host, port = self._server.getsockname()[:2]
        return f"{host}:{port}"

    def start(self) -> LocalLeader:
        self._thread.start()
        return self

    def stop_agent(self) -> None:
        """Send ``stop`` to the agent (it restores, writes, sends its final)."""
        with self._lock:
            conn = self._conn
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.sendall(encode_message({"type": "stop"}))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._server.close()
        self.status.done.set()

    def _serve(self) -> None:
        while not self.status.done.is_set():
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            try:
                self._session(conn)
            finally:
                conn.close()

    def _session(self, conn: socket.socket) -> None:
        """One connection: refused unless its first message is a hello with our token."""
        buffer = b""
        greeted = False
        while True:
            try:
                chunk = conn.recv(1 << 20)
            except OSError:
                chunk = b""
            if not chunk:
                break
            buffer += chunk
            while b"\n" in buffer:
                line, _, buffer = buffer.partition(b"\n")
                try:
                    msg = decode_message(line)
                except InvalidValueError:
                    return
                if not greeted:
                    token = str(msg.get("token", "")).encode()
                    if msg.get("type") != "hello" or not hmac.compare_digest(
                        token, self.token.encode()
                    ):
                        return
                    greeted = True
                    with self._lock:
                        self._conn = conn
                    self._hello(msg)
                    with contextlib.suppress(OSError):  # the step's tasks start next: its
                        conn.sendall(encode_message({"type": "go"}))  # start-up ends here
                elif msg.get("type") == "progress":
                    self._progress(msg)
                elif msg.get("type") == "final":
                    self._final(msg.get("summary") or {})
                    return
        if greeted and self.status.final_files is None:  # the agent went without a final
            self.status.final_error = "the agent's connection closed before its final summary"
            self.status.done.set()

    def _hello(self, msg: Mapping[str, Any]) -> None:
        hello = {k: v for k, v in msg.items() if k not in ("token", "v", "type")}
        self.on_hello(hello)
        state = self.spool.read_state()
        state["hello"] = hello
        self.spool.write_state(state)
        self.status.hello = hello
        self.status.ready = True

    def _progress(self, msg: Mapping[str, Any]) -> None:
        """The last progress, and what every progress added (its I/O phases, its energy
        reading): a died agent's record carries them all, as a leader would have merged
        them (bounded like the leader's: MAX_JOB_PHASES phases, MAX_SERIES_POINTS readings)."""
        state = self.spool.read_state()
        state["progress"] = {k: v for k, v in msg.items() if k not in ("v", "type", "phases")}
        state["progress_unix"] = time.time()
        phases = state.setdefault("phases", [])
        room = max(MAX_JOB_PHASES - len(phases), 0)
        phases.extend(list(msg.get("phases") or [])[:room])
        readings = state.setdefault("energy", [])
        if msg.get("node_energy_j") is not None:
            readings.append([msg.get("run_s"), msg.get("node_energy_j")])
            if len(readings) > MAX_SERIES_POINTS:
                del readings[1::2]  # cumulative readings: thinning loses no energy
        with contextlib.suppress(OSError):
            self.spool.write_state(state)

    def _final(self, summary: dict[str, Any]) -> None:
        """The node's report files (staged by the agent as root) and its summary, written
        into the session folder as the user; the summary's ``files`` name those copies."""
        files: dict[str, bytes] = {}
        for path in summary.get("files") or []:
            staged = Path(path)
            if staged.parent == self.spool.stage and staged.is_file():
                files[staged.name] = staged.read_bytes()
        summary["files"] = [os.path.join(self.place.folder, name) for name in files]
        summary["session"] = {"node": self.place.node, "step": self.place.step}
        files["summary.json"] = (json.dumps(summary) + "\n").encode()
        try:
            self.status.final_files = self.place.write(files)
        except UserFilesError as exc:
            self.status.final_files = []
            self.status.final_error = f"the node's report could not be written: {exc.strerror}"
        self.status.done.set()


class ControlServer:
    """The steps' requests on the control socket (root only, mode 0600); see the module
    docstring. ``holds`` maps a step to its ``slurmstepd``'s pid; ``stop`` is called once,
    when the last hold goes, and must return when the node's report is written."""

    def __init__(
        self,
        spool: JobSpool,
        leader: LocalLeader,
        holds: Mapping[str, int],
        *,
        stop: Callable[[], None],
    ) -> None:
        self.spool = spool
        self.leader = leader
        self.holds: dict[str, int] = dict(holds)
        self._stop = stop
        self._stopping = False
        self._lock = threading.Lock()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(spool.control)
        old = os.umask(0o077)
        try:
            self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._server.bind(spool.control)
        finally:
            os.umask(old)
        self._server.listen(16)
        self._closed = threading.Event()
        self._answering: set[threading.Thread] = set()

    def start(self) -> ControlServer:
        for target, name in ((self._serve, "control"), (self._watch, "watch")):
            t = threading.Thread(target=target, name=f"greenckpt-spank-{name}", daemon=True)
            t.start()
        return self

    def close(self) -> None:
        """Stop taking requests; the answers under way are sent first (the last release's
        answer goes out after the report is written, just before the agent exits: without
        the wait the process could end between the two, and the step would hear nothing)."""
        self._closed.set()
        with contextlib.suppress(OSError):
            self._server.close()
        with contextlib.suppress(OSError):
            os.unlink(self.spool.control)
        for thread in list(self._answering):
            thread.join(CONTROL_SECONDS)

    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            thread = threading.Thread(target=self._answer, args=(conn,), daemon=True)
            self._answering = {t for t in self._answering if t.is_alive()} | {thread}
            thread.start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(CONTROL_SECONDS)
            try:
                line = b""
                while b"\n" not in line:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    line += chunk
                reply = self.handle(decode_message(line.partition(b"\n")[0]))
                conn.settimeout(RELEASE_SECONDS)
                conn.sendall(encode_message(reply))
            except (OSError, InvalidValueError):
                return

    def handle(self, msg: Mapping[str, Any]) -> dict[str, Any]:
        """One request: ``status``, ``hold`` (step, pid) or ``release`` (step)."""
        op = msg.get("op")
        status = self.leader.status
        if op == "status":
            return {"ok": True, "ready": status.ready, "stopping": self._stopping}
        step = str(msg.get("step", ""))
        if op == "hold":
            with self._lock:
                if self._stopping:
                    return {"ok": False, "stopping": True}
                self.holds[step] = int(msg.get("pid", 0))
            return {"ok": True, "ready": status.ready, "socket": self.spool.socket}
        if op == "release":
            return self.release(step)
        return {"ok": False, "error": f"unknown request {op!r}"}

    def release(self, step: str) -> dict[str, Any]:
        """Drop ``step``'s hold; the last one stops the agent and answers once the node is
        restored and its report written."""
        with self._lock:
            self.holds.pop(step, None)
            last = not self.holds and not self._stopping
            if last:
                self._stopping = True
            waiting = self._stopping
        if last:
            self._stop()
        status = self.leader.status
        if waiting and not status.done.wait(RELEASE_SECONDS):
            return {"ok": False, "error": "the node's report was not written in time"}
        return {
            "ok": True,
            "last": last,
            "files": status.final_files or [],
            "error": status.final_error,
        }

    def _watch(self) -> None:
        """Release the holds of steps whose ``slurmstepd`` is gone (killed without its exit
        callback): otherwise the agent would outlive its job."""
        while not self._closed.wait(WATCH_SECONDS):
            with self._lock:
                gone = [s for s, pid in self.holds.items() if pid > 0 and not pid_alive(pid)]
            for step in gone:
                threading.Thread(target=self.release, args=(step,), daemon=True).start()

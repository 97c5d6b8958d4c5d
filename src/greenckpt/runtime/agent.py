"""One node's agent in a job: that node's runtime and socket, reporting to the job's leader.

Why a process per node: a node's frequency, I/O parallelism and C-states are that node's, its
meters can only be read there, and it must be restored there — even when the rest of the job
fails. So each node runs a :class:`NodeAgent`: its own
:class:`~greenckpt.runtime.session.Runtime` (policy, meters, crash-safe state file) and
:class:`~greenckpt.runtime.notify.NotifyServer` on a node-local socket that only its own ranks
use. It tells the leader (:class:`~greenckpt.runtime.job.JobCollector`) who it is, sends a
bounded progress snapshot every few seconds, and on ``stop`` (or SIGTERM/SIGINT) restores the
node, writes the node's own report files and sends its final summary: totals and phases, and
a power series of at most a thousand points — raw samples stay on the node. Design:
docs/design/cluster.md.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

from greenckpt.ckpt.notify_client import NotifyError, one_line
from greenckpt.errors import GreenckptError, InvalidValueError
from greenckpt.phases import IO_KINDS
from greenckpt.platform.hostid import host_id
from greenckpt.platform.root import PlatformError
from greenckpt.runtime.job import (
    MAX_PROGRESS_PHASES,
    JobError,
    decode_message,
    encode_message,
)
from greenckpt.runtime.job_bounds import MAX_SERIES_POINTS
from greenckpt.runtime.job_phase import LEVER_FAILED
from greenckpt.runtime.modelled import ModelledEpe, with_modelled_epe
from greenckpt.runtime.notify import NotifyServer
from greenckpt.runtime.run_report import PhaseRecord, RunReport
from greenckpt.runtime.session import Runtime

__all__ = ["NodeAgent", "downsample", "parse_address", "tell_unable"]

PROGRESS_SECONDS = 2.0
"""How often an agent sends its progress snapshot."""
PROGRESS_PHASE_KEYS = (
    "kind",
    "start_s",
    "end_s",
    "ok",
    "node_energy_j",
    "power_source",
    "level",
    "background",
)
"""What of a phase record the leader needs to merge it into the job's phases."""
_CONNECT_SECONDS = 10.0
_UNABLE_SECONDS = 5.0

WriteFiles = Callable[[RunReport], Sequence[str]]
"""Writes a node's report files (report/ does it; the runtime layer cannot import it)."""


def parse_address(text: str) -> tuple[str, int]:
    """``host:port`` of the leader; InvalidValueError naming what is wrong."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidValueError(f"leader address {text!r} is not host:port, e.g. 127.0.0.1:4711")
    return host.strip("[]"), int(port)


def downsample(t_s: Sequence[float], watts: Sequence[float], points: int) -> dict[str, list[float]]:
    """At most ``points`` points: the mean power of consecutive blocks of samples, at the end
    time of each block (energy-preserving for evenly spaced samples)."""
    n = len(watts)
    if n <= points:
        return {"t_s": list(t_s[:n]), "power_w": list(watts)}
    out_t: list[float] = []
    out_w: list[float] = []
    for i in range(points):
        lo, hi = i * n // points, (i + 1) * n // points
        out_t.append(float(t_s[hi - 1]))
        out_w.append(sum(watts[lo:hi]) / (hi - lo))
    return {"t_s": out_t, "power_w": out_w}


@dataclass(frozen=True)
class AgentIdentity:
    """Who an agent is in its job."""

    node: int
    job_id: str
    socket_path: str
    leader: str
    token: str


def tell_unable(identity: AgentIdentity, reason: str) -> bool:
    """Send the leader this node's one-line reason it cannot take part (an ``unable``
    message), so the leader prints it the moment it is known instead of waiting out its
    hello timeout. Best effort within a few seconds; whether it was sent."""
    try:
        host, port = parse_address(identity.leader)
        with socket.create_connection((host, port), timeout=_UNABLE_SECONDS) as conn:
            conn.settimeout(_UNABLE_SECONDS)
            conn.sendall(
                encode_message(
                    {
                        "type": "unable",
                        "token": identity.token,
                        "job": identity.job_id,
                        "node": identity.node,
                        "host": socket.gethostname(),
                        "reason": reason[:1000],
                    }
                )
            )
    except (OSError, GreenckptError):
        return False
    return True


class NodeAgent:
    """A node's agent (see the module docstring). ``runtime``: this node's runtime, not yet
    started; ``write_files``: writes the node's report files and returns their paths;
    ``modelled``: the node's modelled EPE; ``earlier``: adds the work this node's run in an
    earlier job lost (:class:`~greenckpt.runtime.earlier_run.EarlierRun`) to its report."""

    def __init__(
        self,
        identity: AgentIdentity,
        runtime: Runtime,
        write_files: WriteFiles,
        *,
        progress_seconds: float = PROGRESS_SECONDS,
        modelled: Callable[[RunReport], ModelledEpe] | None = None,
        earlier: Callable[[RunReport], RunReport] | None = None,
    ) -> None:
        self.identity = identity
        self.modelled = modelled
        self.earlier = earlier
        self.heard: int | None = None
        """Requests the node's socket served (0: no notifier announced anything to it)."""
        self.runtime = runtime
        self.write_files = write_files
        self.progress_seconds = progress_seconds
        self._stop = threading.Event()
        self._leader: socket.socket | None = None
        self._buffer = bytearray()
        self._sent: set[int] = set()
        self.report: RunReport | None = None

    def request_stop(self, signum: int | None = None, frame: FrameType | None = None) -> None:
        """Stop as on the leader's ``stop`` (a signal handler too)."""
        self._stop.set()

    def run(self) -> int:
        """Serve until stopped; 0, or JobError (one line naming the node) when it cannot
        start. The node is restored whatever happens."""
        node = self.identity.node
        previous = self._install_signals()
        try:
            t0_unix = time.time()
            try:
                self.runtime.start(application=False)  # start-up until the leader's go
            except (PlatformError, OSError, GreenckptError) as exc:
                raise JobError(f"node {node}: its runtime cannot start: {one_line(exc)}") from None
            try:
                server = NotifyServer(self.runtime, self.identity.socket_path).start()
            except NotifyError as exc:
                self._close_runtime()
                raise JobError(f"node {node}: {one_line(exc)}") from None
            try:
                self._connect(t0_unix)
                self._serve()
            finally:
                server.close()
                self.heard = server.heard
                self._close_runtime()
            self._final(t0_unix)
            return 0
        finally:
            self._restore_signals(previous)
            if self._leader is not None:
                self._leader.close()

    # ------------------------------------------------------------------ steps

    def _connect(self, t0_unix: float) -> None:
        host, port = parse_address(self.identity.leader)
        try:
            self._leader = socket.create_connection((host, port), timeout=_CONNECT_SECONDS)
        except OSError as exc:
            raise JobError(
                f"node {self.identity.node}: cannot reach the job's leader at "
                f"{self.identity.leader} ({exc.strerror or exc})"
            ) from None
        power = self.runtime.power
        self._send(
            {
                "type": "hello",
                "token": self.identity.token,
                "job": self.identity.job_id,
                "node": self.identity.node,
                "host": socket.gethostname(),
                "host_id": host_id(self.runtime.root),
                "pid": os.getpid(),
                "socket": self.identity.socket_path,
                "power_source": None if power is None else power.source,
                "control": self.runtime.frequency_control or self.runtime.cstate_control,
                "shared_with": self.runtime.shared_with,
                "t0_unix": t0_unix,
            }
        )

    def _serve(self) -> None:
        """Progress every few seconds until ``stop``, a signal, or the leader is gone; the
        leader's ``go`` (its command starts) ends this node's start-up."""
        assert self._leader is not None
        self._leader.settimeout(0.2)
        started = time.monotonic()
        next_progress = started
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= next_progress:
                self._send(self._progress(now - started))
                next_progress = now + self.progress_seconds
            if self._receive_stop():
                break
        self.runtime.application_ended()

    def _receive_stop(self) -> bool:
        assert self._leader is not None
        try:
            chunk = self._leader.recv(4096)
        except TimeoutError:
            return False
        except OSError:
            return True  # the leader is gone: restore, keep the node's own report
        if not chunk:
            return True
        self._buffer += chunk
        while b"\n" in self._buffer:
            line, _, rest = bytes(self._buffer).partition(b"\n")
            self._buffer = bytearray(rest)
            with contextlib.suppress(InvalidValueError):
                kind = decode_message(line).get("type")
                if kind == "go":
                    self.runtime.application_started()
                elif kind == "stop":
                    return True
        return False

    def _new_phases(self, records: Sequence[PhaseRecord]) -> list[dict[str, Any]]:
        """The I/O phases that ended since the last progress (at most MAX_PROGRESS_PHASES;
        the rest go with the next): the leader merges them at once, so a node that dies later
        still has its checkpoints in the job's phases. Compute spans wait for the final
        summary: a restart may still re-label them as lost."""
        new = [r for r in records if r.kind in IO_KINDS and r.index not in self._sent]
        new = new[:MAX_PROGRESS_PHASES]
        self._sent.update(r.index for r in new)
        return [_progress_phase(r) for r in new]

    def _progress(self, t_s: float) -> dict[str, Any]:
        records = self.runtime.records
        run_s, node_energy = self.runtime.energy_so_far()
        by_kind: dict[str, dict[str, Any]] = {}
        for r in records:
            total = by_kind.setdefault(r.kind, {"count": 0, "seconds": 0.0, "energy_j": 0.0})
            total["count"] += 1
            total["seconds"] += r.seconds
            if total["energy_j"] is not None and r.node_energy_j is not None:
                total["energy_j"] += r.node_energy_j
            else:
                total["energy_j"] = None
        return {
            "type": "progress",
            "t_s": t_s,
            "records": len(records),
            "energy_j": _energy(records),
            "by_kind": by_kind,
            "run_s": run_s,
            "node_energy_j": node_energy,
            "phases": self._new_phases(records),
        }

    def _close_runtime(self) -> None:
        try:
            self.runtime.close()
        except PlatformError as exc:  # the state file is kept for greenckpt restore
            self.runtime.note(f"node {self.identity.node} could not be fully restored: {exc}")

    def _final(self, t0_unix: float) -> None:
        report = self.runtime.report(synthetic=not self.runtime.root.is_real)
        modelled = self._modelled(report)
        if modelled is not None:
            report = with_modelled_epe(report, modelled)
        if self.earlier is not None:  # the work this node's run in an earlier job lost
            report = self.earlier(report)
        self.report = report
        files = [str(p) for p in self.write_files(report)]
        summary = report.to_dict(include_trace=False)
        if modelled is not None:
            summary["modelled_epe"] = modelled.to_dict()
        summary["t0_unix"] = t0_unix
        summary["files"] = files
        summary["announcements"] = self.heard
        if report.trace is not None:
            series = downsample(report.trace.t_s, report.trace.watts, MAX_SERIES_POINTS)
            summary["series"] = {**series, "source": report.trace.source}
        notes = list(summary["notes"])
        for keep in (None, ("checkpoint", "restart", "flush"), ()):
            if keep is not None:
                summary["records"] = [r for r in summary["records"] if r["kind"] in keep]
                summary["notes"] = [
                    *notes,
                    "phase records left out of the final summary (too many for one "
                    "message): see this node's own report files",
                ]
            try:
                self._send({"type": "final", "summary": summary})
                return
            except JobError:
                continue

    def _modelled(self, report: RunReport) -> ModelledEpe | None:
        """This node's modelled EPE at its own interval (``modelled``), or why there is none."""
        if self.modelled is None:
            return None
        try:
            return self.modelled(report)
        except (GreenckptError, OSError, ValueError) as exc:
            return ModelledEpe(None, f"no modelled EPE: {one_line(exc)}")

    def _send(self, message: dict[str, Any]) -> None:
        if self._leader is None:
            return
        data = encode_message(message)
        try:
            self._leader.settimeout(_CONNECT_SECONDS)
            self._leader.sendall(data)
            self._leader.settimeout(0.2)
        except OSError:
            self._stop.set()  # the leader is gone; the node is restored all the same

    # ------------------------------------------------------------------ signals

    def _install_signals(self) -> dict[int, Any]:
        previous: dict[int, Any] = {}
        if threading.current_thread() is not threading.main_thread():
            return previous
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, self.request_stop)
        return previous

    @staticmethod
    def _restore_signals(previous: dict[int, Any]) -> None:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


def _energy(records: Sequence[PhaseRecord]) -> float | None:
    fg = [r for r in records if not r.background]
    if any(r.node_energy_j is None for r in fg):
        return None
    return sum(r.node_energy_j or 0.0 for r in fg)


def _progress_phase(record: PhaseRecord) -> dict[str, Any]:
    """A phase as a progress message carries it; with ``settings`` (source, the levers beyond
    the core clock applied, the notes of levers that failed) only when it applied or lost a
    lever, so the job report can say which levers its phases used (bounded: a few notes)."""
    doc = record.to_dict()
    out = {k: doc[k] for k in PROGRESS_PHASE_KEYS}
    settings = doc.get("settings")
    if settings is not None:
        failed = [str(n)[:300] for n in settings["notes"] if str(n).startswith(LEVER_FAILED)]
        if settings["levers"] or failed:
            out["settings"] = {
                "source": settings["source"],
                "levers": settings["levers"],
                "notes": failed[:4],
            }
    return out

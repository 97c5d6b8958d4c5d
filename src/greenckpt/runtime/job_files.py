"""A job report from the files the nodes' agents left in a report folder (the Slurm plugin).

Why: under the SPANK plugin no leader process lives through the job: each node's agent
writes its own files into ``<report>/nodes/node<K>/step<S>/`` (one folder per *session*: the
life of the node's agent from the step that started it to the end of its last holder), and
the job report is assembled afterwards — by the batch step as the batch script ends, or by
``greenckpt job-report JOBID`` — with the same aggregation as the leader's
(:class:`~greenckpt.runtime.job.JobCollector`, fed offline), so that both paths give the same
report. A session folder holds

- ``hello.json``: written as the agent started (host, pid, power source, control, ...);
- ``summary.json``: its final summary (as sent to a leader), with report.json/phases.csv/...
  — the session **finished**;
- ``died.json``: written by the step's end when the agent was gone without a summary, with
  its last progress — **died**;
- ``unmanaged.json``: the agent could not start, with the one-line reason — **unmanaged**.

A ``hello.json`` alone is an agent still running or gone without trace: the assembly waits
(bounded) for it, then counts it as died. A node with several sessions (steps one after
another) is merged into one node view: records in time order, totals summed
(:func:`merge_sessions`). Every file is read as the caller, regular files only, bounded.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from greenckpt.errors import InvalidValueError
from greenckpt.files import read_regular
from greenckpt.runtime.agent import downsample
from greenckpt.runtime.job import (
    MAX_MESSAGE_BYTES,
    MAX_PROGRESS_PHASES,
    JobCollector,
)
from greenckpt.runtime.job_bounds import MAX_SERIES_POINTS, bounded_progress
from greenckpt.runtime.job_report import JobReport

__all__ = [
    "LAUNCHER",
    "NodeFiles",
    "OfflineCollector",
    "Session",
    "assemble_job_report",
    "merge_sessions",
]

LAUNCHER = "slurm-spank"
"""The job report's ``launcher`` for jobs run under the SPANK plugin."""
_STEP = re.compile(r"step(\d+)")
_NODE = re.compile(r"node(\d+)")
_SUMMED = ("count", "failed", "seconds", "energy_j", "cpu_s")


class OfflineCollector(JobCollector):
    """A :class:`JobCollector` fed from files instead of connections (never started): the
    nodes' hello fields and final summaries (or last progress) go through the same
    aggregation as when they arrive over the wire."""

    def _identify(self, node: int, ident: Mapping[str, Any]) -> None:
        if node not in self._nodes:
            raise InvalidValueError(f"node {node} is not a node of this job")
        view = self._nodes[node]
        view.host, view.pid = str(ident.get("host", ""))[:200], ident.get("pid")
        view.power_source, view.control = ident.get("power_source"), ident.get("control")
        host_id, shared = ident.get("host_id"), ident.get("shared_with")
        view.host_id = str(host_id)[:64] if host_id else None
        view.shared_with = str(shared)[:500] if shared else None
        t0 = ident.get("t0_unix")
        view.t0_unix = float(t0) if isinstance(t0, int | float) else view.t0_unix

    def accept_final(self, node: int, summary: Mapping[str, Any], **ident: Any) -> None:
        """``node`` finished: its hello fields (``ident``) and final summary."""
        with self._changed:
            self._identify(node, ident)
        self._final(node, summary)

    def accept_died(
        self,
        node: int,
        reason: str,
        progress: Mapping[str, Any] | None,
        *,
        phases: Sequence[Any] = (),
        energy: Sequence[Any] = (),
        **ident: Any,
    ) -> None:
        """``node``'s agent ended without a final summary: died, with its last progress, the
        I/O phases and energy readings all its progress messages carried (merged and drawn
        as the leader does on the wire)."""
        with self._changed:
            self._identify(node, ident)
            view = self._nodes[node]
            view.progress = None if progress is None else bounded_progress(progress)
            for start in range(0, len(phases), MAX_PROGRESS_PHASES):
                self._merge(node, list(phases[start : start + MAX_PROGRESS_PHASES]))
            for reading in energy:
                if isinstance(reading, list | tuple) and len(reading) == 2:
                    view.add_energy_point(reading[0], reading[1])
            view.series = view.progress_series()
            view.state, view.reason = "died", reason
            self._changed.notify_all()


@dataclass
class Session:
    """One session folder's files (see the module docstring)."""

    step: int
    folder: Path
    hello: dict[str, Any] | None = None
    summary: dict[str, Any] | None = None
    died: dict[str, Any] | None = None
    unmanaged: dict[str, Any] | None = None

    @property
    def settled(self) -> bool:
        """Whether the session's outcome is known (not a hello alone)."""
        return any(d is not None for d in (self.summary, self.died, self.unmanaged))


@dataclass
class NodeFiles:
    """Every session of one node, in step order."""

    node: int
    sessions: list[Session] = field(default_factory=list)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(read_regular(path, limit=MAX_MESSAGE_BYTES).decode("utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        return {"unreadable": f"{path.name}: {getattr(exc, 'strerror', None) or exc}"}
    return doc if isinstance(doc, dict) else {"unreadable": f"{path.name}: not an object"}


def read_nodes(report: Path) -> dict[int, NodeFiles]:
    """Every node folder under ``report/nodes`` with its sessions."""
    out: dict[int, NodeFiles] = {}
    base = report / "nodes"
    if not base.is_dir():
        return out
    for node_dir in sorted(base.iterdir()):
        m = _NODE.fullmatch(node_dir.name)
        if m is None or not node_dir.is_dir() or node_dir.is_symlink():
            continue
        files = out.setdefault(int(m.group(1)), NodeFiles(int(m.group(1))))
        for step_dir in node_dir.iterdir():
            s = _STEP.fullmatch(step_dir.name)
            if s is None or not step_dir.is_dir() or step_dir.is_symlink():
                continue
            files.sessions.append(
                Session(
                    int(s.group(1)),
                    step_dir,
                    hello=_read_json(step_dir / "hello.json"),
                    summary=_read_json(step_dir / "summary.json"),
                    died=_read_json(step_dir / "died.json"),
                    unmanaged=_read_json(step_dir / "unmanaged.json"),
                )
            )
        files.sessions.sort(key=lambda x: x.step)
    return out


def _sum(a: Any, b: Any) -> Any:
    if a is None or b is None:
        return None
    return a + b


def _merge_totals(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    out = dict(rows[0])
    for row in rows[1:]:
        for key in _SUMMED:
            if key in out or key in row:
                out[key] = _sum(out.get(key), row.get(key))
    seconds, energy = out.get("seconds"), out.get("energy_j")
    if "mean_power_w" in out:
        out["mean_power_w"] = energy / seconds if energy is not None and seconds else None
    return out


def merge_sessions(summaries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One node's sessions' final summaries as one: records in order (times from the first
    session's start), totals per kind and level summed, notes and files joined, the power
    series joined and bounded. One summary is returned unchanged."""
    if len(summaries) == 1:
        return dict(summaries[0])
    first = summaries[0]
    t0 = float(first.get("t0_unix") or 0.0)
    merged: dict[str, Any] = dict(first)
    records: list[dict[str, Any]] = []
    series_t: list[float] = []
    series_w: list[float] = []
    for s in summaries:
        shift = float(s.get("t0_unix") or t0) - t0
        for r in s.get("records") or []:
            records.append(
                {**r, "start_s": float(r["start_s"]) + shift, "end_s": float(r["end_s"]) + shift}
            )
        series = s.get("series") or {}
        series_t += [float(t) + shift for t in series.get("t_s", [])]
        series_w += [float(w) for w in series.get("power_w", [])]
    merged["records"] = records
    merged["total"] = _merge_totals([s.get("total") or {} for s in summaries])
    for key in ("useful_compute_s", "rework_s", "lost_s"):
        values = [s.get(key) for s in summaries]
        merged[key] = None if any(v is None for v in values) else sum(values)
    kinds: dict[str, list[Mapping[str, Any]]] = {}
    levels: dict[tuple[str, Any], list[Mapping[str, Any]]] = {}
    for s in summaries:
        for kind, total in (s.get("by_kind") or {}).items():
            kinds.setdefault(kind, []).append(total)
        for total in s.get("by_level") or []:
            levels.setdefault((total["kind"], total["level"]), []).append(total)
    merged["by_kind"] = {k: _merge_totals(v) for k, v in kinds.items()}
    merged["by_level"] = [_merge_totals(v) for v in levels.values()]
    merged["notes"] = [n for s in summaries for n in s.get("notes", [])] + [
        f"{len(summaries)} sessions of this node's agent (steps one after another) merged"
    ]
    merged["files"] = [f for s in summaries for f in s.get("files", [])]
    merged["synthetic"] = any(bool(s.get("synthetic")) for s in summaries)
    if series_t:
        merged["series"] = {
            **downsample(series_t, series_w, MAX_SERIES_POINTS),
            "source": (first.get("series") or {}).get("source"),
        }
    merged["modelled_epe"] = {
        "epe_w": None,
        "source": None,
        "derivation": "no modelled EPE: the node ran several sessions (see each one's report)",
    }
    return merged


def _ident(hello: Mapping[str, Any] | None) -> dict[str, Any]:
    h = hello or {}
    pid = h.get("pid")
    return {
        "host": str(h.get("host", "")),
        "pid": pid if isinstance(pid, int) else None,
        "power_source": h.get("power_source"),
        "control": None if h.get("control") is None else bool(h.get("control")),
        "host_id": str(h["host_id"]) if h.get("host_id") else None,
        "t0_unix": h.get("t0_unix"),
        "shared_with": h.get("shared_with"),
    }


def _wait(report: Path, wait_s: float) -> dict[int, NodeFiles]:
    """The nodes' files, once every session with a hello is settled or ``wait_s`` passed."""
    deadline = time.monotonic() + wait_s
    while True:
        nodes = read_nodes(report)
        pending = [s for n in nodes.values() for s in n.sessions if not s.settled]
        if not pending or time.monotonic() >= deadline:
            return nodes
        time.sleep(0.5)


def assemble_job_report(
    report: Path,
    job_id: str,
    *,
    nodes: int | None = None,
    wait_s: float = 30.0,
    exit_status: int | None = None,
) -> JobReport:
    """The job report of ``job_id`` from ``report``'s node folders (module docstring).
    ``nodes``: the job's node count (default: the largest the hellos name, else the node
    folders found); InvalidValueError when the folder holds nothing of a greenckpt job."""
    found = _wait(report, wait_s)
    if not found:
        raise InvalidValueError(
            f"{report} holds no node folders (nodes/node<K>/step<S>/): no greenckpt step of "
            f"job {job_id} wrote there (was the job run with --greenckpt?)"
        )
    hellos = [s.hello for n in found.values() for s in n.sessions if s.hello]
    named = [int(h["nodes"]) for h in hellos if isinstance(h.get("nodes"), int)]
    count = nodes or max([*named, max(found) + 1])
    collector = OfflineCollector(job_id, count, "offline")
    try:
        return _build(collector, found, count, job_id, report, exit_status)
    finally:
        collector.close()


def _build(
    collector: OfflineCollector,
    found: Mapping[int, NodeFiles],
    count: int,
    job_id: str,
    report: Path,
    exit_status: int | None,
) -> JobReport:
    starts: list[float] = []
    ends: list[float] = []
    command: list[str] = []
    for node in range(count):
        files = found.get(node)
        if files is None or not files.sessions:
            collector.mark_unmanaged(
                node, "no greenckpt record from this node (no step of the job ran there)"
            )
            continue
        _accept(collector, files, starts, ends)
        for s in files.sessions:
            argv = (s.hello or {}).get("command")
            if not command and isinstance(argv, list):
                command = [str(a) for a in argv]
    started = min(starts) if starts else time.time()
    ended = max([*ends, started])
    return JobReport.build(
        job_id=job_id,
        launcher=LAUNCHER,
        command=command,
        nodes=collector.nodes(),
        phases=collector.phases(),
        started_unix=started,
        ended_unix=ended,
        exit_status=exit_status,
        notes=[f"assembled from {report}/nodes by the Slurm plugin's files", *collector.notes],
    )


def _accept(
    collector: OfflineCollector, files: NodeFiles, starts: list[float], ends: list[float]
) -> None:
    """One node's sessions into the collector: died if any session died (its last progress),
    else the finished sessions merged, else unmanaged with the first reason."""
    node = files.node
    for s in files.sessions:
        t0 = (s.hello or {}).get("t0_unix") or (s.summary or {}).get("t0_unix")
        if isinstance(t0, int | float) and math.isfinite(t0):
            starts.append(float(t0))
            total = ((s.summary or {}).get("total") or {}).get("seconds")
            if isinstance(total, int | float):
                ends.append(float(t0) + float(total))
    died = [s for s in files.sessions if s.died is not None or (s.hello and not s.settled)]
    finished = [
        s for s in files.sessions if s.summary is not None and "unreadable" not in s.summary
    ]
    if died:
        s = died[0]
        doc = s.died or {}
        reason = str(doc.get("reason") or "its agent left no final summary (still running?)")
        progress = doc.get("progress")
        phases, energy = doc.get("phases"), doc.get("energy")
        collector.accept_died(
            node,
            reason,
            progress if isinstance(progress, dict) else None,
            phases=phases if isinstance(phases, list) else [],
            energy=energy if isinstance(energy, list) else [],
            **_ident(s.hello or doc.get("hello")),
        )
        if finished:
            collector.note(
                f"node {node}: {len(finished)} finished session(s) beside the one that died "
                "are in its session folders only"
            )
        return
    if finished:
        summaries = [s.summary for s in finished if s.summary is not None]
        collector.accept_final(node, merge_sessions(summaries), **_ident(finished[0].hello))
        return
    record: dict[str, Any] = next((s.unmanaged for s in files.sessions if s.unmanaged), {})
    reason = str(record.get("reason") or record.get("unreadable") or "its files are unreadable")
    collector.mark_unmanaged(node, reason)

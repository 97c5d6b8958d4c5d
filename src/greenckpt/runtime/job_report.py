"""The job report: one report for every node of a job (format ``greenckpt-job-report`` v1).

Why: a job's energy is what the site pays for, and a node that failed or was never managed
must be seen, not averaged away. Built from the leader's bounded view
(:class:`~greenckpt.runtime.job.JobCollector`): per node its state, time, energy and where a
died node's accounting ends; per kind and level the sums over nodes; job phases (the n-th
checkpoint of every node is one job phase); the observed job EPE; the job's power as a sum
with a min/max envelope across nodes and the outlier node's series — every figure with its
source. The format is in docs/formats.md; the design in docs/design/cluster.md.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from greenckpt.durable import write_atomic
from greenckpt.errors import InvalidValueError
from greenckpt.files import read_regular
from greenckpt.jsonout import dumps
from greenckpt.phases import IO_KINDS
from greenckpt.runtime.job import NodeView
from greenckpt.runtime.job_phase import JobPhase
from greenckpt.runtime.records import percent_difference
from greenckpt.runtime.run_report import REPORT_MODE

__all__ = [
    "JOB_REPORT_FORMAT",
    "JOB_REPORT_VERSION",
    "JobEnd",
    "JobReport",
    "load_job_report",
    "silent_nodes",
]

JOB_REPORT_FORMAT = "greenckpt-job-report"
JOB_REPORT_VERSION = 1
GRID_POINTS = 500
"""Points of the job's power series (sum, envelope, outlier node)."""

EPE_DEFINITION = (
    "job energy (every node's, summed) / seconds of useful compute (compute + rework, the "
    "mean over the nodes that finished): the job's watts per second of useful work"
)
_CSV = (
    "kind",
    "ordinal",
    "levels",
    "nodes",
    "failed",
    "node_seconds",
    "max_seconds",
    "energy_j",
    "source",
    "nodes_without_energy",
    "start_s",
    "end_s",
    "background",
)


JobEnd = Literal["completed", "failed", "cancelled"]
"""How a job's command ended: status 0, another status, or a signal the leader received."""


@dataclass(frozen=True)
class JobReport:
    """A job report as its JSON document (``doc``); build with :meth:`build`."""

    doc: Mapping[str, Any]

    @classmethod
    def build(
        cls,
        *,
        job_id: str,
        launcher: str,
        command: Sequence[str],
        nodes: Sequence[NodeView],
        phases: Iterable[JobPhase],
        started_unix: float,
        ended_unix: float,
        exit_status: int | None = None,
        notes: Iterable[str] = (),
        baselines: Sequence[tuple[str, JobReport]] = (),
        ended: JobEnd = "completed",
    ) -> JobReport:
        """The report of a job from the leader's view of its nodes and phases; ``ended``: how
        the job's command ended (completed, failed: a non-zero status, cancelled: a signal),
        which every node that finished ended with too."""
        rows = [_node_row(v) for v in nodes]
        for r in rows:
            r["ended"] = ended if r["state"] == "finished" else None
        accounted = [r for r in rows if r["state"] in ("finished", "died")]
        missing = [r["node"] for r in accounted if r["energy_j"] is None]
        machines = _machines(accounted)
        energy = sum(_machine_energy(m) for m in machines) if accounted else None
        seconds = max(ended_unix - started_unix, 0.0)
        useful = [r["useful_compute_s"] for r in rows if r["state"] == "finished"]
        useful_s = sum(useful) / len(useful) if useful else None
        source = _combine(r["power_source"] for r in accounted)
        epe = None if energy is None or not useful_s else energy / useful_s
        doc: dict[str, Any] = {
            "format": JOB_REPORT_FORMAT,
            "format_version": JOB_REPORT_VERSION,
            "synthetic": any(bool((v.summary or {}).get("synthetic")) for v in nodes),
            "job": {
                "id": job_id,
                "launcher": launcher,
                "command": list(command),
                "exit_status": exit_status,
                "ended": ended,
                "nodes": len(rows),
                "node_list": [r["host"] or f"node{r['node']}" for r in rows],
            },
            "states": {s: [r["node"] for r in rows if r["state"] == s] for s in _STATES},
            "total": {
                "seconds": seconds,
                "node_seconds": sum(r["seconds"] or 0.0 for r in accounted),
                "energy_j": energy,
                "complete": not missing and all(r["state"] == "finished" for r in rows),
                "nodes_without_energy": missing,
                "mean_power_w": None if energy is None or seconds <= 0 else energy / seconds,
                "source": source,
            },
            "useful_compute_s": useful_s,
            "epe": _epe(epe, source, rows),
            "nodes": rows,
            "by_kind": _by_kind(nodes),
            "by_level": _by_level(nodes),
            "phases": [p.to_dict(started_unix) for p in phases],
            "series": _series(nodes, started_unix, ended_unix),
            "machines": len(machines),
            "notes": [*dict.fromkeys(notes), *_node_notes(rows), *_shared_notes(machines)],
        }
        doc["comparisons"] = [_compare(doc, label, b.doc) for label, b in baselines]
        return cls(doc)

    # -- figures the text shows ----------------------------------------------------------

    @property
    def nodes(self) -> list[dict[str, Any]]:
        return list(self.doc["nodes"])

    def to_dict(self) -> dict[str, Any]:
        return dict(self.doc)

    def write_json(self, path: str | os.PathLike[str]) -> Path:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, dumps(self.to_dict()) + "\n", mode=REPORT_MODE)
        return target

    def write_csv(self, path: str | os.PathLike[str]) -> Path:
        """One row per job phase."""
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(_CSV)
        for p in self.doc["phases"]:
            row = {**p, "levels": " ".join(str(x) for x in p["levels"])}
            writer.writerow(["" if row[c] is None else row[c] for c in _CSV])
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, buf.getvalue(), mode=REPORT_MODE)
        return target


_STATES = ("finished", "died", "unmanaged", "running", "starting")


def _node_row(v: NodeView) -> dict[str, Any]:
    s = v.summary or {}
    total = s.get("total") or {}
    p = v.progress or {}
    died = v.state == "died"
    notes = [str(n) for n in s.get("notes", [])]
    return {
        "node": v.node,
        "state": v.state,
        "host": v.host,
        "host_id": v.host_id,
        "pid": v.pid,
        "socket": v.socket,
        "control": v.control,
        "shared_with": v.shared_with,
        "reason": v.reason,
        "accounting_ends": v.ends_at() if died else None,
        "seconds": float(p.get("t_s", 0.0)) if died else total.get("seconds"),
        "energy_j": p.get("energy_j") if died else total.get("energy_j"),
        "power_source": (s.get("power") or {}).get("source") or v.power_source,
        "meters": list((s.get("power") or {}).get("meters", [])),
        "meter_problems": [n for n in notes if "meter" in n and _bad(n)],
        "useful_compute_s": s.get("useful_compute_s"),
        "modelled_epe_w": (s.get("modelled_epe") or {}).get("epe_w") if not died else None,
        "modelled_source": (s.get("modelled_epe") or {}).get("source") if not died else None,
        "modelled_derivation": (s.get("modelled_epe") or {}).get("derivation"),
        "records": s.get("records") if not died else p.get("records"),
        "files": list(s.get("files", [])),
        "notes": notes,
        "announcements": s.get("announcements"),
        "previous_lost": s.get("previous_lost"),
    }


MODELLED_DEFINITION = (
    "the sum over the finished nodes of each node's modelled EPE: the model (saito2013 "
    "section 6) at that node's own observed interval, with the checkpoint and restart "
    "figures its profile predicts for the settings applied on it (docs/formats.md)"
)


def _epe(
    observed: float | None, source: str | None, rows: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The observed job EPE beside the modelled one (or the note saying why there is none)."""
    modelled, modelled_source, note = _modelled(rows)
    pct = None
    if observed is not None and modelled:
        value = percent_difference(observed, modelled)
        pct = None if math.isnan(value) else value
    return {
        "observed_w": observed,
        "observed_source": source,
        "modelled_w": modelled,
        "modelled_source": modelled_source,
        "observed_vs_modelled_pct": pct,
        "modelled_note": note,
        "definition": EPE_DEFINITION,
        "modelled_definition": MODELLED_DEFINITION,
    }


def _modelled(rows: Sequence[Mapping[str, Any]]) -> tuple[float | None, str | None, str]:
    """The modelled job EPE, its source and a note: the sum of the finished nodes' figures,
    or None with the reasons (grouped, nodes named compactly) when any of them has none."""
    finished = [r for r in rows if r["state"] == "finished"]
    if not finished:
        return None, None, "no modelled job EPE: no node finished"
    reasons: dict[str, list[int]] = {}
    for r in finished:
        if r["modelled_epe_w"] is None:
            why = r["modelled_derivation"] or "its final summary carries no modelled EPE"
            why = why.removeprefix("no modelled EPE: ")
            reasons.setdefault(why, []).append(r["node"])
    if reasons:
        parts = [f"node(s) {node_list(nodes)}: {why}" for why, nodes in reasons.items()]
        return None, None, "no modelled job EPE: " + "; ".join(parts[:5])
    value = sum(float(r["modelled_epe_w"]) for r in finished)
    sources = {str(r["modelled_source"]) for r in finished}
    label = next((s for s in ("synthetic", "estimated") if s in sources), "measured")
    note = (
        f"modelled job EPE {value:.2f} W ({label}): the sum of {len(finished)} finished "
        "node(s)' modelled EPEs, each at its node's own interval (derivations per node)"
    )
    others = [r["node"] for r in rows if r["state"] != "finished"]
    if others:
        note += (
            f"; it covers the finished nodes only, not node(s) {node_list(others)} (died or "
            "unmanaged), which the observed figure may include"
        )
    return value, label, note


def node_list(nodes: Sequence[int], groups: int = 10) -> str:
    """Node indices as ranges (``0-3, 7``), at most ``groups`` of them, then how many more."""
    ranges: list[list[int]] = []
    for k in sorted(nodes):
        if ranges and k == ranges[-1][1] + 1:
            ranges[-1][1] = k
        else:
            ranges.append([k, k])
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges[:groups])
    return text + (f", ... ({len(nodes)} in all)" if len(ranges) > groups else "")


def _bad(note: str) -> bool:
    return any(w in note for w in ("fail", "degraded", "lower bound", "unavailable"))


def _machines(rows: Sequence[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    """The accounted nodes grouped by machine (their host id; a node without one is its own
    machine), in node order."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r["host_id"] or f"node-{r['node']}", []).append(r)
    return list(groups.values())


def _machine_energy(nodes: Sequence[Mapping[str, Any]]) -> float:
    """One machine's energy in the job: every node on it read the whole machine over (almost)
    the same span, so the largest of their figures, not their sum."""
    return max((float(r["energy_j"]) for r in nodes if r["energy_j"] is not None), default=0.0)


def _shared_notes(machines: Sequence[Sequence[Mapping[str, Any]]]) -> list[str]:
    return [
        f"nodes {node_list([r['node'] for r in m])} are one machine (host id "
        f"{m[0]['host_id']}, whatever their host names): each node's meters read the whole "
        "machine, so the job total counts it once (the largest of their figures); the node "
        "rows and the per-kind sums show each node's own reading"
        for m in machines
        if len(m) > 1
    ]


def _node_notes(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    out = [
        f"node {r['node']} shared its node: another {r['shared_with']} controlled its "
        "settings, so it ran with control off (decided and accounted, never applied)"
        for r in rows
        if r.get("shared_with")
    ]
    for r in rows:
        out += _quiet_and_previous_notes(r)
    for r in rows:
        if r["state"] == "died":
            out.append(f"node {r['node']} died ({r['reason']}): {r['accounting_ends']}")
        elif r["state"] == "unmanaged":
            out.append(f"node {r['node']} unmanaged ({r['reason']}): not set, metered or restored")
        elif r["state"] != "finished":
            out.append(f"node {r['node']} never sent its final summary ({r['state']})")
    return out


def silent_nodes(rows: Sequence[Mapping[str, Any]]) -> list[int]:
    """The finished nodes whose socket heard no announcement (no notifier reached it)."""
    return [r["node"] for r in rows if r["state"] == "finished" and r.get("announcements") == 0]


def _quiet_and_previous_notes(r: Mapping[str, Any]) -> list[str]:
    """A node that heard nothing, and the work its run in an earlier job lost."""
    out = []
    if r["state"] == "finished" and r.get("announcements") == 0:
        out.append(
            f"node {r['node']} heard no announcement: no notifier (the checkpoint library, "
            "greenckpt notify, an interposer) reached its socket, so no phase of it was "
            "accounted there (did every rank run on other nodes?)"
        )
    lost = r.get("previous_lost")
    if isinstance(lost, Mapping):
        energy = lost.get("energy_j")
        joules = "no energy figure" if energy is None else f"{energy:.1f} J"
        source = lost.get("energy_source") or "no node figure"
        out.append(
            f"node {r['node']}: {float(lost['seconds']):.3f} s and {joules} ({source}) of work "
            f"lost by its run in the previous job, not in this job's totals; source: "
            f"{lost['source']}"
        )
    return out


def _combine(sources: Iterable[str | None]) -> str | None:
    seen = list(sources)
    if not seen or any(s is None for s in seen):
        return None
    return "estimated" if "estimated" in seen else "measured"


def _add(out: dict[str, dict[str, Any]], key: str, total: Mapping[str, Any]) -> None:
    row = out.setdefault(
        key,
        {
            "count": 0,
            "failed": 0,
            "node_seconds": 0.0,
            "energy_j": 0.0,
            "nodes": 0,
            "bytes": 0,
            "bytes_unknown": 0,
        },
    )
    if "bytes" in total:
        row["bytes"] += int(total.get("bytes") or 0)
        row["bytes_unknown"] += int(total.get("bytes_unknown") or 0)
    elif key.partition("\0")[0] in IO_KINDS:  # a died node's progress, an older summary
        row["bytes_unknown"] += int(total.get("count", 0))
    row["count"] += int(total.get("count", 0))
    row["failed"] += int(total.get("failed", 0))
    row["node_seconds"] += float(total.get("seconds", 0.0))
    row["nodes"] += 1
    energy = total.get("energy_j")
    before = row["energy_j"]
    row["energy_j"] = None if energy is None or before is None else before + energy
    sources = row.setdefault("sources", [])
    if total.get("source") and total["source"] not in sources:
        sources.append(total["source"])


def _by_kind(nodes: Sequence[NodeView]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for v in nodes:
        if v.state == "finished" and v.summary is not None:
            for kind, total in (v.summary.get("by_kind") or {}).items():
                _add(out, kind, total)
        elif v.state == "died" and v.progress is not None:
            for kind, total in v.progress.get("by_kind", {}).items():
                _add(out, kind, {**total, "source": v.power_source})
    for row in out.values():
        row["source"] = _combine(row.pop("sources") or [None])
    return out


def _by_level(nodes: Sequence[NodeView]) -> list[dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for v in nodes:
        for total in (v.summary or {}).get("by_level") or []:
            _add(out, f"{total['kind']}\0{total['level']}", total)
    rows = []
    for key, row in sorted(out.items()):
        kind, level = key.split("\0")
        row["source"] = _combine(row.pop("sources") or [None])
        rows.append({"kind": kind, "level": int(level), **row})
    return rows


def _series(nodes: Sequence[NodeView], t0: float, t1: float) -> dict[str, Any] | None:
    """The job's power on one grid: the sum over nodes, min and max across nodes, and the
    outlier node (mean power farthest from the nodes' median)."""
    curves = []
    machines: list[str] = []
    for v in nodes:
        s = v.series
        if not s or not s["t_s"] or v.t0_unix is None:
            continue
        t = np.asarray(s["t_s"]) + (v.t0_unix - t0)
        curves.append((v.node, t, np.asarray(s["power_w"]), s.get("source")))
        machines.append(v.host_id or f"node-{v.node}")
    if not curves or t1 <= t0:
        return None
    grid = np.linspace(0.0, t1 - t0, GRID_POINTS)
    stack = np.full((len(curves), grid.size), np.nan)
    for i, (_, t, w, _src) in enumerate(curves):
        inside = (grid >= t[0]) & (grid <= t[-1])
        stack[i, inside] = np.interp(grid[inside], t, w)
    covered = ~np.all(np.isnan(stack), axis=0)
    means = np.array([float(np.mean(w)) for _, _, w, _ in curves])
    outlier = int(np.argmax(np.abs(means - np.median(means)))) if len(curves) > 2 else None

    def col(values: np.ndarray) -> list[float | None]:
        return [
            float(x) if ok and math.isfinite(x) else None
            for x, ok in zip(values, covered, strict=True)
        ]

    with warnings.catch_warnings():  # a grid point no node covers: left None below
        warnings.simplefilter("ignore", RuntimeWarning)
        total = _machine_sum(stack, machines)
        low, high = np.nanmin(stack, axis=0), np.nanmax(stack, axis=0)
    return {
        "t_s": [float(x) for x in grid],
        "sum_w": col(total),
        "min_w": col(low),
        "max_w": col(high),
        "outlier_node": None if outlier is None else curves[outlier][0],
        "outlier_w": (
            None
            if outlier is None
            else [None if math.isnan(x) else float(x) for x in stack[outlier]]
        ),
        "machines": len(set(machines)),
        "nodes": len(curves),
        "source": _combine(src for *_, src in curves),
    }


def _machine_sum(stack: np.ndarray, machines: Sequence[str]) -> np.ndarray:
    """The job's power at each grid point: per machine the largest of its nodes' curves (they
    all read that whole machine), summed over machines."""
    per_machine = [
        np.nanmax(stack[[i for i, m in enumerate(machines) if m == name]], axis=0)
        for name in dict.fromkeys(machines)
    ]
    total: np.ndarray = np.nansum(np.vstack(per_machine), axis=0)
    return total


def _compare(doc: Mapping[str, Any], label: str, base: Mapping[str, Any]) -> dict[str, Any]:
    """This job against a baseline job by wu2018 Equation 2 (percent of the baseline)."""

    def pct(a: Any, b: Any) -> float | None:
        if a is None or b is None:
            return None
        value = percent_difference(float(a), float(b))
        return None if math.isnan(value) else value

    t, bt = doc["total"], base["total"]
    return {
        "baseline": label,
        "runtime_pct": pct(t["seconds"], bt["seconds"]),
        "energy_pct": pct(t["energy_j"], bt["energy_j"]),
        "power_pct": pct(t["mean_power_w"], bt["mean_power_w"]),
        "epe_pct": pct(doc["epe"]["observed_w"], base["epe"]["observed_w"]),
        "source": _combine([t["source"], bt["source"]]),
    }


def load_job_report(path: str | os.PathLike[str]) -> JobReport:
    """A job report written by :meth:`JobReport.write_json` (a baseline for ``--compare``)."""
    target = Path(path)
    try:
        doc = json.loads(read_regular(target).decode("utf-8"))
    except OSError as exc:
        raise InvalidValueError(f"cannot read the job report {target}: {exc.strerror}") from None
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise InvalidValueError(f"{target} is not a job report: not JSON") from None
    if not isinstance(doc, dict) or doc.get("format") != JOB_REPORT_FORMAT:
        raise InvalidValueError(
            f"{target} is not a greenckpt job report (format {JOB_REPORT_FORMAT!r}); "
            "compare a job with a job report of another run"
        )
    if doc.get("format_version") != JOB_REPORT_VERSION:
        raise InvalidValueError(
            f"{target}: job report format_version {doc.get('format_version')!r}; this "
            f"greenckpt reads {JOB_REPORT_VERSION}"
        )
    return JobReport(doc)

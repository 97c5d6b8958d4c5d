"""A job report as plain text: one line per node, the job's phases per kind and level (with
the bytes of the I/O phases), the work each node's run in an earlier job lost, the totals and
EPE, and why a node is missing from them.

Why here: the figures are :mod:`greenckpt.runtime.job_report`'s; showing them is this layer's
job. Every energy figure is printed with its source, and a node that died or was never managed
is named with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from greenckpt.phases import IO_KINDS
from greenckpt.report.run_text import bytes_cell, previous_lost_line
from greenckpt.runtime.job_report import JobReport
from greenckpt.runtime.records import PreviousLoss

__all__ = ["render_job_text"]


def render_job_text(report: JobReport) -> str:
    """The text ``greenckpt run --nodes-emulated N`` prints."""
    doc = report.doc
    job = doc["job"]
    total = doc["total"]
    title = f"greenckpt job report: job {job['id']} ({job['launcher']}, {job['nodes']} node(s))"
    if doc.get("synthetic"):
        title += " [SYNTHETIC: fake platform on some node, no real measurement]"
    lines = [title]
    lines += _table(
        ("node", "state", "host", "seconds", "joules", "W", "source"),
        [_node_cells(r) for r in doc["nodes"]],
    )
    lines.append("job phases per kind (sums over nodes):")
    rows = []
    for kind, t in doc["by_kind"].items():
        rows.append(_kind_cells(kind, t))
        rows += [_kind_cells(f"  L{lv['level']}", lv) for lv in _levels(doc, kind)]
    lines += _table(("phase", "count", "nodes", "bytes", "node-s", "joules", "source"), rows)
    lines += _previous_lines(doc["nodes"])
    complete = "" if total["complete"] else " (INCOMPLETE: see notes)"
    lines.append(
        f"job total: {total['seconds']:.3f} s wall, {total['node_seconds']:.3f} node-s, "
        f"{_num(total['energy_j'], 1)} J, {_num(total['mean_power_w'], 1)} W "
        f"({total['source'] or 'no node figure'}){complete}"
    )
    epe = doc["epe"]
    line = (
        f"job EPE observed {_num(epe['observed_w'], 2)} W ({epe['observed_source'] or 'n/a'}) "
        f"over {_num(doc['useful_compute_s'], 3)} s of useful compute"
    )
    if epe.get("modelled_w") is not None:
        line += (
            f"; modelled {_num(epe['modelled_w'], 2)} W ({epe['modelled_source']}): observed "
            f"{_pct(epe.get('observed_vs_modelled_pct'))} vs modelled"
        )
    lines += [line, f"  {epe['modelled_note']}"]
    for c in doc.get("comparisons", []):
        lines.append(
            f"vs baseline job {c['baseline']} (wu2018 Eq. 2, {c['source'] or 'n/a'}): runtime "
            f"{_pct(c['runtime_pct'])}, power {_pct(c['power_pct'])}, energy "
            f"{_pct(c['energy_pct'])}, EPE {_pct(c['epe_pct'])}"
        )
    lines.append(
        "  job W = job energy / wall time (from the leader's start to its end, start-up "
        "included); a node's W = its energy / the span its agent accounted"
    )
    series = doc.get("series")
    if series:
        odd = series.get("outlier_node")
        lines.append(
            f"power over time: job sum with min/max across {series['nodes']} node(s)"
            + (f"; outlier node {odd}" if odd is not None else "")
            + f" ({series['source'] or 'n/a'})"
        )
    lines += _lever_lines(doc.get("phases") or [])
    if doc["notes"]:
        lines.append("notes:")
        lines += [f"  - {n}" for n in doc["notes"]]
    return "\n".join(lines) + "\n"


def _lever_lines(phases: Sequence[Mapping[str, Any]]) -> list[str]:
    """The levers beyond the core clock the job phases applied (value and source, per kind:
    the same on every phase is one row) and the lever failures; nothing when none was used,
    so a job without them prints what it always did."""
    applied: dict[tuple[str, str, str], int] = {}
    failures: list[str] = []
    failed = 0
    for p in phases:
        for lever, values in (p.get("levers") or {}).items():
            key = (str(p["kind"]), str(lever), "; ".join(values))
            applied[key] = applied.get(key, 0) + 1
        failed += int(p.get("lever_failures") or 0)
        failures += [str(n) for n in p.get("lever_failure_notes") or ()]
    lines: list[str] = []
    if applied:
        lines.append("levers applied beyond the CPU frequency and C-states (value (source)):")
        rows = [("phase", "lever", "value (source)", "job phases")]
        rows += [(*key, str(n)) for key, n in applied.items()]
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        lines += [
            "  " + "  ".join(c.ljust(widths[i]) for i, c in enumerate(row)).rstrip() for row in rows
        ]
    if failed:
        lines.append(
            f"levers that failed on {failed} node phase(s) (put back as found; the phase went on):"
        )
        lines += [f"  - {n}" for n in dict.fromkeys(failures)]
    return lines


def _levels(doc: Mapping[str, Any], kind: str) -> list[dict[str, Any]]:
    return [lv for lv in doc["by_level"] if lv["kind"] == kind]


def _node_cells(r: Mapping[str, Any]) -> tuple[str, ...]:
    seconds = r["seconds"]
    energy = r["energy_j"]
    power = None if energy is None or not seconds else energy / seconds
    return (
        str(r["node"]),
        r["state"]
        + (f", {r['ended']}" if r.get("ended") not in (None, "completed") else "")
        + (f" ({r['reason']})" if r["reason"] and r["state"] != "finished" else ""),
        r["host"] or "-",
        _num(seconds, 3),
        _num(energy, 1),
        _num(power, 1),
        r["power_source"] or "no node figure",
    )


def _previous_lines(nodes: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per node, the work its run in the previous job lost (never in this job's totals)."""
    lost = [(r["node"], r["previous_lost"]) for r in nodes if r.get("previous_lost")]
    if not lost:
        return []
    lines = ["work lost by the previous job (per node, from its reports; not in the totals):"]
    for node, loss in lost:
        lines.append(f"  node {node}: " + previous_lost_line(PreviousLoss.from_dict(loss)))
    return lines


def _kind_cells(name: str, t: Mapping[str, Any]) -> tuple[str, ...]:
    count = f"{t['count']}" + (f" ({t['failed']} failed)" if t.get("failed") else "")
    kind = name.strip() if not name.startswith("  L") else ""
    io = kind in IO_KINDS or not kind
    return (
        name,
        count,
        str(t["nodes"]),
        bytes_cell(t.get("bytes"), int(t.get("bytes_unknown") or 0)) if io else "",
        f"{t['node_seconds']:.3f}",
        _num(t["energy_j"], 1),
        t["source"] or "no node figure",
    )


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> list[str]:
    every = [header, *rows]
    widths = [max(len(row[i]) for row in every) for i in range(len(header))]
    last = len(header) - 1
    return [
        "  ".join(
            c.ljust(widths[i]) if i in (0, 1, last) else c.rjust(widths[i])
            for i, c in enumerate(row)
        ).rstrip()
        for row in every
    ]


def _num(value: float | None, decimals: int) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.{decimals}f}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:+.2f} %"

"""A run report as plain text for the terminal: per kind (and per level) count, bytes (I/O
phases), seconds, CPU-seconds (when the run measured them), joules, watts and source, then the
run's totals, useful compute, the work an earlier run lost (when this run restarted from its
checkpoint), EPE, comparisons, the levers beyond the core clock applied (only when some were,
or failed) and notes.

Why here: the run report's figures are the runtime's (:mod:`greenckpt.runtime.run_report`);
showing them is this layer's job, for ``greenckpt run``, ``greenckpt demo`` and a Python user
alike. Every figure is printed with its source, and a synthetic report says SYNTHETIC.
"""

from __future__ import annotations

import math

from greenckpt.phases import IO_KINDS
from greenckpt.runtime.job_phase import LEVER_FAILED
from greenckpt.runtime.records import PreviousLoss
from greenckpt.runtime.run_report import KindTotal, RunReport
from greenckpt.units import format_size

__all__ = ["bytes_cell", "lever_lines", "previous_lost_line", "render_run_text"]


def render_run_text(report: RunReport) -> str:
    """The plain-text table of ``report`` (what ``greenckpt run`` prints)."""
    lines = _title_lines(report)
    lines += _table_lines(report)
    lines.append(
        f"useful compute {report.useful_seconds:.3f} s (the work that survived; of which "
        f"rework {report.rework_seconds:.3f} s), lost {report.lost_seconds:.3f} s (work after "
        "the checkpoint a restart read back, and the downtime before it)"
    )
    if report.previous_lost is not None:
        lines.append(previous_lost_line(report.previous_lost))
    lines.append(_epe_line(report))
    for c in report.comparisons():
        label = report.source_label(c.source) if not c.synthetic else f"{c.source}, SYNTHETIC"
        lines.append(
            f"vs baseline {c.baseline} (wu2018 Eq. 2, {label}): runtime "
            f"{_pct(c.runtime_pct)}, node power {_pct(c.power_pct)}, energy "
            f"{_pct(c.energy_pct)}, EPE {_pct(c.epe_pct)}"
        )
    lines.extend(lever_lines(report))
    if report.notes:
        lines.append("notes:")
        lines.extend(f"  - {n}" for n in report.notes)
    return "\n".join(lines) + "\n"


def _title_lines(report: RunReport) -> list[str]:
    title = "greenckpt run report"
    if report.policy:
        title += f" (policy {report.policy})"
    if report.synthetic:
        title += " [SYNTHETIC: fake platform, no real measurement]"
    scope = f": {report.power_scope}" if report.power_scope else ""
    meters = f" from {', '.join(report.meters)}" if report.meters else ""
    lines = [title, f"node power {report.source_label(report.power_source)}{meters}{scope}"]
    if _has_cpu(report):
        lines.append(
            "CPU-s: the node's busy CPU-seconds over all CPUs, measured from /proc/stat "
            "(a measurement, not an energy estimate)"
        )
    return lines


def _has_cpu(report: RunReport) -> bool:
    """Whether the report has CPU-seconds to show (a report saved before they were
    recorded, or a run that could not read /proc/stat, keeps the table without the column)."""
    return report.total_cpu_s is not None or any(r.cpu_s is not None for r in report.records)


def _table_lines(report: RunReport) -> list[str]:
    """The per-kind table, levels indented under their kind, and the run's total row (a
    CPU-s column after seconds when the report has CPU-seconds)."""
    header = ("phase", "count", "bytes", "seconds", "joules", "W", "source")
    rows: list[tuple[str, ...]] = [header]
    cpu: list[str] = ["CPU-s"]
    levels = report.by_level()
    for kind, total in report.by_kind().items():
        rows.append(_row(report, kind, total))
        cpu.append(_num(total.cpu_s, 3))
        for lv in (t for t in levels if t.kind == kind):
            rows.append(_row(report, f"  L{lv.level}", lv))
            cpu.append(_num(lv.cpu_s, 3))
    rows.append(
        (
            "run total",
            "",
            "",
            f"{report.total_seconds:.3f}",
            _num(report.total_energy_j, 1),
            _num(report.mean_power_w, 1),
            report.source_label(report.power_source),
        )
    )
    cpu.append(_num(report.total_cpu_s, 3))
    if _has_cpu(report):
        rows = [(*row[:4], c, *row[4:]) for row, c in zip(rows, cpu, strict=True)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    last = len(rows[0]) - 1
    lines = []
    for row in rows:
        cells = [
            cell.ljust(widths[i]) if i in (0, last) else cell.rjust(widths[i])
            for i, cell in enumerate(row)
        ]
        lines.append("  ".join(cells).rstrip())
    return lines


def lever_lines(report: RunReport) -> list[str]:
    """The levers beyond the CPU frequency and C-states the run applied — per kind and level,
    lever, value, the settings' source (profile lookup, fixed, baseline) and how many phases
    — and every lever that failed (put back; the phase went on). Empty when the run applied
    none and none failed, so a run without them prints the table it always did."""
    applied: dict[tuple[str, str, str, str], int] = {}
    failed: dict[tuple[str, str], int] = {}
    for r in report.records:
        s = r.settings
        if s is None:
            continue
        phase = r.kind if r.level is None else f"{r.kind} L{r.level}"
        for lever, value in s.levers.items():
            key = (phase, lever, value, s.source)
            applied[key] = applied.get(key, 0) + 1
        for note in (n for n in s.notes if n.startswith(LEVER_FAILED)):
            failed[(phase, note)] = failed.get((phase, note), 0) + 1
    lines: list[str] = []
    if applied:
        rows = [("phase", "lever", "value", "source", "phases")]
        rows += [(*key, str(count)) for key, count in applied.items()]
        widths = [max(len(row[i]) for row in rows) for i in range(5)]
        lines.append("levers applied beyond the CPU frequency and C-states:")
        lines += [
            "  " + "  ".join(c.ljust(widths[i]) for i, c in enumerate(row)).rstrip() for row in rows
        ]
    if failed:
        lines.append("levers that failed (put back as found; the phase went on):")
        lines += [f"  - {phase} ({n} phase(s)): {note}" for (phase, note), n in failed.items()]
    return lines


def _epe_line(report: RunReport) -> str:
    epe = (
        f"EPE observed {_num(report.observed_epe, 2)} W "
        f"({report.source_label(report.power_source)})"
    )
    if report.predicted_epe is not None:
        epe += f"; predicted {report.predicted_epe:.2f} W (model"
        epe += f", {report.predicted_source} powers)" if report.predicted_source else ")"
        pct = report.epe_vs_predicted_pct
        if pct is not None:
            epe += f"; observed vs predicted {_pct(pct)}"
    return epe


def _row(report: RunReport, name: str, t: KindTotal) -> tuple[str, ...]:
    source = report.source_label(t.source)
    if t.background:
        source += " (background: overlaps other phases)"
    count = f"{t.count}" + (f" ({t.failed} failed)" if t.failed else "")
    return (
        name,
        count,
        bytes_cell(t.bytes, t.bytes_unknown) if t.kind in IO_KINDS else "",
        f"{t.seconds:.3f}",
        _num(t.energy_j, 1),
        _num(t.mean_power_w, 1),
        source,
    )


def bytes_cell(known: int | None, unknown: int) -> str:
    """An I/O row's bytes: the known sizes summed (``"64 MiB"``), ``"unknown"`` when no
    record's size is known, ``">= 64 MiB (2 unknown)"`` when only some are."""
    if not known:
        return "unknown" if unknown else "0 B"
    text = format_size(known)
    return f">= {text} ({unknown} unknown)" if unknown else text


def previous_lost_line(loss: PreviousLoss) -> str:
    """The line of the work an earlier run lost: seconds, energy with its source and basis,
    and where the figures come from."""
    energy = "no energy figure"
    if loss.ended == "completed":
        energy = "0 J (it completed)"
    elif loss.energy_j is not None:
        energy = f"{loss.energy_j:.1f} J ({loss.energy_source or 'no node figure'}, from "
        energy += f"{loss.energy_basis})"
    levels = ""
    if loss.restart_level is not None:
        levels = f"; the restart read level {loss.restart_level}"
    return (
        f"lost in the previous run {loss.seconds:.3f} s, {energy}{levels}; source: "
        f"{loss.source} (not in this run's totals): {loss.note}"
    )


def _num(value: float | None, decimals: int) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.{decimals}f}"


def _pct(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:+.2f} %"

"""A run report as plain text for the terminal: per kind (and per level) count, seconds,
joules, watts and source, then the run's totals, useful compute, EPE, comparisons and notes.

Why here: the run report's figures are the runtime's (:mod:`greenckpt.runtime.report`);
showing them is this layer's job, for ``greenckpt run``, ``greenckpt demo`` and a Python user
alike. Every figure is printed with its source, and a synthetic report says SYNTHETIC.
"""

from __future__ import annotations

import math

from greenckpt.runtime.report import KindTotal, RunReport

__all__ = ["render_run_text"]


def render_run_text(report: RunReport) -> str:
    """The plain-text table of ``report`` (what ``greenckpt run`` prints)."""
    lines = _title_lines(report)
    lines += _table_lines(report)
    lines.append(
        f"useful compute {report.useful_seconds:.3f} s (the work that survived; of which "
        f"rework {report.rework_seconds:.3f} s), lost {report.lost_seconds:.3f} s (work after "
        "the checkpoint a restart read back, and the downtime before it)"
    )
    lines.append(_epe_line(report))
    for c in report.comparisons():
        label = report.source_label(c.source) if not c.synthetic else f"{c.source}, SYNTHETIC"
        lines.append(
            f"vs baseline {c.baseline} (wu2018 Eq. 2, {label}): runtime "
            f"{_pct(c.runtime_pct)}, node power {_pct(c.power_pct)}, energy "
            f"{_pct(c.energy_pct)}, EPE {_pct(c.epe_pct)}"
        )
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
    return [title, f"node power {report.source_label(report.power_source)}{meters}{scope}"]


def _table_lines(report: RunReport) -> list[str]:
    """The per-kind table, levels indented under their kind, and the run's total row."""
    header = ("phase", "count", "seconds", "joules", "W", "source")
    rows: list[tuple[str, ...]] = [header]
    levels = report.by_level()
    for kind, total in report.by_kind().items():
        rows.append(_row(report, kind, total))
        for lv in (t for t in levels if t.kind == kind):
            rows.append(_row(report, f"  L{lv.level}", lv))
    rows.append(
        (
            "run total",
            "",
            f"{report.total_seconds:.3f}",
            _num(report.total_energy_j, 1),
            _num(report.mean_power_w, 1),
            report.source_label(report.power_source),
        )
    )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for row in rows:
        cells = [
            row[i].ljust(widths[i]) if i in (0, 5) else row[i].rjust(widths[i])
            for i in range(len(header))
        ]
        lines.append("  ".join(cells).rstrip())
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
        f"{t.seconds:.3f}",
        _num(t.energy_j, 1),
        _num(t.mean_power_w, 1),
        source,
    )


def _num(value: float | None, decimals: int) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.{decimals}f}"


def _pct(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:+.2f} %"
